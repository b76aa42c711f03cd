"""sim2real: re-run measured vLLM experiments from their spec and predict what was measured.

An experiment file (the format of ``tests/fixtures/sim2real``; see the README there) gives the
model's Hugging Face config, GPU, TP degree, scheduler limits, KV-block count, the
inference-perf workload spec and the measured latencies per load stage. ``predict_experiment``
re-creates the workload (``servesim.perf.workload``), simulates it with the experiment's
settings and returns ``{stage: {metric: ms}}`` in ``score.py``'s format:

* stages: ``"-1"`` the whole run, ``"0"``, ``"1"``, ... the load stages (a request belongs to
  the stage it was scheduled in);
* metrics: ``e2e_mean/p90/p99``, ``ttft_mean/p90/p99`` over finished requests, and
  ``itl_mean = (e2e_mean - ttft_mean) / (mean output tokens - 1)`` as inference-perf computes
  it (not a mean over token gaps).

KV blocks: by default the memory model derives them from model, precision, TP and GPU at
``gpu_memory_utilization`` 0.9 (``kv_blocks="model"``); ``kv_blocks="measured"`` uses the
experiment's logged ``total_kv_blocks``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.engine import EngineConfig
from servesim.errors import InternalError
from servesim.perf.calibration import CalibrationReport
from servesim.perf.catalog import GPUSpec, ModelSpec, load_catalog, model_from_hf_config
from servesim.perf.errors import BenchResultError, PerfError
from servesim.perf.kv_layout import kv_groups
from servesim.perf.memory import kv_capacity
from servesim.perf.profile import HardwareProfile, resolve_profile
from servesim.perf.replay import ReplayOutcome, RequestSet, replay, summarize_latencies
from servesim.perf.roofline import RooflineStepTime
from servesim.perf.workload import SharedPrefixWorkload, shared_prefix_requests
from servesim.perf.workload_case import WorkloadCase
from servesim.perf.workload_fit import calibrate_workloads, workload_jacobian

METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl_mean")

#: The client's total timeout per request when inference-perf's ``load.request_timeout`` is unset
#: (its default): it then passes no timeout to ``aiohttp.ClientSession``, whose default
#: ``ClientTimeout`` is 300 s in total (connection, request and the whole streamed response).
INFERENCE_PERF_TIMEOUT_S = 300.0

#: vLLM's default before 0.2x, and what the sim2real runs used.
SIM2REAL_GPU_MEMORY_UTILIZATION = 0.9

_GPU_NAMES = {"H100": "h100", "A100": "a100-80gb", "H200": "h200", "L40S": "l40s", "B200": "b200"}


class Sim2RealExperiment(BaseModel):
    """One measured run (the fields servesim uses; the rest of the file is kept in ``raw``)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    model: str
    hf_config: dict[str, Any]
    hardware: str
    precision: str
    tp: int = Field(ge=1)
    dp: int = Field(1, ge=1)
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    total_kv_blocks: int = Field(ge=2)
    block_size: int = Field(16, ge=1)
    workload: dict[str, Any]
    actual: dict[str, dict[str, float]] = Field(default_factory=dict)
    peers: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    derived: dict[str, Any] = Field(default_factory=dict)
    raw: dict[str, Any] = Field(default_factory=dict, exclude=True)

    @property
    def spec(self) -> SharedPrefixWorkload:
        ip = self.workload.get("spec", {}).get("inference_perf")
        if not isinstance(ip, dict):
            raise PerfError(f"experiment {self.id}: workload.spec.inference_perf is missing")
        return SharedPrefixWorkload.model_validate(ip)

    @property
    def seed(self) -> int:
        return int(self.workload.get("spec", {}).get("seed", 42))

    @property
    def stage_keys(self) -> list[str]:
        return ["-1", *[str(k) for k in range(len(self.spec.stages))]]

    def model_spec(self) -> ModelSpec:
        return model_from_hf_config(self.hf_config, name=self.model)

    def gpu_spec(self) -> GPUSpec:
        name = _GPU_NAMES.get(self.hardware.upper(), self.hardware)
        return load_catalog().gpu(name)

    def implied_output_tokens(self) -> int | None:
        """The whole run's counted mean output length, rounded (None when the file lacks it)."""
        v = self.counted_output_tokens().get("-1")
        return None if v is None else round(v)

    def counted_output_tokens(self) -> dict[str, float]:
        """``{stage: mean output tokens as the client counted them}`` (``derived``; may be empty)."""
        raw = self.derived.get("implied_mean_output_tokens") or {}
        out: dict[str, float] = {}
        for k, v in raw.items():
            f = _finite(v)
            if f is not None and f > 1:
                out[str(k)] = f
        return out


