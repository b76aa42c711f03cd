"""``open_trace``: the one way interfaces turn a user's TRACE argument into a ``Trace``.

TRACE may be a file, a bundled trace name (``azure-conv``), or a generator preset / arrival
name (``default``, ``poisson_100_rps``, ``gamma_10_rps_cv2``...), in that order of precedence.
"""

from __future__ import annotations

from pathlib import Path

from servesim.traces.bundled import BUNDLED_TRACES
from servesim.traces.errors import TraceError
from servesim.traces.generate import generate_trace
from servesim.traces.load import load_trace
from servesim.traces.presets import PRESETS, preset_spec
from servesim.traces.schema import Trace


def open_trace(
    source: str,
    *,
    seed: int = 0,
    num_requests: int | None = None,
    format: str | None = None,
    strict: bool = False,
    hash_block_size: int | None = None,
) -> Trace:
    """Load a trace file or bundled trace, or generate one from a preset (seeded).

    ``num_requests`` only applies to generated traces: a file is read whole, so a count given
    with one is refused rather than ignored (the run would not be the size asked for);
    ``strict`` and ``hash_block_size`` only apply to files (see ``load_trace``).
    """
    if Path(source).exists() or source in BUNDLED_TRACES:
        if num_requests is not None:
            raise TraceError(
                source,
                f"a trace file is read whole: num_requests (-n) {num_requests:,} applies to generated "
                "presets only; drop it",
            )
        return load_trace(source, format=format, strict=strict, hash_block_size=hash_block_size, seed=seed)
    try:
        spec = preset_spec(source)
    except ValueError:
        raise TraceError(
            source,
            "no such file, bundled trace or generator preset; bundled: "
            f"{', '.join(sorted(BUNDLED_TRACES))}; presets: {', '.join(PRESETS)} "
            "(or an arrival name such as poisson_100_rps)",
        ) from None
    update: dict[str, int] = {"seed": seed}
    if num_requests is not None:
        update["num_requests"] = num_requests
    return generate_trace(spec.model_copy(update=update))
