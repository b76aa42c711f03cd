"""The sweep view says when throughput is capped at the offered rate at a rate the queue test calls
unstable: the trace was too short to measure the service rate there (issue 30)."""

from __future__ import annotations

import json
from pathlib import Path

from servesim.tuning import SaturationReport
from servesim.views.saturation import saturation_view

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "saturate.json"


def test_a_capped_unstable_rate_is_said_and_an_ordinary_sweep_says_nothing() -> None:
    rep = SaturationReport.model_validate(json.loads(DEMO.read_text()))
    assert not any("too short" in t for t in saturation_view(rep).text)
    i = next(i for i, p in enumerate(rep.points) if p.status == "QUEUE_SATURATED")
    p = rep.points[i]
    capped = p.model_copy(update={"throughput_rps": p.offered_rps})
    short = rep.model_copy(update={"points": [*rep.points[:i], capped, *rep.points[i + 1 :]]})
    (note,) = [t for t in saturation_view(short).text if "too short" in t]
    assert note.startswith(f"at {p.offered_rps.mean:,.3g} req/s the queue is unstable")