def is_experiment(data: Any) -> bool:
    """Whether a parsed JSON file looks like a sim2real experiment (not, say, a vllm bench result)."""
    return isinstance(data, dict) and "hf_config" in data and "actual" in data and "workload" in data


def parse_experiment(data: Any, source: str) -> Sim2RealExperiment:
    """One experiment from its parsed JSON; a bad file names the field (``BenchResultError.errors``)."""
    if not isinstance(data, dict) or "id" not in data:
        raise BenchResultError(
            f"{source}: not a sim2real experiment (no 'id')", [{"field": "id", "reason": "missing"}]
        )
    data = {**data, "id": str(data["id"])}
    try:
        exp = Sim2RealExperiment.model_validate(data)
    except ValidationError as e:
        errors: list[dict[str, str | None]] = [
            {"field": ".".join(str(x) for x in err["loc"]) or None, "reason": str(err["msg"])}
            for err in e.errors()
        ][:50]
        first = errors[0]
        raise BenchResultError(f"{source}: {first['field']}: {first['reason']}", errors) from e
    exp.raw = data
    return exp


def load_experiments(path: str | Path) -> list[Sim2RealExperiment]:
    """Every ``*.json`` experiment in a folder (or one file), sorted by id."""
    p = Path(path)
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    if not p.exists():
        raise PerfError(f"{p}: no such file or folder")
    out = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PerfError(f"{f}: cannot read experiment: {e}") from e
        out.append(parse_experiment(data, str(f)))
    if not out:
        raise PerfError(f"{p}: no experiment files (*.json)")
    return sorted(out, key=lambda e: e.id)


def default_experiment_profile(exps: Sequence[Sim2RealExperiment]) -> HardwareProfile:
    """The profile ``servesim sim2real`` predicts with when given none: the experiments' GPU's shipped
    profile, else the sim2real base profile."""
    gpus = {e.gpu_spec().name for e in exps}
    prof = resolve_profile(None, gpus.pop() if len(gpus) == 1 else None)
    return prof if prof.gpu is not None else sim2real_base_profile()


#: sim2real metric name -> (servesim's metric, statistic); itl_mean is inference-perf's own
#: ``(e2e_mean - ttft_mean) / (mean output - 1)``, compared on its own row.
_STAT_NAMES = {f"{m}_{s}": (f"{m}_ms", s) for m in ("e2e", "ttft") for s in ("mean", "p90", "p99")}


def experiment_stats(exp: Sim2RealExperiment, stage: str = "-1") -> dict[str, dict[str, float]]:
    """The measured latencies of one stage as ``{metric: {stat: ms}}`` (``views.measured``'s shape)."""
    out: dict[str, dict[str, float]] = {}
    for name, value in exp.actual.get(stage, {}).items():
        v = _finite(value)
        if name in _STAT_NAMES and v is not None:
            metric, stat = _STAT_NAMES[name]
            out.setdefault(metric, {})[stat] = v
    return out


