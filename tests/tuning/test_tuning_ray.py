"""The Ray executor runs the same study as the local one, on the suite's one Ray instance
(tests/ray_session.py: Ray takes minutes to start on a busy 2-core host); the executor uses a
Ray already up in the process, as it would one joined with ``--address``."""

from __future__ import annotations

import pytest
from tuning_helpers import SMALL_SPACE, poisson_workload

from servesim.engine import LinearStepTime
from servesim.tuning import FixedHardware, PercentileSLO, TuneSettings, space_from_mapping, tune

ray = pytest.importorskip("ray")


@pytest.mark.slow
@pytest.mark.ray
def test_ray_executor_returns_the_local_best_trial(local_ray: None) -> None:
    wl = poisson_workload(n=200)
    kw = {
        "space": space_from_mapping(SMALL_SPACE),
        "settings": TuneSettings(n_trials=4, seed=11, seeds=[0]),
        "n_jobs": 2,
    }
    hw = FixedHardware(LinearStepTime(), 3000)
    slo = PercentileSLO.parse("ttft_p99_ms=400,tpot_p99_ms=40")
    local = tune(wl, hw, slo, executor="local", **kw)  # type: ignore[arg-type]
    remote = tune(wl, hw, slo, executor="ray", **kw)  # type: ignore[arg-type]
    assert ray.is_initialized()  # the shared instance, not one the executor started and stopped
    assert local.best is not None and remote.best is not None
    assert remote.best.number == local.best.number
    assert remote.best.params == local.best.params and remote.best.values == local.best.values
    assert [(t.number, t.params, t.values) for t in remote.trials] == [
        (t.number, t.params, t.values) for t in local.trials
    ]
