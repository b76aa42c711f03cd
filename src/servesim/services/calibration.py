"""Fitting the step-time model to measurements, and checking it against real runs.

* ``calibrate(CalibrateRequest)``: a profile's efficiency factors and overheads fitted to step-level
  CSV files (the engine's own step times), to ``vllm bench serve --save-result`` files or guidellm
  benchmarks reports (each benchmark's workload re-simulated as its client saw it), or to
  Prometheus scrapes, with the fit's error before and after;
* ``sim2real(Sim2RealRequest)``: every sim2real experiment's workload re-created and simulated
  (with a given profile, the default one, or profiles fitted on the experiments), its predictions
  and their error against the measurements and the peer simulators'.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InternalError
from servesim.io import write_text_atomic
from servesim.perf import PerfError
from servesim.services.perf import batch_limits, catalog

if TYPE_CHECKING:
    from servesim.perf import CalibrationReport, WorkloadCase
    from servesim.perf.catalog import Catalog
    from servesim.perf.sim2real import RunSettings, Sim2RealExperiment

#: What a bench-result fit frees when the request names none (at most as many as the targets).
BENCH_FIT = ("gemm_bandwidth_efficiency", "gemm_compute_efficiency", "frontend_latency_s")


class CalibrateRequest(BaseModel):
    """Measurements to fit (all ``.csv`` step files, all ``.json`` bench results / guidellm reports, or
    all scrapes) and how."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: list[Path] = Field(min_length=1)
    model: str | None = Field(
        None, description="Unless the CSV has a model column (bench results: required)."
    )
    gpu: str | None = Field(None, description="Unless the CSV has a gpu column (bench results: required).")
    tp: int | None = Field(None, ge=1, le=64, description="Unless the CSV has a tp column (default 1).")
    base: str | None = Field(None, description="Profile to start from (default: the GPU's).")
    fit: list[str] | None = Field(None, description="Coefficients to fit (default: what the data determine).")
    max_num_seqs: int | None = Field(
        None, ge=1, description="Server setting of the bench runs (None: what vllm serve runs on the GPU)."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="Server setting of the bench runs (None: what vllm serve runs on the GPU)."
    )
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, allow_inf_nan=False)
    num_gpu_blocks: int | None = Field(None, description="KV blocks (default: the memory model's).")
    seed: int = Field(0, ge=0, description="Seed of the re-created bench arrivals.")
    workers: int = Field(1, ge=1, description="Processes for re-simulating bench runs.")
    catalog: Path | None = None
    window_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Scrapes: seconds over which the scraped requests arrived.",
    )
    before: Path | None = Field(
        None, description="Scrapes: the scrape at the window's start (None: server start)."
    )
    burstiness: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="Scrapes: arrival burstiness (1: Poisson; vllm bench's)."
    )

    def kind(self) -> Literal["csv", "json", "prom"]:
        kinds = {SUFFIX_KINDS.get(f.suffix.lower()) for f in self.files}
        if None in kinds or len(kinds) != 1:
            raise PerfError(
                "give step-level .csv files, vllm bench .json files (or guidellm reports) or Prometheus "
                "scrapes of vLLM's /metrics (.prom, .txt): one kind at a time"
            )
        kind: Literal["csv", "json", "prom"] = kinds.pop()  # type: ignore[assignment]
        if kind == "prom" and self.window_s is None:
            raise PerfError("a scrape needs --window-s: the seconds over which its requests arrived")
        if kind == "prom" and self.before is not None and len(self.files) != 1:
            raise PerfError("--before pairs with one scrape (the window's end), not several")
        return kind


#: File suffix -> what ``calibrate`` reads it as.
SUFFIX_KINDS: dict[str, Literal["csv", "json", "prom"]] = {
    ".csv": "csv",
    ".json": "json",
    ".prom": "prom",
    ".txt": "prom",
    ".metrics": "prom",
}


def _steps(request: CalibrateRequest, cat: Catalog) -> CalibrationReport:
    from servesim.perf import calibrate_steps, read_step_csv, resolve_profile

    groups = []
    for f in request.files:
        groups += read_step_csv(f, model=request.model, gpu=request.gpu, tp=request.tp, catalog=cat)
    gpus = {g.gpu.name for g in groups}
    start = resolve_profile(request.base, gpus.pop() if len(gpus) == 1 else None)
    return calibrate_steps(groups, base=start, fit=request.fit)


