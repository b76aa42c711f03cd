"""The capacity view's load state and the SLO knee's rule, on a real sweep point made to fall
behind: "stable" is never shown where throughput trails the offered rate and the queue grows by
the queue test's own smallest counted overload, and the SLO never "holds" on an unstable queue."""

from __future__ import annotations

from servesim.engine import LinearStepTime
from servesim.traces import FixedLength, GeneratorSpec, PoissonArrivals
from servesim.tuning import Deployment, FixedHardware, PercentileSLO, Workload
from servesim.tuning.evaluate import RatePoint
from servesim.tuning.saturation import scan_rates, slo_holds
from servesim.tuning.stats import QueueTestSettings
from servesim.views.saturation import point_state


def _point() -> RatePoint:
    wl = Workload.from_spec(
        GeneratorSpec(
            num_requests=100,
            arrival=PoissonArrivals(rate=1.0),
            prompt=FixedLength(value=100),
            output=FixedLength(value=20),
        )
    )
    d = Deployment(max_num_seqs=16, max_num_batched_tokens=512, max_model_len=wl.default_max_model_len())
    (p,) = scan_rates(wl, d, FixedHardware(LinearStepTime(), 4000), [1.0], PercentileSLO(ttft_p99_ms=1e6))
    return p


def _behind(p: RatePoint, shortfall: float, slope: float) -> RatePoint:
    return p.model_copy(
        update={
            "throughput_rps": p.throughput_rps.model_copy(
                update={"mean": p.offered_rps.mean * (1 - shortfall)}
            ),
            "queue_slope": p.queue_slope.model_copy(update={"mean": slope}),
        }
    )


def test_load_state_follows_throughput_and_the_queue_tests_own_cut() -> None:
    p = _point()
    cut = QueueTestSettings().min_slope
    assert p.status == "STABLE" and point_state(p) == "stable"
    assert point_state(_behind(p, 0.10, cut)) == "overloaded"  # falls behind, queue grows
    assert point_state(_behind(p, 0.10, cut / 10)) == "stable"  # a window edge, no growth that counts
    assert point_state(_behind(p, 0.01, cut * 5)) == "stable"  # keeps up within the window's noise
    assert point_state(p.model_copy(update={"status": "QUEUE_SATURATED"})) == "unstable"


def test_the_slo_does_not_hold_on_an_unstable_queue() -> None:
    p = _point()
    assert p.slo_ok and slo_holds(p)
    assert not slo_holds(p.model_copy(update={"queue_saturated": True}))
