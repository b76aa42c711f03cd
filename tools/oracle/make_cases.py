#!/usr/bin/env python3
"""Generate engine regression cases from vLLM's real scheduler (the oracle). Not run in CI.

Each case is a random trace + scheduler config; vLLM 0.33's own ``Scheduler`` (driven by
``vllm_oracle.py`` of this folder, in the oracle's virtualenv) writes the per-step schedule,
stored gzipped in the ``--out`` folder. The committed cases (``tests/engine/oracle_cases/``) are
replayed through servesim by ``tests/engine/test_oracle_cases.py``; a maker refuses to write
into a committed folder unless given ``--force``. See ``tools/oracle/README.md``.

Usage (with the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_cases.py --out DIR [--seed 0] [--per-family 6]
    # then: tools/oracle/replay_cases.py DIR (through servesim, or vLLM again)
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from types import ModuleType

STEP_S = 1 / 64  # exact in binary floating point: both sides agree on each arrival's step
HERE = Path(__file__).resolve().parent
CASES_ROOT = HERE.parents[1] / "tests" / "engine"
#: The committed cases of each kind (the truth the tests replay): a maker never writes there
#: unless told to with --force.
COMMITTED = {
    "plain": CASES_ROOT / "oracle_cases",
    "offload": CASES_ROOT / "oracle_offload_cases",
    "pd": CASES_ROOT / "oracle_pd_cases",
    "spec": CASES_ROOT / "oracle_spec_cases",
    "async": CASES_ROOT / "oracle_async_cases",
    "eagle": CASES_ROOT / "oracle_eagle_cases",
    "async_spec": CASES_ROOT / "oracle_async_spec_cases",
    "lora": CASES_ROOT / "oracle_lora_cases",
    "pp": CASES_ROOT / "oracle_pp_cases",
}


def load_oracle() -> ModuleType:
    """This folder's ``vllm_oracle`` (the one copy of the harness the tools use): the folder goes
    first on ``sys.path``, and another module of that name imported earlier is refused."""
    if sys.path[:1] != [str(HERE)]:
        sys.path.insert(0, str(HERE))
    import vllm_oracle

    got = Path(vllm_oracle.__file__ or "").resolve()
    if got != HERE / "vllm_oracle.py":
        raise SystemExit(
            f"vllm_oracle was imported from {got}, not {HERE / 'vllm_oracle.py'}: use this folder's copy"
        )
    return vllm_oracle


def add_out_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder to write the cases to (made if missing); a committed cases' folder only with --force",
    )
    ap.add_argument(
        "--force",
        action="store_true",
        help="allow --out to be a committed cases' folder (tests/engine/oracle*_cases): replaces the truth",
    )


def add_maker_args(ap: argparse.ArgumentParser, per_family: int, families_help: str | None = None) -> None:
    """The arguments every maker takes: ``--seed`` (default 0, the committed cases' seed),
    ``--per-family`` (the maker's default), ``--families`` when ``families_help`` is given (a
    comma-separated list: see ``chosen_families``), and ``--out`` / ``--force``."""
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-family", type=int, default=per_family)
    if families_help is not None:
        ap.add_argument("--families", help=families_help)
    add_out_args(ap)


def chosen_families(
    ap: argparse.ArgumentParser, families: str | None, default: list[str], known: Collection[str]
) -> list[str]:
    """The families named by a comma-separated ``--families`` (``default`` without it); a name
    not in ``known`` is an argument error that lists them."""
    chosen = families.split(",") if families else default
    unknown = [f for f in chosen if f not in known]
    if unknown:
        ap.error(f"--families: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


def out_folder(out: Path, force: bool) -> Path:
    """``out``, made if missing; a committed cases' folder is refused unless ``force``."""
    committed = {p.resolve() for p in COMMITTED.values()}
    if out.resolve() in committed and not force:
        raise SystemExit(
            f"refusing to write into {out}: it holds committed oracle cases (the truth the tests "
            "replay). Give another --out folder, or add --force to replace them on purpose."
        )
    out.mkdir(parents=True, exist_ok=True)
    return out


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def run_oracle(vllm_oracle, td: str, name: str, rows: list[dict], cfg: dict) -> tuple[dict, list[dict]]:
    """One case through vLLM's real Scheduler: its summary and per-step records (every case
    maker runs its cases this way; ``cfg`` is the oracle's config, the clock is added here)."""
    tp, cp, op, sp = (Path(td) / f"{name}.{s}" for s in ("jsonl", "cfg.json", "out.jsonl", "sum.json"))
    tp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cp.write_text(json.dumps({**cfg, "step_time_s": STEP_S}))
    ocfg = vllm_oracle.load_config(str(cp), [])
    otrace = vllm_oracle.load_trace(str(tp), ocfg)
    summary = vllm_oracle.run(ocfg, otrace, str(op), str(sp), quiet=True)
    return summary, [json.loads(line) for line in op.read_text().splitlines()]


def draw_cases(
    rng: random.Random,
    families: list[str],
    per_family: int,
    trace: Callable[[random.Random, str], list[dict]],
    config: Callable[[random.Random, str, list[dict]], dict],
    prefix: str = "",
) -> list[tuple[str, list[dict], dict]]:
    """``per_family`` cases of each family in order, ``(name, rows, cfg)`` named
    ``{prefix}{family}_{k:02d}``: each case's trace drawn, then its config (the order of draws
    from ``rng`` that the committed cases were made with)."""
    cases = []
    for fam in families:
        for k in range(per_family):
            rows = trace(rng, fam)
            cases.append((f"{prefix}{fam}_{k:02d}", rows, config(rng, fam, rows)))
    return cases


def make_plain_cases(
    doc: str,
    per_family: int,
    families: list[str],
    trace: Callable[[random.Random, str], list[dict]],
    config: Callable[[random.Random, str, list[dict]], dict],
    prefix: str,
) -> int:
    """The whole command of a maker whose cases are plain ones of its own traces and configs
    (LoRA, pipeline parallelism): the arguments, the draws, vLLM's runs and the cases written."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add_maker_args(ap, per_family, "comma-separated families to make (default: all, in FAMILIES order)")
    args = ap.parse_args()
    chosen = chosen_families(ap, args.families, families, families)
    out = out_folder(args.out, args.force)
    cases = draw_cases(random.Random(args.seed), chosen, args.per_family, trace, config, prefix)
    for name, rows, cfg, summary, records in oracle_runs(cases):
        store_case(out, name, summary, cfg, rows, plain_steps(records))
    return 0


def oracle_runs(
    cases: Iterable[tuple[str, list[dict], dict]], skip_refused: bool = False
) -> Iterator[tuple[str, list[dict], dict, dict, list[dict]]]:
    """Each ``(name, rows, cfg)`` through vLLM's real Scheduler, in order, in one temporary
    folder: ``(name, rows, cfg, summary, records)``. With ``skip_refused`` a case whose config
    vLLM refuses is skipped, said on stderr (the connector makers draw configs it can refuse)."""
    vllm_oracle = load_oracle()
    with tempfile.TemporaryDirectory() as td:
        for name, rows, cfg in cases:
            try:
                summary, records = run_oracle(vllm_oracle, td, name, rows, cfg)
            except (SystemExit, Exception) as e:  # AssertionError included
                if not skip_refused:
                    raise
                print(f"{name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
                continue
            yield name, rows, cfg, summary, records


def step_row(d: dict) -> list:
    """The columns every case family matches step by step (a family appends its own)."""
    return [
        d["step"],
        d["num_scheduled_tokens"],
        d["preempted"],
        sorted(d["finished"]),
        d["kv_blocks_used"],
        d["prefix_hit_tokens"],
        d["num_running"],
        d["num_waiting"],
    ]


def plain_steps(records: list[dict]) -> list[list]:
    """A plain case's ``steps`` from the oracle's per-step records."""
    return [step_row(d) for d in records]


def write_case(out: Path, case: dict) -> None:
    with gzip.open(out / f"{case['name']}.json.gz", "wt", encoding="utf-8") as f:
        json.dump(case, f, separators=(",", ":"))


#: A case's keys in the order every maker writes them (a maker's own keys in their place), so a
#: case made again is byte-identical to the committed one.
CASE_KEYS = (
    "name",
    "vllm_version",
    "step_s",
    "config",
    "speculative",
    "trace",
    "steps",
    "group_steps",
    "total_preemptions",
    "prefix_cache_totals",
    "offload_totals",
    "pd_totals",
    "unfinished",
)


def store_case(
    out: Path,
    name: str,
    summary: dict,
    cfg: dict,
    rows: list[dict],
    steps: list[list],
    *,
    totals: tuple[str, ...] = ("prefix_cache_totals",),
    note: str = "",
    **own: object,
) -> None:
    """Write one case run by ``run_oracle`` and print its progress line (every maker does both
    this way): the fields all cases share, the ``totals`` copied from vLLM's summary, and the
    maker's ``own`` fields (each a key of ``CASE_KEYS``); ``note`` ends the progress line."""
    case = {
        "name": name,
        "vllm_version": summary["vllm_version"],
        "step_s": STEP_S,
        "config": cfg,
        "trace": rows,
        "steps": steps,
        "total_preemptions": summary["total_preemptions"],
        **{k: summary[k] for k in totals},
        **own,
    }
    write_case(out, {k: case[k] for k in sorted(case, key=CASE_KEYS.index)})
    print(
        f"{name}: {len(rows)} requests, {len(steps)} steps, {summary['total_preemptions']} preemptions{note}",
        file=sys.stderr,
        flush=True,
    )


def random_trace(rng: random.Random, fam: str) -> list[dict]:
    n = rng.randint(4, 40) if rng.random() < 0.7 else rng.randint(60, 160)
    burst = rng.random() < 0.4
    rows = []
    groups = [f"g{i}" for i in range(rng.randint(1, 3))]
    for i in range(n):
        step = 0 if burst else rng.randint(0, 150)
        plen = round(10 ** rng.uniform(0, 3.2))
        olen = rng.randint(1, 160)
        row = {"req_id": f"r{i:03d}", "arrival_step": step, "prompt_len": plen, "output_len": olen}
        if fam in ("prefix", "prefix_pressure", "mixed", "cascade") and rng.random() < 0.7 and plen > 2:
            g = rng.choice(groups)
            # prefix shorter than the prompt: every block after it is unique to the request
            row["prefix_group"] = g
            row["prefix_len"] = rng.randint(1, plen - 1)
            if rng.random() < 0.5:
                row["prefix_len"] = min(plen - 1, 64 * (1 + groups.index(g)))
        if fam in ("priority", "mixed"):
            row["priority"] = rng.randint(0, 3)
        rows.append(row)
    rows.sort(key=lambda r: r["arrival_step"])
    return rows


def random_config(rng: random.Random, fam: str, rows: list[dict]) -> dict:
    mml = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
    bs = rng.choice([16, 16, 8, 32]) if fam != "block_size" else rng.choice([8, 32, 64])
    cfg = {
        "block_size": bs,
        "max_num_seqs": rng.choice([4, 8, 16, 64, 128]),
        "max_num_batched_tokens": rng.choice([256, 512, 1024, 2048]),
        "enable_chunked_prefill": True,
        "enable_prefix_caching": fam in ("prefix", "prefix_pressure", "mixed", "cascade")
        or rng.random() < 0.3,
        "long_prefill_token_threshold": 0,
        "policy": "fcfs",
        "max_model_len": mml,
    }
    need = cdiv(mml, bs) + 1
    cfg["num_gpu_blocks"] = need + rng.randint(0, 4000)
    if fam == "chunk_off":
        cfg["enable_chunked_prefill"] = False
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
    if fam == "threshold":
        cfg["long_prefill_token_threshold"] = rng.choice([1, 16, 64, 256])
    if fam in ("pressure", "prefix_pressure", "priority", "mixed", "watermark", "no_full_isl"):
        cfg["num_gpu_blocks"] = need + rng.randint(0, need)
    if fam == "cascade":
        cfg["num_gpu_blocks"] = need + rng.randint(0, need // 2 + 1)
        cfg["long_prefill_token_threshold"] = rng.choice([8, 32, 64])
        cfg["max_num_seqs"] = rng.choice([16, 64, 128])
    if fam == "watermark":
        cfg["watermark"] = rng.choice([0.01, 0.05, 0.1])
    if fam == "no_full_isl":
        cfg["scheduler_reserve_full_isl"] = False
    if fam == "small_seqs":
        cfg["max_num_seqs"] = rng.choice([1, 2, 3])
    if fam in ("priority", "mixed"):
        cfg["policy"] = "priority"
    if fam == "mixed":
        cfg["long_prefill_token_threshold"] = rng.choice([0, 32, 128])
        cfg["enable_chunked_prefill"] = rng.random() < 0.7
        if not cfg["enable_chunked_prefill"]:
            cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], mml)
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    knobs_033(rng, fam, cfg, need)
    return cfg


