"""A scenario: ``ScenarioRunRequest`` -> ``ScenarioAnswer``.

``servesim scenario FILE`` answers a question written as a JSON file in one of the seed files' two
shapes (``servesim.tuning.scenario``): a request list under a batch config, or a load on a KV-block
budget. The service reads and checks the file (one line naming it when it is not a scenario), runs
it, and says what timed the steps; ``servesim.views.scenario`` words the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError

if TYPE_CHECKING:
    from servesim.tuning.scenario import ScenarioResult


class ScenarioRunRequest(BaseModel):
    """A scenario as read from its JSON file (``source`` names it in errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: Any = Field(description="The scenario object: a batch scenario or a load scenario.")
    source: str | None = Field(None, description="Where it was read from (errors name it).")


@dataclass(frozen=True)
class ScenarioAnswer:
    """The scenario's result, with the words its first lines say."""

    request: ScenarioRunRequest
    result: ScenarioResult

    @property
    def hardware(self) -> dict[str, Any]:
        details = self.result.details or {}
        hw = details.get("hardware")
        return hw if isinstance(hw, dict) else {}

    @property
    def timed_as(self) -> str | None:
        """``llama-3.1-8b on 1 x h100, roofline step times; 2,049 KV blocks`` (None: nothing ran,
        as for an empty request list). The memory model sizes the blocks when the scenario states
        none: the count it found."""
        hw = self.hardware
        if not hw:
            return None
        details = self.result.details
        blocks = details.get("num_gpu_blocks") or hw.get("num_gpu_blocks")
        kv = f"{blocks:,} KV blocks" if isinstance(blocks, int) else "KV blocks as vLLM sizes them"
        where = f"{hw.get('model')} on {hw.get('tensor_parallel_size', 1)} x {hw.get('gpu')}"
        return f"{where}, roofline step times; {kv}"

    @property
    def context_line(self) -> str | None:
        """``context: llama-3.1-8b on h100, 2,049 KV blocks, max_model_len 3601`` (None: nothing ran)."""
        d = self.result.details
        if not d:
            return None
        hw = self.hardware
        blocks = d.get("num_gpu_blocks")
        shown = f"{blocks:,}" if isinstance(blocks, int) else "?"
        return (
            f"context: {hw.get('model')} on {hw.get('gpu')}, {shown} KV blocks, "
            f"max_model_len {d.get('max_model_len')}"
        )


def read_scenario(path: Path) -> ScenarioRunRequest:
    """A scenario file as a request (not JSON: one line naming the file and where)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e}") from None
    return ScenarioRunRequest(data=data, source=str(path))


def run_scenario(request: ScenarioRunRequest) -> ScenarioAnswer:
    """The scenario's shape recognised and checked, then run (``servesim.tuning.scenario``)."""
    from pydantic import ValidationError

    from servesim.tuning.scenario import parse_scenario
    from servesim.tuning.scenario import run_scenario as run

    try:
        scenario = parse_scenario(request.data)
    except ValidationError:
        raise
    except ValueError as e:
        raise InputError(f"{request.source}: {e}" if request.source else str(e)) from None
    return ScenarioAnswer(request=request, result=run(scenario))


__all__ = ["ScenarioAnswer", "ScenarioRunRequest", "read_scenario", "run_scenario"]
