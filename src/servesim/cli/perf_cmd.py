"""``servesim perf ...``, ``servesim calibrate`` and ``servesim sim2real``: the step-time and memory model.

Bad input never shows a traceback: the error is printed as one line on stderr and the exit
code is 2. ``--json`` prints only the machine-readable result on stdout (keys sorted);
warnings (e.g. a profile used far outside its calibration data) go to stderr.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import BaseModel
from rich.console import Console

from servesim.cli.tables import FitTable
from servesim.engine.step_time import BatchComposition
from servesim.errors import shown, user_errors
from servesim.io import write_text_atomic
from servesim.perf import (
    ExtrapolationWarning,
    HardwareProfile,
    PerfError,
    build_step_time_model,
    builtin_profile_names,
    calibrate_steps,
    calibrate_workloads,
    kv_capacity,
    load_catalog,
    read_bench_result,
    read_step_csv,
    resolve_profile,
)
from servesim.perf.catalog import Catalog
from servesim.perf.sim2real import (
    RunSettings,
    ape_table,
    calibrate_experiments,
    default_experiment_profile,
    load_experiments,
    mape_summary,
    peer_predictions,
    predict_experiments,
)

GiB = 1 << 30
_err = Console(stderr=True, highlight=False)
_out = Console(highlight=False)

_CATALOG_HELP = "Extra catalog YAML file (models:/gpus: entries) extending the shipped one."
_JSON_HELP = "Print only machine-readable JSON on stdout."


def _fail(msg: str) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _print_json(obj: Any) -> None:
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


_SERVE_DEFAULT_HELP = "Default: what vllm serve runs on the GPU (servesim.perf.serve_defaults)."
_OUT_HELP = "Write the JSON result here (the document --json prints)."


def _emit(obj: Any, as_json: bool, out: Path | None) -> bool:
    """The result to ``out`` (atomically) and/or alone on stdout; True when ``--json`` printed it."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    if out is not None:
        write_text_atomic(out, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    if as_json:
        _print_json(obj)
    return as_json


def _said_written(out: Path | None) -> None:
    if out is not None:
        _out.print(f"result written to {out}", soft_wrap=True)


def _batch_limits(gpu: str, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> tuple[int, int]:
    """The batch limits given, else what ``vllm serve`` runs on ``gpu`` (every command's defaults)."""
    from servesim.perf.serve_defaults import vllm_serve_defaults

    seqs, budget = vllm_serve_defaults(gpu)
    return (max_num_seqs or seqs, max_num_batched_tokens or budget)


@contextmanager
def _guard() -> Iterator[None]:
    """Turn bad input into one line on stderr + exit 2; show warnings as one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ExtrapolationWarning)
        try:
            yield
        except user_errors() as e:
            _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
        finally:
            for w in caught:
                if issubclass(w.category, ExtrapolationWarning):
                    typer.echo(f"warning: {w.message}", err=True)


def _catalog(path: Path | None) -> Catalog:
    return load_catalog(path) if path is not None else load_catalog()


class KVBlocks(StrEnum):
    model = "model"
    measured = "measured"


class OutputTokens(StrEnum):
    spec = "spec"
    implied = "implied"


class ItlTokens(StrEnum):
    counted = "counted"
    generated = "generated"


class Questions(StrEnum):
    per_session = "per-session"
    fresh = "fresh"


class CalibrateMode(StrEnum):
    none = "none"
    all = "all"
    loo = "loo"


def _gb(x: float) -> str:
    return f"{x / GiB:.2f}"


def register(app: typer.Typer) -> None:
    perf = typer.Typer(
        help="Model and GPU catalogs, KV-cache capacity, step times (the roofline model).",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    app.add_typer(perf, name="perf")

    @perf.command("models")
    def models_cmd(
        catalog: Path | None = typer.Option(None, "--catalog", help=_CATALOG_HELP),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """List the model catalog."""
        with _guard():
            cat = _catalog(catalog)
            if as_json:
                _print_json({n: m.model_dump(mode="json") for n, m in sorted(cat.models.items())})
                return
            t = FitTable(title="Models")
            for col in ("name", "HF id", "params", "layers", "hidden", "heads/KV", "experts", "dtype"):
                t.add_column(col)
            for n, m in sorted(cat.models.items()):
                t.add_row(
                    n,
                    m.hf_id or "-",
                    f"{m.num_params / 1e9:.1f}B",
                    str(m.num_layers),
                    str(m.hidden_size),
                    f"{m.num_attention_heads}/{m.num_kv_heads}",
                    f"{m.num_experts} top-{m.experts_per_token}" if m.is_moe else "-",
                    m.dtype if m.weight_dtype is None else f"{m.weight_dtype}/{m.dtype}",
                )
            _out.print(t)

    @perf.command("gpus")
    def gpus_cmd(
        catalog: Path | None = typer.Option(None, "--catalog", help=_CATALOG_HELP),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """List the GPU catalog (dense peaks; sources with --json)."""
        with _guard():
            cat = _catalog(catalog)
            if as_json:
                _print_json({n: g.model_dump(mode="json") for n, g in sorted(cat.gpus.items())})
                return
            t = FitTable(title="GPUs")
            for col in ("name", "memory GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "link GB/s (1 dir)"):
                t.add_column(col)
            for n, g in sorted(cat.gpus.items()):
                t.add_row(
                    n,
                    f"{g.memory_bytes / GiB:.1f}",
                    f"{g.hbm_bandwidth / 1e12:.2f}",
                    f"{g.bf16_flops / 1e12:.0f}",
                    f"{g.fp8_flops / 1e12:.0f}" if g.fp8_flops else "-",
                    f"{g.interconnect_bandwidth / 1e9:.0f} {g.interconnect}",
                )
            _out.print(t)

    @perf.command("memory")
    def memory_cmd(
        model: str = typer.Option(..., "--model", help="Catalog name, HF id, or a local config.json."),
        gpu: str = typer.Option(..., "--gpu", help="Catalog GPU name."),
        tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
        gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization"),
        block_size: int = typer.Option(16, "--block-size"),
        kv_dtype: str = typer.Option("auto", "--kv-dtype", help="auto, bfloat16, float16, fp8."),
        max_num_batched_tokens: int | None = typer.Option(
            None,
            "--max-num-batched-tokens",
            help=_SERVE_DEFAULT_HELP,
        ),
        max_num_seqs: int | None = typer.Option(
            None,
            "--max-num-seqs",
            help=_SERVE_DEFAULT_HELP,
        ),
        max_model_len: int | None = typer.Option(
            None, "--max-model-len", help="Default: the model's max_position_embeddings (as vLLM)."
        ),
        catalog: Path | None = typer.Option(None, "--catalog", help=_CATALOG_HELP),
        out: Path | None = typer.Option(None, "--out", help=_OUT_HELP),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """KV-cache capacity vLLM would allocate: weights, reserve, blocks (per GPU)."""
        with _guard():
            max_num_seqs, max_num_batched_tokens = _batch_limits(gpu, max_num_seqs, max_num_batched_tokens)
            cap = kv_capacity(
                model,
                gpu,
                tp,
                gpu_memory_utilization=gpu_memory_utilization,
                block_size=block_size,
                kv_dtype=kv_dtype,
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=max_num_seqs,
                max_model_len=max_model_len,
                catalog=_catalog(catalog),
            )
            for note in cap.caveats:  # also in the JSON; on stderr so humans see them either way
                typer.echo(f"warning: {note}", err=True)
            if _emit(cap, as_json, out):
                return
            t = FitTable(title=f"{cap.model} on {tp} x {cap.gpu} (per GPU)")
            t.add_column("item")
            t.add_column("value", justify="right")
            rows = [
                ("total memory", f"{_gb(cap.total_memory_bytes)} GiB"),
                (f"x gpu_memory_utilization {gpu_memory_utilization}", f"{_gb(cap.requested_bytes)} GiB"),
                ("- weights", f"{_gb(cap.weight_bytes)} GiB"),
                ("- start-up reserve", f"{_gb(cap.reserve_bytes)} GiB"),
                ("= KV cache", f"{_gb(cap.kv_cache_bytes)} GiB"),
                ("KV bytes per token", f"{cap.kv_bytes_per_token:,}"),
                (f"blocks of {cap.block_size} tokens (incl. null block)", f"{cap.num_gpu_blocks:,}"),
                ("tokens in usable blocks", f"{cap.max_tokens:,}"),
                (f"sequences of {cap.max_model_len} tokens at once", f"{cap.max_concurrency or 0:.2f}"),
            ]
            for k, v in rows:
                t.add_row(k, v)
            _out.print(t)
            _said_written(out)

    @perf.command("step")
    def step_cmd(
        model: str = typer.Option(..., "--model"),
        gpu: str = typer.Option(..., "--gpu"),
        tp: int = typer.Option(1, "--tp"),
        profile: str | None = typer.Option(None, "--profile", help="Profile JSON or shipped name."),
        decodes: int = typer.Option(0, "--decodes", help="Decoding requests in the step."),
        decode_ctx: int = typer.Option(1024, "--decode-ctx", help="Mean context length of the decodes."),
        prefill: list[str] = typer.Option(
            [], "--prefill", help="A prefill chunk as TOKENS[:CACHED]; repeat for several."
        ),
        max_num_seqs: int | None = typer.Option(
            None,
            "--max-num-seqs",
            help=_SERVE_DEFAULT_HELP,
        ),
        max_num_batched_tokens: int | None = typer.Option(
            None,
            "--max-num-batched-tokens",
            help=_SERVE_DEFAULT_HELP,
        ),
        catalog: Path | None = typer.Option(None, "--catalog", help=_CATALOG_HELP),
        out: Path | None = typer.Option(None, "--out", help=_OUT_HELP),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """Time one engine step with the roofline model, component by component."""
        with _guard():
            max_num_seqs, max_num_batched_tokens = _batch_limits(gpu, max_num_seqs, max_num_batched_tokens)
            chunks = []
            for p in prefill:
                c, _, cached = p.partition(":")
                try:
                    chunks.append((int(c), int(cached or 0)))
                except ValueError:
                    raise PerfError(f"--prefill {shown(p)}: use TOKENS or TOKENS:CACHED") from None
            if decodes < 0 or any(c <= 0 or k < 0 for c, k in chunks) or (decodes == 0 and not chunks):
                raise PerfError("a step needs --decodes N > 0 and/or --prefill TOKENS[:CACHED] chunks")
            st = build_step_time_model(
                model,
                gpu,
                tp,
                profile,
                catalog=_catalog(catalog),
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
            )
            batch = BatchComposition(decodes, decodes * decode_ctx, chunks)
            parts = st.breakdown(batch)
            total = st.step_time(batch)
            if _emit({"step_time_s": total, "breakdown_s": parts, "model": st.model_dump()}, as_json, out):
                return
            t = FitTable(title=f"{st.model.name} on {tp} x {st.gpu.name}: {batch.num_tokens} tokens")
            t.add_column("component")
            t.add_column("ms", justify="right")
            for k, v in parts.items():
                if k in ("padded_tokens", "experts_touched"):
                    t.add_row(k, f"{v:.1f}")
                else:
                    t.add_row(k, f"{v * 1e3:.3f}")
            t.add_row("[bold]step time[/bold]", f"[bold]{total * 1e3:.3f}[/bold]")
            _out.print(t)
            _said_written(out)

    @perf.command("profiles")
    def profiles_cmd(
        name: str | None = typer.Argument(None, help="A shipped profile name or a profile JSON file."),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """List the shipped calibrated profiles, or show one."""
        with _guard():
            if name is None:
                names = builtin_profile_names()
                if as_json:
                    _print_json(names)
                else:
                    for n in names:
                        _out.print(n)
                return
            prof = resolve_profile(name, None)
            if as_json:
                _print_json(prof)
                return
            t = FitTable(title=f"profile {prof.name} ({prof.gpu or 'generic'}, {prof.framework})")
            t.add_column("coefficient")
            t.add_column("value", justify="right")
            for k, v in prof.model_dump().items():
                if k not in ("fitted_range", "calibration", "name", "gpu", "framework"):
                    t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
            _out.print(t)

    @app.command("calibrate")
    def calibrate_cmd(
        files: list[Path] = typer.Argument(
            ..., help="Step-level CSV file(s), or vllm bench serve --save-result JSON file(s)."
        ),
        model: str | None = typer.Option(None, "--model", help="Model (unless the CSV has a model column)."),
        gpu: str | None = typer.Option(None, "--gpu", help="GPU (unless the CSV has a gpu column)."),
        tp: int | None = typer.Option(None, "--tp", help="TP degree (unless the CSV has a tp column)."),
        base: str | None = typer.Option(None, "--base", help="Profile to start from (default: the GPU's)."),
        fit: str | None = typer.Option(
            None, "--fit", help="Comma-separated coefficients to fit (default: what the data determine)."
        ),
        out: Path | None = typer.Option(None, "--out", help="Write the fitted profile JSON here."),
        max_num_seqs: int = typer.Option(128, "--max-num-seqs", help="Server setting (bench results)."),
        max_num_batched_tokens: int = typer.Option(2048, "--max-num-batched-tokens", help="Server setting."),
        gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="Server setting."),
        num_gpu_blocks: int | None = typer.Option(
            None, "--num-gpu-blocks", help="KV blocks (default: the memory model's)."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the re-created bench arrivals."),
        workers: int = typer.Option(1, "--workers", help="Processes for re-simulating bench runs."),
        catalog: Path | None = typer.Option(None, "--catalog", help=_CATALOG_HELP),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """Fit a profile's efficiency factors and overheads to measurements; report the fit's error."""
        with _guard():
            cat = _catalog(catalog)
            kinds = {f.suffix.lower() for f in files}
            if kinds - {".csv", ".json"} or len(kinds) != 1:
                raise PerfError("give either step-level .csv files or vllm bench .json files (not both)")
            names = [x.strip() for x in fit.split(",") if x.strip()] if fit else None
            start: HardwareProfile
            if kinds == {".csv"}:
                groups = []
                for f in files:
                    groups += read_step_csv(f, model=model, gpu=gpu, tp=tp, catalog=cat)
                gpus = {g.gpu.name for g in groups}
                start = resolve_profile(base, gpus.pop() if len(gpus) == 1 else None)
                report = calibrate_steps(groups, base=start, fit=names)
            else:
                if model is None or gpu is None:
                    raise PerfError("bench results need --model and --gpu (and --tp if not 1)")
                cases = [
                    read_bench_result(
                        f,
                        model=model,
                        gpu=gpu,
                        tp=tp or 1,
                        max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=max_num_batched_tokens,
                        num_gpu_blocks=num_gpu_blocks,
                        gpu_memory_utilization=gpu_memory_utilization,
                        seed=seed,
                        catalog=cat,
                    )
                    for f in files
                ]
                start = resolve_profile(base, cases[0].gpu.name)
                n_targets = sum(len(c.targets) for c in cases)
                if names is None:
                    names = ["gemm_bandwidth_efficiency", "gemm_compute_efficiency", "frontend_latency_s"]
                    names = names[: max(1, min(len(names), n_targets))]
                report = calibrate_workloads(cases, base=start, fit=names, workers=workers)
            if out is not None:
                report.profile.save(out)
            if as_json:
                _print_json(report)
                return
            t = FitTable(title=f"calibration ({report.kind}): {report.message}")
            for col in ("coefficient", "start", "fitted", "rel. std. error", "determined"):
                t.add_column(col)
            for p in report.parameters:
                se = f"{p.relative_std_error:.1%}" if p.relative_std_error is not None else "-"
                t.add_row(p.name, f"{p.start:.4g}", f"{p.value:.4g}", se, "yes" if p.determined else "no")
            _out.print(t)
            e = FitTable(title="error (%)")
            for col in ("", "n", "MAPE", "median", "p90", "max"):
                e.add_column(col)
            for label, s in (("before", report.before), ("after", report.after), *report.per_group.items()):
                e.add_row(
                    label,
                    str(s.n),
                    f"{s.mape:.2f}",
                    f"{s.median_ape:.2f}",
                    f"{s.p90_ape:.2f}",
                    f"{s.max_ape:.2f}",
                )
            _out.print(e)
            for note in report.notes:
                _err.print(f"note: {note}")
            if out is not None:
                _out.print(f"profile written to {out}")

    @app.command("sim2real")
    def sim2real_cmd(
        directory: Path = typer.Argument(..., help="Folder of sim2real experiment files (*.json)."),
        out: Path = typer.Option(..., "--out", help="Write predictions here (score.py's PRED.json format)."),
        profile: str | None = typer.Option(
            None, "--profile", help="Profile to predict with (JSON or shipped name); not with --calibrate."
        ),
        calibrate: CalibrateMode = typer.Option(
            CalibrateMode.none,
            "--calibrate",
            help="loo: predict each experiment with a profile fitted on the others; all: one fit on all.",
        ),
        kv_blocks: KVBlocks = typer.Option(
            KVBlocks.model, "--kv-blocks", help="model: from the memory model; measured: the logged count."
        ),
        output_tokens: OutputTokens = typer.Option(
            OutputTokens.spec,
            "--output-tokens",
            help="Tokens generated per request. spec: max_tokens (inference-perf sends ignore_eos); "
            "implied: the run's implied mean output count.",
        ),
        itl_tokens: ItlTokens = typer.Option(
            ItlTokens.counted,
            "--itl-tokens",
            help="What itl_mean divides by. counted: the client's output count (the run's implied count; "
            "inference-perf re-tokenizes the text); generated: the simulated count.",
        ),
        questions: Questions = typer.Option(
            Questions.per_session,
            "--questions",
            help="per-session: a session repeats its question every round (inference-perf); fresh: new each.",
        ),
        save_profile: Path | None = typer.Option(
            None, "--save-profile", help="With --calibrate: save the all-data fit."
        ),
        workers: int = typer.Option(1, "--workers", help="Processes for simulating experiments."),
        max_iter: int = typer.Option(8, "--max-iter", help="Calibration iterations (per fit)."),
        as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
    ) -> None:
        """Re-create every experiment's workload, simulate it, and write predictions (ms) for score.py."""
        with _guard():
            exps = load_experiments(directory)
            settings = RunSettings(
                kv_blocks=kv_blocks.value,
                output_tokens=output_tokens.value,
                itl_tokens=itl_tokens.value,
                questions=questions.value,
            )
            t0 = time.monotonic()
            progress: Callable[[str], None] | None = None
            if not as_json:

                def progress(msg: str) -> None:
                    _err.print(f"[{time.monotonic() - t0:6.0f}s] {msg}")

            if calibrate is not CalibrateMode.none:
                if profile is not None:
                    raise PerfError("--profile and --calibrate exclude each other")
                cal = calibrate_experiments(
                    exps,
                    settings=settings,
                    leave_one_out=calibrate is CalibrateMode.loo,
                    workers=workers,
                    max_iter=max_iter,
                    progress=progress,
                )
                if save_profile is not None:
                    cal.full.profile.save(save_profile)
                prof: Any = cal.fold_profiles() if calibrate is CalibrateMode.loo else cal.full.profile
            elif profile is None:
                prof = default_experiment_profile(exps)
            else:
                gpus = {e.gpu_spec().name for e in exps}
                prof = resolve_profile(profile, gpus.pop() if len(gpus) == 1 else None)
            preds, infos = predict_experiments(exps, prof, settings, workers=workers)
            write_text_atomic(out, json.dumps(preds, indent=1, sort_keys=True) + "\n")
            apes = ape_table(preds, exps)
            summary = mape_summary(apes)
            peers = {
                name: mape_summary(ape_table(p, [e for e in exps if e.id in p]))
                for name, p in peer_predictions(exps).items()
            }
            result = {
                "out": str(out),
                "settings": settings.model_dump(),
                "calibration": calibrate.value,
                "experiments": infos,
                "ape": apes,
                "mape": summary,
                "peers_mape": peers,
            }
            if as_json:
                _print_json(result)
                return
            t = FitTable(title=f"sim2real: median / mean APE % over {len(exps)} experiments (stage -1)")
            t.add_column("simulator")
            metrics = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p90", "ttft_p90")
            for m in metrics:
                t.add_column(m, justify="right")

            def row(name: str, s: dict[str, dict[str, float]]) -> None:
                t.add_row(
                    name,
                    *[f"{s[m]['median']:.1f} / {s[m]['mean']:.1f}" if m in s else "-" for m in metrics],
                )

            row("servesim", summary)
            for name, s in sorted(peers.items()):
                row(name, s)
            _out.print(t)
            _out.print(f"predictions written to {out}; score them with score.py {out} {directory}")
            if any(not i.get("converged", True) for i in infos.values()):
                _err.print("warning: a closed-loop replay did not settle within its rounds")
            sys.stdout.flush()
