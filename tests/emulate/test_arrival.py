"""A request arrives in the engine when the server received it: the engine runs ``lag_s`` behind
the clock, so a receipt stamped up to that long before the ingress saw it is kept exactly."""

from __future__ import annotations

import asyncio
import time

import pytest
from emulate_helpers import MODEL, replicas

from servesim.emulate.emulator import Emulator


def test_a_stamped_receipt_is_the_arrival_and_the_request_joins_its_step() -> None:
    async def run() -> tuple[float, float, float, tuple[float, float, float]]:
        emu = Emulator(replicas(1), model=MODEL, time_scale=4.0)
        assert 0 < emu.lag_s <= emu.frontend_latency_s
        emu.start()
        await asyncio.sleep(0.05)
        # Stamped half the lag ago. On a busy host this thread can be paused between the stamp
        # and the submit for longer than the lag, and then the stamp is rightly too old: that
        # try is not the case under test, so try again (an idle engine each time).
        for attempt in range(50):
            received = time.monotonic() - 0.5 * emu.lag_s * emu.time_scale
            key = emu.submit(f"a{attempt}", list(range(64)), 4, received_at=received)
            in_time = time.monotonic() - received < emu.lag_s * emu.time_scale
            r = emu.request(key)
            async for _ in emu.tokens(key):
                pass
            if in_time:
                break
        assert in_time, "never submitted within the lag in 50 tries"
        assert r.first_scheduled_s is not None
        # Stamped long before the engine's clock: it arrives at that clock (as early as it can).
        before = emu.sim_now() - emu.lag_s
        key_old = emu.submit("b", list(range(64, 128)), 4, received_at=time.monotonic() - 10.0)
        after = emu.sim_now() - emu.lag_s
        old = (before, emu.request(key_old).arrival_s, after)
        async for _ in emu.tokens(key_old):
            pass
        await emu.stop()
        return r.arrival_s, emu.sim_time(received), r.first_scheduled_s, old

    arrival, want, scheduled, (before, arrival_old, after) = asyncio.run(run())
    assert arrival == pytest.approx(want, abs=1e-9)
    assert scheduled == pytest.approx(arrival, abs=1e-9)  # an idle engine starts it on arrival
    assert before <= arrival_old <= after


def test_the_lag_must_fit_in_the_front_end_latency() -> None:
    with pytest.raises(ValueError, match="lag_s"):
        Emulator(replicas(1), model=MODEL, frontend_latency_s=0.004, lag_s=0.005)
