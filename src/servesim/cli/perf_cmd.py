"""``servesim perf ...``, ``servesim calibrate`` and ``servesim sim2real``: the step-time and memory model.

The questions are services (``servesim.services.perf``, ``servesim.services.calibration``); this
module spells them as commands and draws their tables. Bad input never shows a traceback: the
error is printed as one line on stderr and the exit code is 2. ``--json`` prints only the
machine-readable result on stdout (keys sorted); warnings (e.g. a profile used far outside its
calibration data) go to stderr.
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
from typing import Annotated, Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console

from servesim.cli.common import checkout_hint
from servesim.cli.engine_flags import hardware_flags
from servesim.cli.perf_tables import calibration_tables, gpus_table, memory_table, models_table, step_table
from servesim.cli.tables import FitTable
from servesim.errors import describe, shown, user_errors
from servesim.io import write_text_atomic
from servesim.services import perf as perf_service
from servesim.services.calibration import (
    CalibrateRequest,
    Sim2RealAnswer,
    Sim2RealRequest,
    calibrate,
    sim2real,
)
from servesim.services.deployment import DeploymentSpec
from servesim.services.perf import ExtrapolationWarning, MemoryRequest, StepRequest


class _Printer:
    """A Console made at each print, as every other command makes its own: one made at import
    kept the terminal width (COLUMNS) of the first command in the process, so a later command in
    the same process (the web's, a test's) wrapped its tables at someone else's width."""

    def __init__(self, *, stderr: bool = False) -> None:
        self.stderr = stderr

    def print(self, *objects: Any, **kw: Any) -> None:
        Console(stderr=self.stderr, highlight=False).print(*objects, **kw)


_err = _Printer(stderr=True)
_out = _Printer()

_CATALOG_HELP = "Extra catalog YAML file (models:/gpus: entries) extending the shipped one."
_JSON_HELP = "Print only machine-readable JSON on stdout."
_SERVE_DEFAULT_HELP = "Default: what vllm serve runs on the GPU (servesim.perf.serve_defaults)."
_OUT_HELP = "Write the JSON result here (the document --json prints)."

CatalogOpt = Annotated[Path | None, typer.Option("--catalog", help=_CATALOG_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help=_JSON_HELP)]
OutOpt = Annotated[Path | None, typer.Option("--out", help=_OUT_HELP)]
MaxSeqs = Annotated[int | None, typer.Option("--max-num-seqs", help=_SERVE_DEFAULT_HELP)]
MaxTokens = Annotated[int | None, typer.Option("--max-num-batched-tokens", help=_SERVE_DEFAULT_HELP)]

#: ``--model/--gpu/--tp`` of ``calibrate`` (the step CSV's columns come first).
CALIBRATE_HELPS = {
    "model": "Model (unless the CSV has a model column; bench results need it).",
    "gpu": "GPU (unless the CSV has a gpu column; bench results need it).",
    "tp": "TP degree (unless the CSV has a tp column; default 1).",
    "gpu_memory_utilization": "Server setting (bench results); default 0.9.",
}


def _fail(msg: str) -> NoReturn:
    typer.echo(f"error: {msg}{checkout_hint(msg)}", err=True)
    raise typer.Exit(2)


def _print_json(obj: Any) -> None:
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


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


#: Request fields that ``calibrate`` takes as a flag of the same name (``--window-s``).
_FLAG_FIELDS = frozenset(
    {
        "window_s",
        "burstiness",
        "seed",
        "workers",
        "max_num_seqs",
        "max_num_batched_tokens",
        "num_gpu_blocks",
        "gpu_memory_utilization",
    }
)


def _as_flag(exc: ValidationError) -> str | None:
    """``--window-s -5: Input should be greater than 0`` for a request field a flag set, so the
    reader sees the flag they typed, not the service's field name (None: another field)."""
    err = exc.errors()[0]
    loc = err["loc"]
    if len(loc) != 1 or loc[0] not in _FLAG_FIELDS:
        return None
    value = err.get("input")
    said = f"{value:g}" if isinstance(value, float) else shown(value)
    return f"--{str(loc[0]).replace('_', '-')} {said}: {err['msg']}"


