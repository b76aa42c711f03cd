"""The emulator against the offline predictor and the real run (issue 22's headline check).

Replays one sim2real experiment's workload (tests/fixtures/sim2real: a measured vLLM run, the
inference-perf shared-prefix workload) against ``servesim emulate`` on Ray Serve with an
open-loop asyncio client (inference-perf is not installed; this client sends each request at its
time, streams it and timestamps the chunks as inference-perf does), then compares the
client-measured TTFT / ITL / E2E means (divided by the time scale) with

* the offline prediction (``servesim sim2real``'s replay) for the same requests: target within 5 %;
* the real measurement of the whole run (stage -1): the emulator inherits the sim2real error.

The requests are sent at the offline replay's converged send times (its closed loop solved:
inference-perf's sessions send a round when the previous one finished), limited to the first
``--window-s`` simulated seconds (the whole run is 1,200 s). Prompts are token-id lists: each
session's shared system prompt, then tokens no other request has (what the predictor assumes).

``--server uvicorn`` serves the same app under plain uvicorn in a subprocess (no Ray): the
difference between the two is Ray Serve's share of the serving path.

Run: ``.venv/bin/python benchmarks/emulate_vs_sim2real.py [--experiment 20260217-155451]
[--window-s 40] [--time-scale 5] [--server ray|uvicorn]``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "sim2real"


def _prompt(i: int, prompt_len: int, group: str | None, prefix_len: int) -> list[int]:
    """Token ids: the group's shared prefix, then ids unique to request ``i``."""
    shared = min(prefix_len, prompt_len) if group is not None else 0
    gid = (abs(hash(("group", group))) % 10_000_000) * 100_000 if group is not None else 0
    head = [gid + k for k in range(shared)]
    tail = [2_000_000_000_000 + i * 1_000_000 + k for k in range(prompt_len - shared)]
    return head + tail


async def _one(
    client: httpx.AsyncClient, url: str, model: str, body_tokens: list[int], max_tokens: int, at: float
) -> tuple[float, float, float, int]:
    """Send at wall time ``at``; returns (send, first token, last token, tokens) wall times."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    sent = time.monotonic()
    first = last = math.nan
    n = 0
    body = {
        "model": model,
        "prompt": body_tokens,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            text = json.loads(line[6:])["choices"][0]["text"]
            if text:
                now = time.monotonic()
                if n == 0:
                    first = now
                last = now
                n += len(text.split())
    return sent, first, last, n


async def _replay(
    url: str, model: str, sends: np.ndarray, prompts: list[list[int]], outs: list[int], scale: float
) -> list[tuple[float, float, float, int]]:
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        t0 = time.monotonic() + 1.0
        tasks = [
            _one(client, url, model, p, o, t0 + float(s) * scale)
            for s, p, o in zip(sends, prompts, outs, strict=True)
        ]
        return list(await asyncio.gather(*tasks))


def _in_process(
    replica: Any, sends: np.ndarray, prompts: list[list[int]], outs: list[int], frontend_s: float
) -> dict[str, float]:
    """The same requests through ``servesim.OnlineFleet`` directly (no clock, no HTTP, no Ray),
    with the client delays the emulator adds: separates the engine's fidelity from serving's."""
    from servesim import OnlineFleet
    from servesim.emulate.tokens import HASH_BLOCK, block_hashes

    fleet = OnlineFleet([replica])
    reqs = []
    for i, (t, p, o) in enumerate(zip(sends, prompts, outs, strict=True)):
        fleet.advance_until(float(t))
        reqs.append(
            fleet.submit(str(i), float(t), len(p), o, hash_ids=block_hashes(p), hash_block_size=HASH_BLOCK)
        )
    fleet.advance_until(math.inf)
    extra = np.array([frontend_s + fleet.step_in_flight_at_arrival(r) for r in reqs])
    ttft = np.array([r.first_token_s - r.arrival_s for r in reqs]) + extra  # type: ignore[operator]
    e2e = np.array([r.finish_s - r.arrival_s for r in reqs]) + extra  # type: ignore[operator]
    return _means(ttft, e2e, np.array([r.num_output for r in reqs], dtype=np.float64))


def _uvicorn(replica: Any, model: str, scale: float, port: int) -> None:
    """The emulator's app under plain uvicorn (the ``--server uvicorn`` subprocess)."""
    import uvicorn

    from servesim.emulate.app import build_app
    from servesim.emulate.emulator import Emulator

    emulator = Emulator([replica], model=model, time_scale=scale, max_streams=4096)
    uvicorn.run(build_app(emulator), host="127.0.0.1", port=port, log_level="warning", lifespan="off")


@contextlib.contextmanager
def _serving(server: str, replica: Any, model: str, scale: float, port: int) -> Iterator[None]:
    """The emulator listening on ``port`` for the block (Ray Serve, or uvicorn without Ray)."""
    if server == "ray":
        from servesim.emulate import ray_serve

        settings = ray_serve.EmulatorSettings(
            replicas=[replica], model=model, time_scale=scale, port=port, max_streams=4096
        )
        ray_serve.start(settings, num_cpus=2)
        try:
            yield
        finally:
            ray_serve.stop()
        return
    proc = multiprocessing.get_context("spawn").Process(
        target=_uvicorn, args=(replica, model, scale, port), daemon=True
    )
    proc.start()
    try:
        from servesim.emulate.ray_serve import wait_ready

        wait_ready("127.0.0.1", port)
        yield
    finally:
        proc.terminate()
        proc.join(10)


