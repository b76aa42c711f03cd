"""``PDCluster`` advanced piecewise and fed online: the same run as in one go, and an end where only
empty steps would remain (KV nobody reads) stops instead of stepping for ever."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from test_pd import _ctx, _rep, _trace

from servesim.cluster.config import FailureEvent
from servesim.cluster.pd import PDCluster
from servesim.cluster.pd_results import pd_result
from servesim.cluster.simulate import Replica
from servesim.engine.request import Request
from servesim.errors import InputError, InternalError
from servesim.traces.schema import Trace

ROWS = [(0.004 * i, 40 + (i * 37) % 400, 3 + i % 9) for i in range(60)]


@pytest.fixture
def alarm() -> Iterator[None]:
    """A hang guard (not a timing target): a loop that never ends fails the test instead."""

    def _raise(*_: object) -> None:
        raise TimeoutError("PDCluster did not stop")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _rows(cluster: PDCluster) -> list[tuple[str, float, float, int]]:
    res = pd_result(cluster.run_, cluster.link.bytes_total(1))
    return [(r.req_id, r.ttft_s, r.e2e_s, r.transfer_tokens) for r in res.requests]


def _sized(name: str) -> Replica:
    """Online there is no trace to size the context from: the replicas say it."""
    r = _rep(name)
    return Replica(name, r.config.model_copy(update={"max_model_len": 2048}), r.step_time)


def _cluster(trace: Trace, failures: list[FailureEvent] | None = None) -> PDCluster:
    return PDCluster(
        trace,
        [_sized("p0"), _sized("p1")],
        [_sized("d0"), _sized("d1")],
        _ctx(),
        short_prompt_tokens=64,
        failures=failures or [],
    )


@pytest.mark.parametrize("failures", [[], [FailureEvent(node="d1", time_s=0.05, recover_after_s=0.1)]])
def test_advanced_piecewise_equals_one_go(failures: list[FailureEvent]) -> None:
    whole = _cluster(_trace(ROWS), failures)
    whole.run()
    pieces = _cluster(_trace(ROWS), failures)
    t = 0.0
    while pieces.next_time() < float("inf"):
        t += 0.0137
        pieces.advance(t)
        assert pieces.now <= t
    pieces.finish()
    assert _rows(pieces) == _rows(whole)


def test_max_steps_stops_after_that_many_step_ends() -> None:
    c = _cluster(_trace(ROWS))
    assert c.advance(max_steps=5) == 5
    c.advance()
    c.finish()
    whole = _cluster(_trace(ROWS))
    whole.run()
    assert _rows(c) == _rows(whole)


def test_requests_submitted_online_run_as_trace_rows() -> None:
    whole = _cluster(_trace(ROWS))
    whole.run()
    online = _cluster(Trace.empty("<online>"))
    for i, (a, p, o) in enumerate(ROWS):
        online.advance(a)
        online.submit(online.make_request(f"r{i}", a, p, o))
    online.advance()
    run = online.finish()
    assert run.num_online == len(ROWS)

    def key(d: Request) -> tuple[str, float, float, int]:
        return (d.req_id, d.first_token, d.finish_time, d.num_output)

    assert sorted(map(key, run.decode_req.values())) == sorted(map(key, whole.run_.decode_req.values()))


def test_an_arrival_in_the_past_is_refused() -> None:
    c = _cluster(_trace(ROWS))
    c.advance(0.1)
    with pytest.raises(InputError, match="in the past"):
        c.submit(c.make_request("late", 0.01, 100, 4))


class _ProxyThatNeverForwards(PDCluster):
    """A broken proxy: prefill legs finish but no decode leg is ever sent, so the prefill replica
    keeps their KV for a read that never comes (vLLM would step on, empty, for ever)."""

    def _hand_off(self, r: object, t: float) -> None:
        return None


def test_kv_nobody_reads_ends_the_run_with_the_request_named(alarm: None) -> None:
    c = _ProxyThatNeverForwards(_trace([(0.0, 200, 4)]), [_rep("p0")], [_rep("d0")], _ctx())
    with pytest.raises(InternalError, match="r0 did not finish"):
        c.run()
