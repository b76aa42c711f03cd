"""Write the advisor's shipped scenario set (src/servesim/data/advisor/scenarios.json) from its
seeded generator (servesim.advisor.scenarios); tests/advisor/test_scenarios.py checks it matches."""

from pathlib import Path

from servesim.advisor.scenarios import generate_scenarios, scenarios_json

OUT = Path(__file__).resolve().parents[1] / "src/servesim/data/advisor/scenarios.json"

if __name__ == "__main__":
    OUT.write_text(scenarios_json(generate_scenarios(0)), encoding="utf-8")
    print(f"wrote {OUT}")