def _means(ttft: np.ndarray, e2e: np.ndarray, nout: np.ndarray) -> dict[str, float]:
    """inference-perf's means (ms): itl = (mean e2e - mean ttft) / (mean outputs - 1)."""
    t, e = float(np.mean(ttft)) * 1e3, float(np.mean(e2e)) * 1e3
    return {"ttft_mean": t, "itl_mean": (e - t) / (float(np.mean(nout)) - 1.0), "e2e_mean": e}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="20260217-155451", help="sim2real experiment id")
    ap.add_argument("--window-s", type=float, default=40.0, help="simulated seconds of the run to replay")
    ap.add_argument("--time-scale", type=float, default=5.0, help="wall seconds per simulated second")
    ap.add_argument("--server", choices=("ray", "uvicorn"), default="ray", help="Ray Serve, or plain uvicorn")
    args = ap.parse_args()

    from servesim.cluster import Replica
    from servesim.perf.profile import resolve_profile
    from servesim.perf.replay import summarize_latencies
    from servesim.perf.sim2real import (
        RunSettings,
        experiment_requests,
        itl_divisors,
        load_experiments,
        run_experiment,
    )

    (exp,) = [e for e in load_experiments(FIXTURES) if e.id == args.experiment]
    profile = resolve_profile(None, exp.gpu_spec().name)
    settings = RunSettings()
    t = time.perf_counter()
    pred, out, info = run_experiment(exp, profile, settings)  # what `servesim sim2real` predicts
    print(
        f"offline replay of {exp.id} ({exp.model}, {info['num_requests']} requests): "
        f"{time.perf_counter() - t:.1f} s"
    )
    rs = experiment_requests(exp, settings)
    from servesim.perf.sim2real import experiment_setup

    config, step, _ = experiment_setup(exp, profile, settings)
    longest = int((rs.prompt_len + rs.output_len).max()) + 1
    config = config.model_copy(update={"max_model_len": longest})
    sel = np.flatnonzero((out.send < args.window_s) & out.finished)
    order = sel[np.argsort(out.send[sel], kind="stable")]
    prompts = [
        _prompt(int(i), int(rs.prompt_len[i]), rs.prefix_group[i], int(rs.prefix_len[i])) for i in order
    ]
    outs = [int(rs.output_len[i]) for i in order]

    in_process = _in_process(
        Replica("replica-0", config, step), out.send[order], prompts, outs, profile.frontend_latency_s
    )
    port = 8765
    with _serving(args.server, Replica("replica-0", config, step), exp.model, args.time_scale, port):
        t = time.perf_counter()
        got = asyncio.run(
            _replay(f"http://127.0.0.1:{port}", exp.model, out.send[order], prompts, outs, args.time_scale)
        )
        wall = time.perf_counter() - t
    sent = np.array([g[0] for g in got])
    first = np.array([g[1] for g in got])
    last = np.array([g[2] for g in got])
    nout = np.array([g[3] for g in got], dtype=np.float64)
    scale = args.time_scale
    emulated = _means((first - sent) / scale, (last - sent) / scale, nout)
    slip = (sent - sent[0]) / scale - (out.send[order] - out.send[order][0])
    mask = np.zeros(len(out.send), dtype=bool)
    mask[order] = True
    offline = summarize_latencies(out, mask)
    # The real run is measured per load stage: a window that is exactly the first stage compares
    # with that stage's measurement (same requests, same load); any other window with the whole run.
    first_stage_end = exp.spec.stages[0].duration
    stage = "0" if len(exp.spec.stages) > 1 and math.isclose(args.window_s, first_stage_end) else "-1"
    real = exp.actual.get(stage, {})
    # inference-perf's itl_mean divides by the output tokens its client counted (re-tokenizing the
    # text), not by the tokens generated: against the real run, the emulator's is divided likewise.
    counted = itl_divisors(exp, settings).get(stage)
    as_measured = dict(emulated)
    if counted is not None and counted > 1:
        as_measured["itl_mean"] = (emulated["e2e_mean"] - emulated["ttft_mean"]) / (counted - 1)
    print(
        f"emulated ({args.server}): {len(order)} requests sent over the first {args.window_s:g} simulated s "
        "at time scale "
        f"{scale:g} ({wall:.0f} s wall); send-time slip mean {np.mean(np.abs(slip)) * 1e3:.1f} ms simulated; "
        f"all complete: {bool(np.all(nout == outs))}"
    )
    print(
        f"{'metric':<10} {'emulator':>10} {'offline':>10} {'err %':>7} "
        f"{f'real({stage})':>10} {'err %':>7} {f'offline({stage})':>12} {'err %':>7} {'no-HTTP':>9}"
    )
    for m in ("ttft_mean", "itl_mean", "e2e_mean"):
        e, o, r, p = emulated[m], offline[m], real.get(m, math.nan), pred[stage].get(m, math.nan)
        q, em = in_process[m], as_measured[m]
        print(
            f"{m:<10} {e:>10.2f} {o:>10.2f} {100 * (e - o) / o:>+7.2f} "
            f"{r:>10.2f} {100 * (em - r) / r:>+7.2f} {p:>12.2f} {100 * (p - r) / r:>+7.2f} {q:>9.2f}"
        )
    print(
        "(ms; offline = the sim2real replay's figures for the same requests; real/offline(S): the measured "
        "run and its offline prediction for stage S, -1 = the whole run, with the prediction's own error; "
        "against the real run itl_mean divides by the client's counted tokens, as inference-perf does; "
        f"--window-s {first_stage_end:g} replays exactly stage 0)"
    )


if __name__ == "__main__":
    main()
