"""Fixtures of the capacity-planning tests: small workloads, hardware without the catalog."""

from __future__ import annotations

import pytest
from tuning_helpers import poisson_workload

from servesim.engine import ConstantStepTime, LinearStepTime
from servesim.tuning import FixedHardware, PercentileSLO, Workload


@pytest.fixture
def workload() -> Workload:
    return poisson_workload()


@pytest.fixture
def linear_hw() -> FixedHardware:
    return FixedHardware(LinearStepTime(), 3000)


@pytest.fixture
def constant_hw() -> FixedHardware:
    return FixedHardware(ConstantStepTime(step_time_s=0.01), 3000)


@pytest.fixture
def slo() -> PercentileSLO:
    return PercentileSLO.parse("ttft_p99_ms=400,tpot_p99_ms=40")