def _bench(request: CalibrateRequest, cat: Catalog) -> CalibrationReport:
    from servesim.perf import calibrate_workloads, resolve_profile
    from servesim.perf.catalog import resolve_gpu

    if request.model is None or request.gpu is None:
        raise PerfError("bench results and scrapes need --model and --gpu (and --tp if not 1)")
    gpu_name = resolve_gpu(request.gpu, cat).name
    seqs, budget = batch_limits(gpu_name, request.max_num_seqs, request.max_num_batched_tokens)
    defaulted = [
        f"{key} {value}"
        for key, given, value in (
            ("max_num_seqs", request.max_num_seqs, seqs),
            ("max_num_batched_tokens", request.max_num_batched_tokens, budget),
        )
        if given is None
    ]
    settings: dict[str, Any] = {
        "model": request.model,
        "gpu": request.gpu,
        "tp": request.tp or 1,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": budget,
        "gpu_memory_utilization": request.gpu_memory_utilization,
        "seed": request.seed,
        "catalog": cat,
    }
    if request.kind() == "prom":
        cases = [_scrape_case(request, f, settings) for f in request.files]
    else:
        cases = [c for f in request.files for c in _json_cases(f, request.num_gpu_blocks, settings)]
    start = resolve_profile(request.base, cases[0].gpu.name)
    names = request.fit
    if names is None:  # a scrape's latencies are the server's: the front end is not in them
        free = [n for n in BENCH_FIT if not (request.kind() == "prom" and n == "frontend_latency_s")]
        n_targets = sum(len(c.targets) for c in cases)
        names = free[: max(1, min(len(free), n_targets))]
    report = calibrate_workloads(cases, base=start, fit=names, workers=request.workers)
    if defaulted:
        note = (
            f"the bench runs' server was taken to run vllm serve's defaults on {gpu_name}: "
            f"{', '.join(defaulted)} (give --max-num-seqs / --max-num-batched-tokens if it did not)"
        )
        report = report.model_copy(update={"notes": [note, *report.notes]})
    return report


def _json_cases(path: Path, blocks: int | None, settings: dict[str, Any]) -> list[WorkloadCase]:
    """A ``.json`` measurement's cases: a guidellm report (one per benchmark), an inference-perf
    stage report or a vllm bench result, told apart by content."""
    from servesim.perf import read_bench_result
    from servesim.perf.guidellm_io import json_kind, read_guidellm_report
    from servesim.perf.inference_perf_io import read_stage_report

    kind = json_kind(path)
    if kind == "guidellm":
        return read_guidellm_report(path, num_gpu_blocks=blocks, **settings)
    if kind == "inference-perf":
        return [read_stage_report(path, num_gpu_blocks=blocks, **settings)]
    return [read_bench_result(path, num_gpu_blocks=blocks, **settings)]


def _scrape_case(request: CalibrateRequest, path: Path, settings: dict[str, Any]) -> WorkloadCase:
    """One scrape (or a pair, with ``--before``) re-created as a benchmark run."""
    from servesim.perf.bench_io import bench_case
    from servesim.perf.prometheus_io import read_scrape, scrape_summary

    after = read_scrape(path)
    before = read_scrape(request.before) if request.before is not None else None
    if request.window_s is None:
        raise InternalError("invariant broken: kind() lets no scrape through without a window")
    summary = scrape_summary(after, before, request.window_s, request.burstiness)
    blocks = request.num_gpu_blocks or after.num_gpu_blocks  # vLLM's vllm:cache_config_info
    return bench_case(
        summary,
        str(path),
        path.stem,
        num_gpu_blocks=blocks,
        label=f"scrape {path.name}",
        server_side=True,
        **settings,
    )


def calibrate(request: CalibrateRequest, out: Path | None = None) -> CalibrationReport:
    """The fit (``out``: the fitted profile saved there as JSON)."""
    cat = catalog(request.catalog)
    report = _steps(request, cat) if request.kind() == "csv" else _bench(request, cat)  # bench or scrape
    if out is not None:
        if report.parameters and not any(p.determined for p in report.parameters):
            names = ", ".join(p.name for p in report.parameters)
            raise PerfError(
                f"the fitted profile was not written to {out}: the data determine none of {names} "
                "(each could move far without changing the fit); fit fewer with --fit, or add measurements"
            )
        from servesim.perf.calibration import implausible

        if bad := implausible(report.parameters):
            raise PerfError(f"the fitted profile was not written to {out}: {bad[0]}")
        report.profile.save(out)
    return report


# ----------------------------------------------------------------------------------- sim2real
CalibrateMode = Literal["none", "all", "loo"]


