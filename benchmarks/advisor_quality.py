"""How good are the advisor's programs? The simulator's metric on the shipped validation scenarios.

Scores (``servesim.advisor.metric.score``: 0 invalid, 0.5 = no advice, 1 = at least as good as the
better of no advice and the rules advisor) per scenario for:

* ``baseline``: no advice (arrival order, restart every job, the current flags);
* ``rules``: the deterministic rules advisor (1.0 by construction wherever it beats the baseline;
  below 1 where its answer is worse than no advice on one of the losses);
* with ``ANTHROPIC_API_KEY``: ``dspy uncompiled`` and, when one is saved, ``dspy compiled``
  (hosted Claude; each scenario is one LM call, billed).

Also the raw losses' totals (SLA misses, recompute tokens) so a score can be traced to numbers.
Run: ``.venv/bin/python benchmarks/advisor_quality.py [--split val|train] [--model NAME]``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from servesim.advisor.metric import baseline, outcome, rules_for, score, validated
from servesim.advisor.scenarios import build_scenario_case, shipped_scenarios


def _program_answer(adv: Any, case: Any) -> Any:
    answer, _entry = adv.propose(case, None, 1)
    return answer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=["val", "train"], default="val")
    ap.add_argument("--model", default=None, help="Anthropic model (default: the advisor's).")
    args = ap.parse_args()
    sset = shipped_scenarios()
    scenarios = sset.val if args.split == "val" else sset.train
    columns: dict[str, Any] = {"baseline": None, "rules": None}
    if os.environ.get("ANTHROPIC_API_KEY"):
        from servesim.advisor.claude import DEFAULT_MODEL
        from servesim.advisor.program import DSPyAdvisor, load_saved

        model = args.model or DEFAULT_MODEL
        columns["dspy uncompiled"] = DSPyAdvisor(model, use_saved=False)
        saved = load_saved()
        if saved is not None:
            label = f"dspy compiled ({saved.val_score_after:.3f} at compile)"
            columns[label] = DSPyAdvisor(model, saved=saved)
    else:
        print("no ANTHROPIC_API_KEY: scoring the baseline and the rules advisor only")
    names = list(columns)
    totals = {n: 0.0 for n in names}
    misses = {n: 0.0 for n in names}
    t0 = time.perf_counter()
    print(f"{'scenario':<22} {'task':<10} {'shape':<8} " + " ".join(f"{n[:28]:>28}" for n in names))
    for s in scenarios:
        case = build_scenario_case(s)
        rules = rules_for(case)
        row = []
        for n in names:
            if n == "baseline":
                answer: Any = baseline(case)
            elif n == "rules":
                answer = rules
            else:
                answer = _program_answer(columns[n], case)
            v = score(case, answer, rules)
            totals[n] += v
            ok = validated(case, answer)
            if ok is not None:
                misses[n] += outcome(case, ok).get("sla_misses", 0.0)
            row.append(v)
        print(f"{s.id:<22} {s.task:<10} {s.shape:<8} " + " ".join(f"{v:>28.4f}" for v in row))
    k = max(1, len(scenarios))
    print(f"{'mean score':<42} " + " ".join(f"{totals[n] / k:>28.4f}" for n in names))
    print(f"{'SLA misses (reschedule+batching)':<42} " + " ".join(f"{misses[n]:>28.0f}" for n in names))
    print(f"{len(scenarios)} {args.split} scenarios in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