def knobs_033(rng: random.Random, fam: str, cfg: dict, need: int) -> None:
    """The families of vLLM 0.33's scheduler knobs (issue 49): each away from its default, some
    under KV pressure or with the priority policy so that preemption meets them."""
    if fam in ("cadence", "scheduled_tokens", "active_seqs", "adaptive") and rng.random() < 0.4:
        cfg["num_gpu_blocks"] = need + rng.randint(0, need)
    if fam in ("cadence", "active_seqs") and rng.random() < 0.3:
        cfg["policy"] = "priority"
    if fam == "active_seqs":
        cfg["max_num_seqs"] = rng.choice([8, 16, 64, 128])
        cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
        cfg["max_num_active_seqs"] = rng.choice([1, 2, 3, 5, max(1, cfg["max_num_seqs"] // 2)])
    if fam == "cadence":
        cfg["prefill_schedule_interval"] = rng.choice([2, 3, 4, 8])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 0, 32, 128])
    if fam == "scheduled_tokens":
        cfg["max_num_scheduled_tokens"] = rng.choice([1, 7, 64, 200, cfg["max_num_batched_tokens"] // 2])
    if fam == "adaptive":
        cfg["long_prefill_token_threshold"] = rng.choice([1, 16, 64, 256])
        cfg["long_prefill_token_threshold_adaptive"] = True


FAMILIES = [
    "basic",
    "chunk_off",
    "threshold",
    "pressure",
    "prefix",
    "prefix_pressure",
    "priority",
    "small_seqs",
    "block_size",
    "mixed",
    "cascade",
    "watermark",
    "no_full_isl",
]
#: vLLM 0.33's knobs (issue 49), made only when named: the committed ones with
#: ``--families active_seqs,cadence,scheduled_tokens,adaptive --seed 49 --per-family 6``
#: (kept out of FAMILIES so the default command still draws the older cases again).
KNOB_FAMILIES = ["active_seqs", "cadence", "scheduled_tokens", "adaptive"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_maker_args(ap, 6, "comma-separated families to make (default: all, in FAMILIES order)")
    ap.add_argument(
        "--async-scheduling",
        action="store_true",
        help="run vLLM's AsyncScheduler as EngineCore's batch queue does (step k scheduled before "
        "step k-1's output is applied); the cases carry async_scheduling: true",
    )
    ap.add_argument(
        "--examples",
        type=Path,
        metavar="DIR",
        help="also store the oracle README's examples a-c (DIR holds {a,b,c}_trace.jsonl and _config.json)",
    )
    args = ap.parse_args()
    chosen = chosen_families(ap, args.families, FAMILIES, FAMILIES + KNOB_FAMILIES)
    out = out_folder(args.out, args.force)
    cases = draw_cases(random.Random(args.seed), chosen, args.per_family, random_trace, random_config)
    if args.async_scheduling:
        for _, _, cfg in cases:
            cfg["async_scheduling"] = True
    if args.examples:
        oracle_dir: Path = args.examples
        for ex in "abc":
            rows = [json.loads(x) for x in (oracle_dir / f"{ex}_trace.jsonl").read_text().splitlines() if x]
            cfg = json.loads((oracle_dir / f"{ex}_config.json").read_text())
            cfg["max_model_len"] = max(r["prompt_len"] + r["output_len"] for r in rows) + 1
            cases.append((f"readme_{ex}", rows, cfg))
    for name, rows, cfg, summary, records in oracle_runs(cases):
        store_case(out, name, summary, cfg, rows, plain_steps(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
