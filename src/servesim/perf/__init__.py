"""The step-time and memory model: how long engine steps take and how many KV blocks fit.

Public API::

    build_step_time_model(model, gpu, tp=1, profile=None, *, catalog=None, kv_dtype="auto",
                          max_num_seqs=128, max_num_batched_tokens=2048) -> RooflineStepTime
    kv_capacity(model, gpu, tp=1, *, gpu_memory_utilization=0.9, block_size=16, kv_dtype="auto",
                max_num_batched_tokens=2048, max_num_seqs=128, max_model_len=None) -> KVCapacity
    deployment_setup(model, gpu, tp, profile, *, max_num_seqs, max_num_batched_tokens, ...)
        -> DeploymentSetup(step_time, num_gpu_blocks, notes)   # both at once: servesim.spec.resolve's
    kv_bytes_per_token(model_spec, tp=1, kv_dtype="auto") -> int   # THE KV-size formula
    load_catalog(extra_yaml=None) -> Catalog; model_from_hf_config(path_or_dict) -> ModelSpec
    HardwareProfile (.load / .save), default_profile(gpu), resolve_profile(...)
    read_step_csv / calibrate_steps; read_bench_result / calibrate_workloads

Module map: ``catalog`` (ModelSpec, GPUSpec, YAML catalogs, HF config loader) · ``memory``
(weights, reserve, KV capacity) · ``profile`` (calibration coefficients) · ``roofline`` (the
StepTimeModel) · ``replay`` (client closed loops, async lag, front-end latency) · ``workload``
(inference-perf shared-prefix load) · ``fit`` (SciPy least squares over ln-coefficients) ·
``calibration`` (the report, fit bounds) · ``step_io`` / ``step_fit`` (step CSVs and their fit) ·
``workload_case`` / ``workload_fit`` (re-simulated runs and their fit) · ``bench_io``
(``vllm bench serve`` results) · ``sim2real``.
"""

from servesim.perf.bench_io import read_bench_result
from servesim.perf.calibration import CalibrationReport, ErrorStats
from servesim.perf.catalog import Catalog, GPUSpec, ModelSpec, load_catalog, model_from_hf_config
from servesim.perf.errors import (
    CalibrationError,
    CatalogError,
    MemoryFitError,
    PerfError,
    UnknownGPUError,
    UnknownModelError,
)
from servesim.perf.memory import (
    KVCapacity,
    MemoryOverheads,
    kv_bytes_per_token,
    kv_capacity,
    weight_breakdown,
    weight_bytes_per_gpu,
)
from servesim.perf.profile import (
    FittedRange,
    HardwareProfile,
    builtin_profile_names,
    default_profile,
    resolve_profile,
)
from servesim.perf.roofline import (
    ExtrapolationWarning,
    RooflineStepTime,
    build_step_time_model,
    extrapolation_warnings,
)
from servesim.perf.setup import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    DeploymentSetup,
    ReplicaSetup,
    default_deployment,
    deployment_setup,
    replica_setup,
)
from servesim.perf.step_fit import calibrate_steps
from servesim.perf.step_io import StepGroup, read_step_csv
from servesim.perf.workload_case import WorkloadCase
from servesim.perf.workload_fit import calibrate_workloads

__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "CalibrationError",
    "CalibrationReport",
    "Catalog",
    "CatalogError",
    "DeploymentSetup",
    "ErrorStats",
    "ExtrapolationWarning",
    "FittedRange",
    "GPUSpec",
    "HardwareProfile",
    "KVCapacity",
    "MemoryFitError",
    "MemoryOverheads",
    "ModelSpec",
    "PerfError",
    "ReplicaSetup",
    "RooflineStepTime",
    "StepGroup",
    "UnknownGPUError",
    "UnknownModelError",
    "WorkloadCase",
    "build_step_time_model",
    "builtin_profile_names",
    "calibrate_steps",
    "calibrate_workloads",
    "default_deployment",
    "default_profile",
    "deployment_setup",
    "extrapolation_warnings",
    "kv_bytes_per_token",
    "kv_capacity",
    "load_catalog",
    "model_from_hf_config",
    "read_bench_result",
    "read_step_csv",
    "replica_setup",
    "resolve_profile",
    "weight_breakdown",
    "weight_bytes_per_gpu",
]