class Sim2RealRequest(BaseModel):
    """A folder of sim2real experiments, how to re-create them, and which profile predicts them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    directory: Path
    profile: str | None = Field(None, description="Profile to predict with (not with calibrate).")
    calibrate: CalibrateMode = Field("none", description="loo: each fitted on the others; all: one fit.")
    kv_blocks: Literal["model", "measured"] = "model"
    output_tokens: Literal["spec", "implied"] = "spec"
    itl_tokens: Literal["counted", "generated"] = "counted"
    questions: Literal["per-session", "fresh"] = "per-session"
    one_in_flight: bool = Field(True, description="A session holds its next round until its last finished.")
    request_timeout_s: float | None = Field(
        300.0, gt=0, description="The client's total timeout per request, seconds (None: none)."
    )
    save_profile: Path | None = Field(None, description="With calibrate: save the all-data fit.")
    workers: int = Field(1, ge=1)
    max_iter: int = Field(8, ge=1)


@dataclass(frozen=True)
class Sim2RealAnswer:
    """The predictions (score.py's PRED.json), their errors, and the peers' errors."""

    experiments: list[Sim2RealExperiment]
    settings: RunSettings
    predictions: dict[str, Any]
    infos: dict[str, Any]
    ape: dict[str, Any]
    mape: dict[str, Any]
    peers_mape: dict[str, Any]
    #: Leave-one-out only: each run's error under the all-data fit (in sample), beside its own.
    in_sample_ape: dict[str, Any] | None = None
    #: ``{kind: {group: {n, metric: median APE %}}}`` (``perf.sim2real_groups``).
    groups: dict[str, Any] | None = None
    in_sample_groups: dict[str, Any] | None = None

    @property
    def settled(self) -> bool:
        """Every closed-loop replay settled within its rounds."""
        return all(i.get("converged", True) for i in self.infos.values())

    def document(self, out: Path, calibration: str) -> dict[str, Any]:
        """``sim2real --json``."""
        return {
            "out": str(out),
            "settings": self.settings.model_dump(),
            "calibration": calibration,
            "experiments": self.infos,
            "ape": self.ape,
            "mape": self.mape,
            "peers_mape": self.peers_mape,
            "groups": self.groups,
            **(
                {
                    "in_sample_ape": self.in_sample_ape,
                    "in_sample_mape": self.in_sample_mape,
                    "in_sample_groups": self.in_sample_groups,
                }
                if self.in_sample_ape is not None
                else {}
            ),
        }

    @property
    def in_sample_mape(self) -> dict[str, Any] | None:
        from servesim.perf.sim2real import mape_summary

        return None if self.in_sample_ape is None else mape_summary(self.in_sample_ape)

    @property
    def failures(self) -> dict[str, tuple[int, int]]:
        """``{run: (failed, requests)}`` for runs in which some client timed out."""
        return {
            k: (int(i.get("num_failed", 0)), int(i.get("num_requests", 0)))
            for k, i in self.infos.items()
            if i.get("num_failed")
        }


def _profile(
    request: Sim2RealRequest, exps: list[Sim2RealExperiment], settings: RunSettings, say: Any
) -> tuple[Any, Any]:
    """The profile(s) that predict: fitted (one per fold, or one on all), given, or the default;
    and, for leave-one-out, the all-data fit (its in-sample errors go beside the folds')."""
    from servesim.perf import resolve_profile
    from servesim.perf.sim2real import calibrate_experiments, default_experiment_profile

    if request.calibrate != "none":
        if request.profile is not None:
            raise PerfError("--profile and --calibrate exclude each other")
        cal = calibrate_experiments(
            exps,
            settings=settings,
            leave_one_out=request.calibrate == "loo",
            workers=request.workers,
            max_iter=request.max_iter,
            progress=say,
        )
        if request.save_profile is not None:
            cal.full.profile.save(request.save_profile)
        if request.calibrate == "loo":
            return cal.fold_profiles(), cal.full.profile
        return cal.full.profile, None
    if request.profile is None:
        return default_experiment_profile(exps), None
    gpus = {e.gpu_spec().name for e in exps}
    return resolve_profile(request.profile, gpus.pop() if len(gpus) == 1 else None), None


def sim2real(
    request: Sim2RealRequest, out: Path, *, say: Callable[[str], None] | None = None
) -> Sim2RealAnswer:
    """Predict every experiment (written to ``out`` in score.py's format) and score the predictions;
    ``say``: a line per stage of a long fit."""
    from servesim.perf.sim2real import (
        RunSettings,
        ape_table,
        load_experiments,
        mape_summary,
        peer_predictions,
        predict_experiments,
    )
    from servesim.perf.sim2real_groups import group_medians

    exps = load_experiments(request.directory)
    settings = RunSettings(
        kv_blocks=request.kv_blocks,
        output_tokens=request.output_tokens,
        itl_tokens=request.itl_tokens,
        questions=request.questions,
        request_timeout_s=request.request_timeout_s,
        one_in_flight=request.one_in_flight,
    )
    prof, full = _profile(request, exps, settings, say)
    preds, infos = predict_experiments(exps, prof, settings, workers=request.workers)
    write_text_atomic(out, json.dumps(preds, indent=1, sort_keys=True) + "\n")
    apes = ape_table(preds, exps)
    in_sample = None
    if full is not None:
        in_preds, _ = predict_experiments(exps, full, settings, workers=request.workers)
        in_sample = ape_table(in_preds, exps)
    peers = {
        name: mape_summary(ape_table(p, [e for e in exps if e.id in p]))
        for name, p in peer_predictions(exps).items()
    }
    return Sim2RealAnswer(
        experiments=exps,
        settings=settings,
        predictions=preds,
        infos=infos,
        ape=apes,
        mape=mape_summary(apes),
        peers_mape=peers,
        in_sample_ape=in_sample,
        groups=group_medians(apes, exps),
        in_sample_groups=None if in_sample is None else group_medians(in_sample, exps),
    )


__all__ = [
    "CalibrateRequest",
    "Sim2RealAnswer",
    "Sim2RealRequest",
    "calibrate",
    "sim2real",
]