class RunSettings(BaseModel):
    """How experiments are re-created (the same for every experiment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_blocks: Literal["model", "measured"] = "model"
    output_tokens: Literal["spec", "implied"] = Field(
        "spec",
        description="Tokens each request generates. spec: max_tokens (inference-perf sends "
        "ignore_eos=true by default); implied: the run's derived implied_mean_output_tokens.",
    )
    itl_tokens: Literal["counted", "generated"] = Field(
        "counted",
        description="The output count itl_mean divides by. counted: the client's count, the run's "
        "derived implied_mean_output_tokens per stage (inference-perf re-tokenizes the streamed text, "
        "which for Llama-2-7B's output gives ~195 of 247 generated tokens); generated: the simulated count.",
    )
    load_type: Literal["constant", "poisson"] = "constant"
    questions: Literal["per-session", "fresh"] = Field(
        "per-session",
        description="per-session: each session repeats its question every round, as inference-perf's "
        "generator does (prompts pre-generated per session); fresh: a new question per request.",
    )
    one_in_flight: bool = True
    request_timeout_s: float | None = Field(
        INFERENCE_PERF_TIMEOUT_S,
        gt=0,
        description="The client's total timeout per request (seconds; None: none). inference-perf's "
        "load.request_timeout defaults to None, which leaves aiohttp's default total timeout of 300 s; "
        "a timed-out request is aborted in the engine and counted as failed.",
    )
    gpu_memory_utilization: float = SIM2REAL_GPU_MEMORY_UTILIZATION
    max_rounds: int = 12


#: The measured runs' vLLM ran chunked local attention (Llama-4-Scout) without its hybrid KV cache
#: manager -- vLLM then turned it off by default for chunked local attention (the
#: ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` latency regression), and the runs' own
#: KV blocks say so: Scout-FP8 at TP 2 on H100 logged 8,253 blocks of 16 tokens, the
#: full-attention sizing, where the hybrid manager's blocks (one page of 12 layers, not 48) would
#: be about four times as many. So they are replayed with one full-attention group.
MEASURED_HYBRID_KV = False


def experiment_setup(
    exp: Sim2RealExperiment, profile: HardwareProfile, settings: RunSettings
) -> tuple[EngineConfig, RooflineStepTime, dict[str, Any]]:
    model = exp.model_spec()
    gpu = exp.gpu_spec()
    wl = exp.spec
    longest = (
        wl.shared_prefix.system_prompt_len + wl.shared_prefix.question_len + wl.shared_prefix.output_len + 1
    )
    info: dict[str, Any] = {"model": model.name, "gpu": gpu.name, "tp": exp.tp}
    if settings.kv_blocks == "measured":
        blocks = exp.total_kv_blocks
    else:
        cap = kv_capacity(
            model,
            gpu,
            exp.tp,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            block_size=exp.block_size,
            max_num_batched_tokens=exp.max_num_batched_tokens,
            max_num_seqs=exp.max_num_seqs,
            max_model_len=longest,
            hybrid=MEASURED_HYBRID_KV,
        )
        blocks = cap.num_gpu_blocks
    info["num_gpu_blocks"] = blocks
    info["measured_kv_blocks"] = exp.total_kv_blocks
    config = EngineConfig(
        max_num_seqs=exp.max_num_seqs,
        max_num_batched_tokens=exp.max_num_batched_tokens,
        block_size=exp.block_size,
        num_gpu_blocks=blocks,
        kv_cache_groups=kv_groups(model, hybrid=MEASURED_HYBRID_KV)[0],
    )
    st = RooflineStepTime(
        model,
        gpu,
        exp.tp,
        profile,
        max_num_seqs=exp.max_num_seqs,
        max_num_batched_tokens=exp.max_num_batched_tokens,
    )
    return config, st, info


def experiment_requests(exp: Sim2RealExperiment, settings: RunSettings) -> RequestSet:
    """The experiment's workload re-created (seeded) under ``settings``."""
    out_len = exp.implied_output_tokens() if settings.output_tokens == "implied" else None
    return shared_prefix_requests(
        exp.spec,
        seed=exp.seed,
        load_type=settings.load_type,
        output_len=out_len,
        one_in_flight=settings.one_in_flight,
        questions=settings.questions,
        label=f"sim2real {exp.id}",
        timeout_s=settings.request_timeout_s,
    )