@contextmanager
def _guard() -> Iterator[None]:
    """Turn bad input into one line on stderr + exit 2; show warnings as one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ExtrapolationWarning)
        try:
            yield
        except ValidationError as e:  # a request's field, named as its flag when it has one
            _fail(_as_flag(e) or describe(e))
        except user_errors() as e:
            _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
        finally:
            for w in caught:
                if issubclass(w.category, ExtrapolationWarning):
                    typer.echo(f"warning: {w.message}", err=True)


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


def models_cmd(catalog: CatalogOpt = None, as_json: AsJson = False) -> None:
    """List the model catalog."""
    with _guard():
        cat = perf_service.catalog(catalog)
        if as_json:
            _print_json({n: m.model_dump(mode="json") for n, m in sorted(cat.models.items())})
            return
        _out.print(models_table(cat))


def gpus_cmd(catalog: CatalogOpt = None, as_json: AsJson = False) -> None:
    """List the GPU catalog (dense peaks; sources with --json)."""
    with _guard():
        cat = perf_service.catalog(catalog)
        if as_json:
            _print_json({n: g.model_dump(mode="json") for n, g in sorted(cat.gpus.items())})
            return
        _out.print(gpus_table(cat))


@hardware_flags(
    "model", "gpu", "tp", "gpu_memory_utilization", "data_parallel_size", "enable_expert_parallel"
)
def memory_cmd(
    block_size: int = typer.Option(16, "--block-size"),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="auto, bfloat16, float16, fp8."),
    quantization: str | None = typer.Option(
        None, "--quantization", help="vLLM --quantization: fp8, fp8_per_block, mxfp4, nvfp4_per_token, ..."
    ),
    max_num_batched_tokens: MaxTokens = None,
    max_num_seqs: MaxSeqs = None,
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="Default: the model's max_position_embeddings (as vLLM)."
    ),
    catalog: CatalogOpt = None,
    out: OutOpt = None,
    as_json: AsJson = False,
    *,
    deployment: DeploymentSpec,
) -> None:
    """KV-cache capacity vLLM would allocate: weights, reserve, blocks (per GPU)."""
    with _guard():
        request = MemoryRequest(
            model=deployment.model,
            gpu=deployment.gpu,
            tp=deployment.tp,
            gpu_memory_utilization=deployment.gpu_memory_utilization,
            block_size=block_size,
            kv_dtype=kv_dtype,
            quantization=quantization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            catalog=catalog,
            data_parallel_size=deployment.data_parallel_size,
            enable_expert_parallel=deployment.enable_expert_parallel,
        )
        cap = perf_service.memory(request)
        for note in cap.caveats:  # also in the JSON; on stderr so humans see them either way
            typer.echo(f"warning: {note}", err=True)
        if _emit(cap, as_json, out):
            return
        dp, ep = request.data_parallel_size, request.enable_expert_parallel
        layout = f"DP {dp} x TP {request.degree}{', EP' if ep else ''}" if dp > 1 or ep else None
        _out.print(memory_table(cap, request.degree, request.utilization, layout))
        _said_written(out)


@hardware_flags("model", "gpu", "tp", "profile")
def step_cmd(
    decodes: int = typer.Option(0, "--decodes", help="Decoding requests in the step."),
    decode_ctx: int = typer.Option(1024, "--decode-ctx", help="Mean context length of the decodes."),
    prefill: list[str] = typer.Option(
        [], "--prefill", help="A prefill chunk as TOKENS[:CACHED]; repeat for several."
    ),
    max_num_seqs: MaxSeqs = None,
    max_num_batched_tokens: MaxTokens = None,
    catalog: CatalogOpt = None,
    out: OutOpt = None,
    as_json: AsJson = False,
    *,
    deployment: DeploymentSpec,
) -> None:
    """Time one engine step with the roofline model, component by component."""
    with _guard():
        request = StepRequest(
            model=deployment.model,
            gpu=deployment.gpu,
            tp=deployment.tp,
            profile=deployment.profile,
            decodes=decodes,
            decode_ctx=decode_ctx,
            prefill=prefill,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            catalog=catalog,
        )
        answer = perf_service.step(request)
        if _emit(answer.document(), as_json, out):
            return
        _out.print(step_table(answer, request.degree))
        _said_written(out)


def profiles_cmd(
    name: str | None = typer.Argument(None, help="A shipped profile name or a profile JSON file."),
    as_json: AsJson = False,
) -> None:
    """List the shipped calibrated profiles, or show one."""
    with _guard():
        if name is None:
            names = perf_service.profiles()
            if as_json:
                _print_json(names)
            else:
                for n in names:
                    _out.print(n)
            return
        prof = perf_service.profile(name)
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


@hardware_flags("model", "gpu", "tp", "gpu_memory_utilization", helps=CALIBRATE_HELPS)
def calibrate_cmd(
    files: list[Path] = typer.Argument(
        ...,
        help="Step-level CSV file(s); .json vllm bench serve --save-result file(s), guidellm "
        "reports or inference-perf stage reports (told by content); or Prometheus scrape(s) of "
        "vLLM's /metrics (.prom/.txt, with --window-s).",
    ),
    base: str | None = typer.Option(None, "--base", help="Profile to start from (default: the GPU's)."),
    fit: str | None = typer.Option(
        None, "--fit", help="Comma-separated coefficients to fit (default: what the data determine)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Write the fitted profile JSON here."),
    max_num_seqs: int | None = typer.Option(
        None, "--max-num-seqs", help="Server setting of the bench runs. " + _SERVE_DEFAULT_HELP
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Server setting of the bench runs. " + _SERVE_DEFAULT_HELP
    ),
    num_gpu_blocks: int | None = typer.Option(
        None, "--num-gpu-blocks", help="KV blocks (default: the memory model's)."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the re-created bench arrivals."),
    workers: int = typer.Option(1, "--workers", min=1, help="Processes for re-simulating bench runs."),
    window_s: float | None = typer.Option(
        None, "--window-s", help="Scrapes: the seconds over which the scraped requests arrived."
    ),
    before: Path | None = typer.Option(
        None,
        "--before",
        help="Scrapes: the scrape taken at the window's start (default: the server's start).",
    ),
    burstiness: float = typer.Option(
        1.0, "--burstiness", help="Scrapes: burstiness of the arrivals (1: Poisson, as vllm bench's default)."
    ),
    catalog: CatalogOpt = None,
    as_json: AsJson = False,
    *,
    deployment: DeploymentSpec,
) -> None:
    """Fit a profile's efficiency factors and overheads to measurements; report the fit's error."""
    with _guard():
        request = CalibrateRequest(
            files=files,
            model=deployment.model,
            gpu=deployment.gpu,
            tp=deployment.tp,
            base=base,
            fit=[x.strip() for x in fit.split(",") if x.strip()] if fit else None,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            gpu_memory_utilization=deployment.gpu_memory_utilization or 0.9,
            num_gpu_blocks=num_gpu_blocks,
            seed=seed,
            workers=workers,
            catalog=catalog,
            window_s=window_s,
            before=before,
            burstiness=burstiness,
        )
        report = calibrate(request, out)
        if as_json:
            _print_json(report)
            return
        for table in calibration_tables(report):
            _out.print(table)
        for note in report.notes:
            _err.print(f"note: {note}")
        if out is not None:
            _out.print(f"profile written to {out}")


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
    one_in_flight: bool = typer.Option(
        True,
        "--one-in-flight/--open-loop",
        help="one-in-flight: a session sends its next round only once its last one finished "
        "(inference-perf's user sessions, where their locks are shared); open-loop: every request at "
        "its scheduled time.",
    ),
    request_timeout: float = typer.Option(
        300.0,
        "--request-timeout",
        min=0.0,
        help="The client's total timeout per request, seconds (0: none). A timed-out request is aborted "
        "in the engine and counted as failed; inference-perf's default is aiohttp's 300 s.",
    ),
    save_profile: Path | None = typer.Option(
        None, "--save-profile", help="With --calibrate: save the all-data fit."
    ),
    workers: int = typer.Option(1, "--workers", min=1, help="Processes for simulating experiments."),
    max_iter: int = typer.Option(8, "--max-iter", min=1, help="Calibration iterations (per fit)."),
    as_json: AsJson = False,
) -> None:
    """Re-create every experiment's workload, simulate it, and write predictions (ms) for score.py.

    With --calibrate loo, each run is predicted by a profile fitted on the others, and the errors
    are also shown per model, TP degree, workload and MoE/dense, beside the all-data fit's."""
    with _guard():
        request = Sim2RealRequest(
            directory=directory,
            profile=profile,
            calibrate=calibrate.value,
            kv_blocks=kv_blocks.value,
            output_tokens=output_tokens.value,
            itl_tokens=itl_tokens.value,
            questions=questions.value,
            request_timeout_s=request_timeout or None,
            one_in_flight=one_in_flight,
            save_profile=save_profile,
            workers=workers,
            max_iter=max_iter,
        )
        answer = sim2real(request, out, say=None if as_json else _stopwatch())
        if as_json:
            _print_json(answer.document(out, calibrate.value))
            return
        _out.print(sim2real_table(answer))
        _out.print(sim2real_groups_table(answer))
        for run, (failed, total) in sorted(answer.failures.items()):
            _err.print(f"note: run {run}: {failed} of {total} requests timed out at the client (failed)")
        _out.print(f"predictions written to {out}; score them with score.py {out} {directory}")
        if not answer.settled:
            _err.print("warning: a closed-loop replay did not settle within its rounds")
        sys.stdout.flush()


