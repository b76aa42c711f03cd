"""Weight precision: the bytes a quantized weight takes, the formats a checkpoint declares, what
vLLM 0.33's ``--quantization`` does to a 16-bit checkpoint, and where vLLM refuses a format.

Bytes per weight include the block scales stored beside the weights, because they are held in
memory and read by every GEMM like the weights: FP8 block-scaled keeps one fp32 scale per 128 x 128
block (``kFp8Static128BlockSym``), NVFP4 one FP8 E4M3 scale per 16 weights, MXFP4 one E8M0 byte
per 32 weights (the OCP MX spec); per-tensor and per-channel scales are a few bytes per matrix and
are left out. The tensor-core rate each format's GEMMs run at is ``GPUSpec.peak_flops``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

from servesim.engine.config import Quantization
from servesim.errors import InternalError
from servesim.perf.errors import CatalogError, PerfError

if TYPE_CHECKING:
    from servesim.perf.catalog import ModelSpec, QuantizedModule
    from servesim.perf.gpu_spec import GPUSpec

WeightDType = Literal["fp8", "fp8_block", "nvfp4", "mxfp4", "int8", "int4"]

#: Bytes per stored weight of each quantized format, scales included (see the module docstring).
WEIGHT_DTYPE_BYTES: dict[str, float] = {
    "fp8": 1.0,
    "fp8_block": 1.0 + 4.0 / (128 * 128),
    "nvfp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
    "int8": 1.0,
    "int4": 0.5,
}

_ALL: tuple[QuantizedModule, ...] = ("attention", "mlp", "experts", "shared_experts")

#: vLLM 0.33's ``--quantization`` values servesim times, on a 16-bit checkpoint: the weight format
#: and the modules it quantizes (``vllm/config/quantization.py`` ``_ONLINE_SHORTHANDS``; ``fp8`` is
#: ``Fp8Config``'s online per-tensor path; ``nvfp4_per_token`` quantizes MoE experts only).
ONLINE_QUANTIZATION: dict[str, tuple[WeightDType, tuple[QuantizedModule, ...]]] = {
    "fp8": ("fp8", _ALL),
    "fp8_per_tensor": ("fp8", _ALL),
    "fp8_per_channel": ("fp8", _ALL),
    "fp8_per_block": ("fp8_block", _ALL),
    "mxfp4": ("mxfp4", _ALL),
    "nvfp4_per_token": ("nvfp4", ("experts",)),
}
#: Checkpoint methods: ``--quantization`` may name the checkpoint's own format (vLLM checks the two
#: agree), which then changes nothing.
CHECKPOINT_QUANTIZATION: dict[str, tuple[str, ...]] = {
    "modelopt_fp4": ("nvfp4",),
    "modelopt": ("fp8", "fp8_block"),
    "compressed-tensors": ("fp8", "fp8_block", "nvfp4", "mxfp4", "int8", "int4"),
}
QUANTIZATION_METHODS: tuple[str, ...] = (*ONLINE_QUANTIZATION, *CHECKPOINT_QUANTIZATION)
if set(QUANTIZATION_METHODS) != set(get_args(Quantization)):  # one list: the engine's Literal
    raise InternalError("perf.precision's --quantization methods differ from engine.config.Quantization")

#: ``input_size % 32`` that vLLM's online MXFP4 checks (``MXFP4_BLOCK_SIZE``).
MXFP4_BLOCK = 32


def apply_quantization(model: ModelSpec, quantization: str | None, gpu: GPUSpec, tp: int = 1) -> ModelSpec:
    """``model`` as vLLM loads it with ``--quantization quantization`` on ``gpu``, checked
    (``check_weight_format``). None: the checkpoint as it is."""
    if quantization is not None:
        model = _quantized(model, quantization, gpu, tp)
    check_weight_format(model, gpu)
    return model


def _quantized(model: ModelSpec, method: str, gpu: GPUSpec, tp: int) -> ModelSpec:
    if method in CHECKPOINT_QUANTIZATION:
        formats = CHECKPOINT_QUANTIZATION[method]
        if model.weight_dtype not in formats:
            raise PerfError(
                f"--quantization {method} needs a checkpoint quantized as {'/'.join(formats)}; "
                f"{model.name} is {model.weight_dtype or model.dtype} (to quantize a 16-bit checkpoint at "
                f"load time use one of {', '.join(ONLINE_QUANTIZATION)})"
            )
        return model
    if method not in ONLINE_QUANTIZATION:
        raise PerfError(f"--quantization {method!r} is not one of {', '.join(QUANTIZATION_METHODS)}")
    wd, modules = ONLINE_QUANTIZATION[method]
    if model.weight_dtype is not None:
        if model.weight_dtype == wd:
            return model
        raise PerfError(
            f"--quantization {method}: {model.name} is already a {model.weight_dtype} checkpoint (vLLM "
            "refuses a method other than the checkpoint's); drop --quantization or use a 16-bit checkpoint"
        )
    if method == "nvfp4_per_token":
        if not (gpu.vendor == "NVIDIA" and gpu.fp4_flops is not None):
            raise PerfError(
                f"--quantization nvfp4_per_token on {gpu.name}: vLLM 0.33 runs it on Blackwell (SM100) "
                "GPUs only (FlashInfer TRT-LLM MoE); use fp8_per_block or mxfp4"
            )
        if not model.is_moe:
            raise PerfError(
                f"--quantization nvfp4_per_token quantizes MoE experts only and {model.name} is dense "
                "(its weights would stay 16-bit); use fp8_per_block or mxfp4"
            )
    if wd == "mxfp4":
        widths = {"hidden_size": model.hidden_size, "intermediate_size / tp": model.intermediate_size // tp}
        if model.is_moe:
            widths["moe_intermediate_size / tp"] = model.expert_intermediate_size // tp
        bad = [f"{k} {v}" for k, v in widths.items() if v % MXFP4_BLOCK]
        if bad:
            raise PerfError(
                f"--quantization mxfp4 with {model.name} at TP {tp}: vLLM's online MXFP4 needs widths "
                f"divisible by {MXFP4_BLOCK} ({', '.join(bad)})"
            )
    return model.model_copy(update={"weight_dtype": wd, "quantized_modules": list(modules)})


def check_weight_format(model: ModelSpec, gpu: GPUSpec) -> None:
    """vLLM 0.33's refusals of a weight format on a GPU, as one line naming both.

    NVFP4 on ROCm has no kernel but vLLM's emulation backend (every weight dequantized in every
    forward: ``fused_moe/oracle/nvfp4.py``'s last resort), which servesim does not time. NVFP4 on
    NVIDIA GPUs without FP4 tensor cores (Hopper, Ada, Ampere) runs as Marlin W4A16 and is timed
    at the BF16 rate (``GPUSpec.peak_flops``)."""
    if model.weight_dtype == "nvfp4" and gpu.vendor != "NVIDIA":
        raise PerfError(
            f"{model.name} has NVFP4 weights and {gpu.name} ({gpu.vendor}) has no vLLM 0.33 NVFP4 "
            "kernel, only its emulation backend (weights dequantized every forward), which servesim "
            "does not time; use an MXFP4 or FP8 checkpoint"
        )


def weight_format_of(cfg: Mapping[str, Any]) -> tuple[WeightDType | None, list[QuantizedModule]]:
    """The weight format and quantized modules a Hugging Face ``quantization_config`` declares.

    ``modelopt`` with ``quant_algo`` NVFP4 and compressed-tensors 4-bit floats in groups of 16 are
    NVFP4; ``mxfp4`` (gpt-oss) and 4-bit floats in groups of 32 are MXFP4; FP8 with
    ``weight_block_size`` (DeepSeek-V3) is block-scaled FP8."""
    q = cfg.get("quantization_config")
    all_modules: list[QuantizedModule] = list(_ALL)
    if not isinstance(q, dict):
        return None, all_modules
    method = str(q.get("quant_method", "")).lower()
    algo = str(q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo") or "").upper()
    bits: int | None = q.get("bits") or q.get("w_bit")
    kind, group = "int", None
    groups = q.get("config_groups")
    if isinstance(groups, dict) and groups:
        w = next(iter(groups.values())).get("weights") or {}
        bits, kind, group = w.get("num_bits", bits), str(w.get("type", "int")), w.get("group_size")
    wd: WeightDType
    if method == "mxfp4" or (bits == 4 and kind == "float" and group == 32):
        wd = "mxfp4"
    elif "NVFP4" in algo or method == "modelopt_fp4" or (bits == 4 and kind == "float"):
        wd = "nvfp4"
    elif method == "fp8" or algo == "FP8" or (bits == 8 and kind == "float"):
        wd = "fp8_block" if q.get("weight_block_size") else "fp8"
    elif bits == 8:
        wd = "int8"
    elif bits == 4:
        wd = "int4"
    else:
        raise CatalogError(
            f"unsupported quantization_config (quant_method={method!r}, bits={bits!r}); "
            "describe the model in a catalog file with weight_dtype fp8/fp8_block/nvfp4/mxfp4/int8/int4"
        )
    ignore = [str(x) for x in q.get("ignore", []) or q.get("modules_to_not_convert", []) or []]
    ignore += [str(x) for x in q.get("exclude_modules", []) or []]
    modules = list(all_modules)
    if any("self_attn" in x or "attention" in x for x in ignore):
        modules.remove("attention")
    if any("shared_expert" in x for x in ignore):
        modules.remove("shared_experts")
    return wd, modules