def itl_divisors(exp: Sim2RealExperiment, settings: RunSettings) -> dict[str, float]:
    """``{stage: output count itl_mean divides by}``; empty means the simulated count."""
    return exp.counted_output_tokens() if settings.itl_tokens == "counted" else {}


def run_experiment(
    exp: Sim2RealExperiment, profile: HardwareProfile, settings: RunSettings | None = None
) -> tuple[dict[str, dict[str, float]], ReplayOutcome, dict[str, Any]]:
    """Simulate one experiment: (``{stage: {metric: ms}}``, the replay, setup details)."""
    settings = settings or RunSettings()
    config, st, info = experiment_setup(exp, profile, settings)
    rs = experiment_requests(exp, settings)
    out = replay(rs, config, st, profile, max_rounds=settings.max_rounds)
    if rs.stage is None:
        raise InternalError("invariant broken: rs.stage is None")
    counted = itl_divisors(exp, settings)
    pred: dict[str, dict[str, float]] = {}
    for key in exp.stage_keys:
        mask = None if key == "-1" else (rs.stage == int(key))
        s = summarize_latencies(out, mask, counted_output_tokens=counted.get(key))
        pred[key] = {m: s[m] for m in METRICS if m in s}
    info.update(
        rounds=out.rounds,
        converged=out.converged,
        num_requests=len(rs),
        num_finished=int(out.finished.sum()),
        num_failed=int(out.failed.sum()) if out.failed is not None else 0,
        num_steps=out.num_steps,
    )
    return pred, out, info


def _run_one(
    args: tuple[Sim2RealExperiment, HardwareProfile, RunSettings],
) -> tuple[str, dict[str, dict[str, float]], dict[str, Any]]:
    exp, profile, settings = args
    pred, _, info = run_experiment(exp, profile, settings)
    return exp.id, pred, info


def predict_experiments(
    experiments: Iterable[Sim2RealExperiment],
    profile: HardwareProfile | Mapping[str, HardwareProfile],
    settings: RunSettings | None = None,
    *,
    workers: int = 1,
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict[str, Any]]]:
    """Predictions for many experiments; ``profile`` may map experiment id -> profile (leave-one-out)."""
    settings = settings or RunSettings()
    exps = list(experiments)
    jobs = [(e, profile[e.id] if isinstance(profile, Mapping) else profile, settings) for e in exps]
    results: list[tuple[str, dict[str, dict[str, float]], dict[str, Any]]]
    if workers > 1 and len(jobs) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            results = list(pool.map(_run_one, jobs))
    else:
        results = [_run_one(j) for j in jobs]
    preds = {eid: p for eid, p, _ in results}
    infos = {eid: i for eid, _, i in results}
    return preds, infos


# ---------------------------------------------------------------------- scoring (score.py's rules)
def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def ape_table(
    preds: Mapping[str, Mapping[str, Mapping[str, float]]],
    experiments: Iterable[Sim2RealExperiment],
    stage: str = "-1",
) -> dict[str, dict[str, float]]:
    """``{exp: {metric: APE %}}`` exactly as ``score.py`` computes it."""
    out: dict[str, dict[str, float]] = {}
    for e in experiments:
        act = e.actual.get(stage, {})
        pred = preds.get(e.id, {}).get(stage, {})
        row: dict[str, float] = {}
        for m in METRICS:
            a = _finite(act.get(m))
            p = _finite(pred.get(m))
            if a is None or a == 0 or p is None:
                continue
            row[m] = 100.0 * abs(p - a) / abs(a)
        out[e.id] = row
    return out


def mape_summary(
    apes: Mapping[str, Mapping[str, float]], ids: Iterable[str] | None = None
) -> dict[str, dict[str, float]]:
    """``{metric: {n, median, mean}}`` over experiments (the MAPE rows of ``score.py``)."""
    keep = list(ids) if ids is not None else list(apes)
    res: dict[str, dict[str, float]] = {}
    for m in METRICS:
        vals = [apes[e][m] for e in keep if e in apes and m in apes[e]]
        if vals:
            res[m] = {
                "n": float(len(vals)),
                "median": statistics.median(vals),
                "mean": statistics.fmean(vals),
            }
    return res


