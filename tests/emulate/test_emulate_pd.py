"""The emulator disaggregated (``servesim emulate --prefill-replicas N --decode-replicas M``): one
OpenAI endpoint whose tokens stream from the decode replica, TTFT over prefill + KV transfer, a
``pool`` label on /metrics with the transfers as vLLM's NixlConnector reports them, a disconnect
aborting both legs; the CLI's flags checked as ``servesim cluster`` checks them, and the layout
carried to the Ray Serve ingress."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from emulate_helpers import MODEL
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from polling import wait_until
from servesim import EngineConfig, Replica, replica_setup
from servesim.cli.main import app
from servesim.cluster.pd import pd_context
from servesim.emulate.emulator import PDLayout

runner = CliRunner()
PD = ["--prefill-replicas", "1", "--decode-replicas", "1"]


def layout(link: str = "tcp-25g", n_decode: int = 1) -> PDLayout:
    """1PnD of the default deployment (calibrated Llama-3.1-8B on one H100) over ``link``."""
    setup = replica_setup(EngineConfig(max_num_seqs=64, max_model_len=4096))
    return PDLayout(
        [Replica("p0", setup.config, setup.step_time)],
        [Replica(f"d{k}", setup.config, setup.step_time) for k in range(n_decode)],
        pd_context("llama-3.1-8b", 1, 1, link),
    )


def samples(url: str) -> list[Any]:
    text = httpx.get(url + "/metrics", timeout=5).text
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def value(ss: list[Any], name: str, **labels: str) -> float:
    got = [s.value for s in ss if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return float(got[0])


def test_a_completion_streams_from_the_decode_leg_after_prefill_and_transfer(make_server: Any) -> None:
    srv = make_server(time_scale=1.0, disaggregated=layout())
    body = {"model": MODEL, "prompt": "hello " * 2000, "max_tokens": 6, "stream": True}  # 3,000 tokens
    t0 = time.monotonic()
    first: float | None = None
    words: list[str] = []
    with httpx.Client(timeout=60) as c, c.stream("POST", srv.url + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                if first is None:
                    first = time.monotonic() - t0
                words += line.split('"text":"')[1].split('"')[0].split()
    assert first is not None and words == ["tok"] * 6
    ss = samples(srv.url)
    prefill = value(ss, "vllm:request_prefill_time_seconds_sum", engine="p0", pool="prefill")
    leg = value(ss, "servesim:kv_transfer_leg_seconds_sum", engine="d0", pool="decode")
    wire = value(ss, "vllm:nixl_xfer_time_seconds_sum", engine="d0", pool="decode")
    ttft = value(ss, "vllm:time_to_first_token_seconds_sum", engine="d0", pool="decode")
    # 3,000 tokens of Llama-3.1-8B KV (~393 MB) over 25 Gbit/s: ~0.2 s on the wire
    assert 0.1 < wire <= leg and prefill > 0.0
    assert ttft > prefill + leg  # the first decode step comes on top
    assert first > prefill + leg  # what the client waited (wall = simulated at time scale 1)
    assert value(ss, "vllm:nixl_bytes_transferred_count", engine="d0", pool="decode") == 1
    assert value(ss, "vllm:nixl_bytes_transferred_sum", engine="d0", pool="decode") == pytest.approx(
        3000 * layout().link.bytes_total(1), rel=0.02
    )  # whole blocks of the prompt
    # both pools on /metrics, each replica under its engine name and pool
    assert {(s.labels["engine"], s.labels["pool"]) for s in ss if s.name == "vllm:num_requests_running"} == {
        ("p0", "prefill"),
        ("d0", "decode"),
    }
    assert value(ss, "vllm:generation_tokens_total", engine="d0", pool="decode") == 6
    assert value(ss, "vllm:request_success_total", engine="d0", pool="decode", finished_reason="length") == 1


def test_a_disconnect_during_the_transfer_aborts_both_legs_and_frees_their_blocks(make_server: Any) -> None:
    srv = make_server(time_scale=20.0, disaggregated=layout())  # ~5 s of wall time on the link
    fleet = srv.emulator.fleet
    body = {"model": MODEL, "prompt": "hello " * 2500, "max_tokens": 200, "stream": True}
    with httpx.Client(timeout=60) as c, c.stream("POST", srv.url + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        # the read has started
        wait_until(lambda: srv.call(lambda: bool(fleet.cluster.run_.transfers)), 60, "no transfer", 0.02)
        kv = {m.name: m.kv_usage for m in srv.call(fleet.replica_metrics)}  # type: ignore[union-attr]
    assert kv["p0"] > 0 and kv["d0"] > 0  # the prompt's KV on both sides while it moves

    def freed() -> bool:
        ss = samples(srv.url)
        usage = [s.value for s in ss if s.name == "vllm:kv_cache_usage_perc"]
        aborted = [
            s.value
            for s in ss
            if s.name == "vllm:request_success_total" and s.labels.get("finished_reason") == "abort"
        ]
        return aborted == [1.0] and usage == [0.0, 0.0]

    wait_until(freed, 60, "the abort freeing both sides' KV", 0.1)
    legs = srv.call(lambda: list(fleet.cluster.run_.legs))
    assert [(x.landed, x.aborted) for x in legs] == [(False, True)]  # the read was cut
    failed = [s.value for s in samples(srv.url) if s.name == "vllm:nixl_num_failed_transfers_total"]
    assert failed == []  # an abort is not a failed transfer
    assert srv.emulator.num_open == 0
    srv.call(fleet.check_invariants)


def test_a_lost_decode_replica_is_recovered_and_listed(make_server: Any) -> None:
    srv = make_server(time_scale=4.0, disaggregated=layout("rdma-400g", n_decode=2))
    body = {"model": MODEL, "prompt": "hello " * 400, "max_tokens": 400, "stream": True}
    with httpx.Client(timeout=60) as c, c.stream("POST", srv.url + "/v1/completions", json=body) as r:
        n, words = 0, 0
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            n += 1
            words += len(line.split('"text":"')[1].split('"')[0].split())
            if n == 3:  # decoding on a decode replica now
                (stream,) = srv.emulator._streams.values()
                where = srv.call(lambda s=stream: srv.emulator.fleet.replica_of(s.req))
                ok = httpx.post(srv.url + "/admin/fail", json={"replica": where}, timeout=5)
                assert ok.status_code == 200, ok.text
        assert words == 400  # the stream went on from the other decode replica, no token twice
    moves = httpx.get(srv.url + "/admin/moves", timeout=5).json()["moves"]
    assert [(m["from"], m["strategy"]) for m in moves] == [(where, "recompute")]
    assert moves[0]["to"] in {"d0", "d1"} - {where}
    bad = httpx.post(srv.url + "/admin/fail", json={"replica": "replica-0"}, timeout=5)
    assert bad.status_code == 400 and "replicas: p0, d0, d1" in bad.text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--prefill-replicas", "1"], "--prefill-replicas and --decode-replicas go together"),
        (["--link", "rdma-200g"], "--link: only for a disaggregated fleet"),
        (["--short-prompt-tokens", "64"], "--short-prompt-tokens: only for a disaggregated fleet"),
        ([*PD, "--replicas", "2"], "--replicas: a disaggregated"),
        ([*PD, "--router", "random"], "--router: a disaggregated"),
        ([*PD, "--link", "nope"], "unknown link 'nope'; presets:"),
        ([*PD[:3], "2", "--fail", "d2@5"], "the decode pool has 2 (0..1)"),
        ([*PD, "--fail", "replica-0@5"], "use pN / dN"),
        (
            [*PD, "--fail", "d0@1", "--fail", "d0@2"],
            "node 'd0' fails at 2.0 s while already down",
        ),
    ],
)
def test_bad_disaggregated_flags_are_one_clear_error_before_ray_starts(args: list[str], words: str) -> None:
    res = runner.invoke(app, ["emulate", *args])
    assert res.exit_code != 0 and words in res.output, res.output
    assert "Traceback" not in res.output and "ray" not in res.output.lower()


def test_the_layout_reaches_the_ray_serve_ingress(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``servesim emulate`` hands Ray Serve (``EmulatorSettings``, pickled to the ingress):
    the resolved pools, the link and the failures by replica name; the ingress builds its
    emulator from them (Ray itself is not started here: tests/emulate/test_ray_serve.py does)."""
    from servesim.emulate import ray_serve
    from servesim.emulate.emulator import Emulator

    seen: list[ray_serve.EmulatorSettings] = []
    monkeypatch.setattr(ray_serve, "start", lambda settings, **_: seen.append(settings))
    monkeypatch.setattr(ray_serve, "stop", lambda: None)
    args = ["emulate", "--prefill-replicas", "1", "--decode-replicas", "2", "--link", "rdma-200g"]
    args += ["--short-prompt-tokens", "128", "--fail", "prefill:0@30+10", "--duration-s", "0.1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "emulating 1P2D (link rdma-200g) x llama-3.1-8b on http://127.0.0.1:8000/v1" in res.output
    assert "timed as: prefill llama-3.1-8b on 1 x h100" in res.output
    (settings,) = seen
    pd = settings.disaggregated
    assert pd is not None and settings.replicas == []
    assert [r.name for r in pd.prefill] == ["p0"] and [r.name for r in pd.decode] == ["d0", "d1"]
    assert pd.short_prompt_tokens == 128 and pd.link.bandwidth_gbps == 200
    assert all(r.config.max_model_len == 8192 for r in [*pd.prefill, *pd.decode])
    assert settings.failures == (("p0", 30.0, 10.0),)
    em = Emulator(settings.replicas, model=settings.model, failures=settings.failures, disaggregated=pd)
    assert em.fleet.names == ["p0", "d0", "d1"] and em.label_names == ("model_name", "engine", "pool")


@pytest.mark.ray
def test_a_disaggregated_fleet_on_ray_serve(serve_emulator: Callable[..., str]) -> None:
    """The layout on Ray Serve itself (the suite's shared one, tests/ray_session.py): a stream
    from the decode pool, both pools on /metrics."""
    ray_serve = pytest.importorskip("servesim.emulate.ray_serve")
    settings = ray_serve.EmulatorSettings(replicas=[], model=MODEL, time_scale=2.0, disaggregated=layout())
    url = serve_emulator(settings)
    body = {"model": MODEL, "prompt": "hello " * 2000, "max_tokens": 5}
    done = httpx.post(url + "/v1/completions", json=body, timeout=120)
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 5
    ss = samples(url)
    assert value(ss, "vllm:nixl_bytes_transferred_count", engine="d0", pool="decode") == 1
    assert value(ss, "vllm:generation_tokens_total", engine="d0", pool="decode") == 5
    ttft = value(ss, "vllm:time_to_first_token_seconds_sum", engine="d0", pool="decode")
    assert ttft > value(ss, "servesim:kv_transfer_leg_seconds_sum", engine="d0", pool="decode") > 0.1
    assert {s.labels["pool"] for s in ss if s.name == "vllm:num_requests_running"} == {"prefill", "decode"}