def _stopwatch() -> Callable[[str], None]:
    """Progress lines on stderr, each with the seconds since the start."""
    t0 = time.monotonic()

    def say(msg: str) -> None:
        _err.print(f"[{time.monotonic() - t0:6.0f}s] {msg}")

    return say


def sim2real_table(answer: Sim2RealAnswer) -> FitTable:
    """Median / mean APE per metric, servesim's and the peers'."""
    t = FitTable(title=f"sim2real: median / mean APE % over {len(answer.experiments)} experiments (stage -1)")
    t.add_column("simulator")
    metrics = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p90", "ttft_p90")
    for m in metrics:
        t.add_column(m, justify="right")

    def row(name: str, s: dict[str, dict[str, float]]) -> None:
        t.add_row(name, *[f"{s[m]['median']:.1f} / {s[m]['mean']:.1f}" if m in s else "-" for m in metrics])

    row("servesim", answer.mape)
    for name, s in sorted(answer.peers_mape.items()):
        row(name, s)
    return t


def sim2real_groups_table(answer: Sim2RealAnswer) -> FitTable:
    """Median APE per model, TP degree, workload and MoE/dense; leave-one-out beside in-sample."""
    loo = answer.in_sample_groups is not None
    what = "leave-one-out | all-data fit" if loo else "median APE %"
    t = FitTable(title=f"sim2real by group (stage -1; {what})")
    t.add_column("group")
    t.add_column("runs", justify="right")
    metrics = ("e2e_mean", "ttft_mean", "itl_mean")
    for m in metrics:
        t.add_column(m, justify="right")
    groups = answer.groups or {}
    inside = answer.in_sample_groups or {}
    for kind, rows in groups.items():
        for name, row in rows.items():
            other = inside.get(kind, {}).get(name, {})

            def cell(m: str, row: dict[str, float] = row, other: dict[str, float] = other) -> str:
                if m not in row:
                    return "-"
                return f"{row[m]:.1f} | {other[m]:.1f}" if loo and m in other else f"{row[m]:.1f}"

            t.add_row(f"{kind}: {name}", f"{row['n']:.0f}", *[cell(m) for m in metrics])
    return t


def register(app: typer.Typer) -> None:
    perf = typer.Typer(
        help="Model and GPU catalogs, KV-cache capacity, step times (the roofline model).",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    app.add_typer(perf, name="perf")
    perf.command("models")(models_cmd)
    perf.command("gpus")(gpus_cmd)
    perf.command("memory")(memory_cmd)
    perf.command("step")(step_cmd)
    perf.command("profiles")(profiles_cmd)
    app.command("calibrate")(calibrate_cmd)
    app.command("sim2real")(sim2real_cmd)