def peer_predictions(
    experiments: Iterable[Sim2RealExperiment],
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """``{peer: {exp: {stage: {metric: value}}}}`` from the experiment files."""
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for e in experiments:
        for peer, table in e.peers.items():
            out.setdefault(peer, {})[e.id] = {str(int(k)): v for k, v in table.items()}
    return out


# ---------------------------------------------------------------------- calibration on experiments
#: Coefficients fitted on sim2real runs: the ones the measured TTFT and ITL determine. Every
#: session repeats its prompt, so after its first round a request's prefill is a cache hit:
#: decode steps (weight streaming, KV reads, per-step and per-layer overheads) and the front end
#: dominate, while prefill compute (``gemm_compute_efficiency``) barely shows and stays at its
#: Vidur-fitted prior. The only MoE model (Llama-4-Scout, three runs of one start-up) cannot pin
#: the MoE coefficients down either; fitted, they ran to implausible values (1.5 % of peak) to
#: absorb run 48, so they stay at their priors too.
#: The TP all-reduce latency is fitted: the runs span TP 1, 2 and 4, which separates it from the
#: per-layer overhead (it lands near 3 µs per peer: vLLM's custom all-reduce on NVLink under
#: CUDA graphs). The attention KV-read efficiency is not: only Llama-2-7B (full multi-head
#: attention, 512 KiB of KV per token) reads enough KV to show it. Fitted on all eight runs it
#: goes to its bound (1.0); fitted without Llama-2-7B, the other seven trade it against the
#: weight-streaming efficiency (0.28 vs 0.80) and Llama-2-7B is then predicted 139 % slow.
SIM2REAL_FIT = [
    "gemm_bandwidth_efficiency",
    "step_overhead_s",
    "per_layer_overhead_s",
    "frontend_latency_s",
    "allreduce_latency_s",
]
#: Robust loss of the sim2real fit: Cauchy, so that a run no global setting can explain (run 48:
#: Llama-4-Scout with 1,400-token outputs, TTFT 2.4x and ITL 1.4x what the same model's other runs
#: imply) is effectively left out instead of dragging the shared coefficients (with soft-L1 it
#: pulled the weight-streaming efficiency of every dense model 20 % low).
SIM2REAL_LOSS = "cauchy"
#: Metrics the fit matches, per load stage. E2E follows from them given the output length, so
#: matching it too would count the same error twice.
SIM2REAL_TARGETS = ("ttft_mean", "itl_mean")


def experiment_case(
    exp: Sim2RealExperiment,
    settings: RunSettings | None = None,
    profile: HardwareProfile | None = None,
    metrics: Iterable[str] = SIM2REAL_TARGETS,
) -> WorkloadCase:
    """The experiment as a calibration case: its workload, settings and per-stage targets."""
    settings = settings or RunSettings()
    config, st, info = experiment_setup(exp, profile or HardwareProfile(), settings)
    rs = experiment_requests(exp, settings)
    targets: dict[str, float] = {}
    for k in range(len(exp.spec.stages)):
        act = exp.actual.get(str(k), {})
        for m in metrics:
            v = _finite(act.get(m))
            if v is not None and v > 0:
                targets[f"{k}:{m}"] = v
    if not targets:
        raise PerfError(f"experiment {exp.id}: no measured {', '.join(metrics)} per load stage to fit")
    return WorkloadCase(
        name=exp.id,
        requests=rs,
        config=config,
        model=st.model,
        gpu=st.gpu,
        tp=exp.tp,
        targets=targets,
        max_rounds=settings.max_rounds,
        info=info,
        counted_output_tokens=itl_divisors(exp, settings),
    )


def sim2real_base_profile(gpu: str | None = None) -> HardwareProfile:
    """The priors the sim2real calibration starts from: the generic defaults, async scheduling on.

    vLLM V1 schedules asynchronously by default (the reference, section 7): a request that
    arrives during step n joins step n+2. The runs' TTFTs show it: with each session's prompt
    cached after its first round, measured TTFT minus the modelled prefill and front end is
    about one step time in every run (Yi-34B: 47 ms measured, 30 ms without the extra step,
    whose decode steps take 15 ms). See docs/perf.md.
    """
    return HardwareProfile(name=f"{gpu or 'generic'}-sim2real-priors", async_scheduling=True)


class Sim2RealCalibration(BaseModel):
    """Leave-one-out calibration on sim2real experiments (one GPU)."""

    fit: list[str]
    settings: RunSettings
    full: CalibrationReport = Field(description="Fitted on every experiment (the profile to ship).")
    folds: dict[str, CalibrationReport] = Field(
        default_factory=dict, description="Experiment id -> fit on all the others (its prediction's profile)."
    )

    def fold_profiles(self) -> dict[str, HardwareProfile]:
        return {k: v.profile for k, v in self.folds.items()}


def calibrate_experiments(
    experiments: Sequence[Sim2RealExperiment],
    *,
    base: HardwareProfile | None = None,
    fit: Sequence[str] | None = None,
    settings: RunSettings | None = None,
    leave_one_out: bool = True,
    workers: int = 1,
    max_iter: int = 12,
    progress: Callable[[str], None] | None = None,
    jacobian_reuse: bool = True,
    loss: str = SIM2REAL_LOSS,
) -> Sim2RealCalibration:
    """Fit one profile on all experiments and, with ``leave_one_out``, one per held-out experiment.

    The held-out experiment's prediction must use the profile fitted without it; that is what
    the docs' score table reports. All experiments must share one GPU type. Every fit starts
    from ``base`` with its prior centred there. ``jacobian_reuse`` gives every fit one Jacobian
    taken at the priors, which each fit then updates along its own steps (Broyden: one
    re-simulation per iteration); without it each fit takes its own finite differences.
    """
    exps = list(experiments)
    gpus = {e.gpu_spec().name for e in exps}
    if len(gpus) != 1:
        raise PerfError(f"calibrate one GPU at a time; these experiments use {sorted(gpus)}")
    settings = settings or RunSettings()
    base = base or sim2real_base_profile(gpus.pop())
    names = list(fit if fit is not None else SIM2REAL_FIT)
    cases = [experiment_case(e, settings, base) for e in exps]

    def say(msg: str) -> None:
        if progress is not None:
            progress(msg)

    jac = None
    if jacobian_reuse:
        # Sensitivities at the priors: they depend on the model and the priors only, not on any
        # measurement, so every fit (all experiments, and each fold) can use them.
        say(f"jacobian of {', '.join(names)} at the priors")
        jac = workload_jacobian(cases, base, names, workers=workers, progress=progress)
    say(f"fitting on all {len(cases)} experiments")
    full = calibrate_workloads(
        cases,
        base=base,
        fit=names,
        workers=workers,
        max_iter=max_iter,
        name="sim2real-all",
        progress=progress,
        frozen_jacobian=jac,
        loss=loss,
    )
    folds: dict[str, CalibrationReport] = {}
    if leave_one_out:
        for k, c in enumerate(cases):
            say(f"fold {k + 1}/{len(cases)}: without experiment {c.name}")
            rest = cases[:k] + cases[k + 1 :]
            # Strictly out of sample: same priors and starting point as the full fit, and only
            # the training experiments' residuals.
            folds[c.name] = calibrate_workloads(
                rest,
                base=base,
                fit=names,
                workers=workers,
                max_iter=max_iter,
                name=f"sim2real-without-{c.name}",
                progress=progress,
                frozen_jacobian=jac,
                loss=loss,
            )
    return Sim2RealCalibration(fit=names, settings=settings, full=full, folds=folds)
