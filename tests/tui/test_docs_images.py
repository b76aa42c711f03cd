"""The README's dashboard screenshots come from this test: the SVG Textual exports and a PNG of it
rendered by headless Chromium (Debian's, never a download). The committed SVGs must match what
the dashboard draws today; SERVESIM_UPDATE_DOCS=1 rewrites docs/images/."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
from pathlib import Path

import pytest

from servesim import SLO, EngineConfig, FailureEvent, LinearStepTime, open_trace
from servesim.spec import (
    ClusterSpec,
    DeploymentSpec,
    DisaggregatedSpec,
    ResolvedDisaggregated,
    resolve_cluster,
)
from servesim.tui.app import DashboardApp
from servesim.tui.spec import DashboardSpec, PDDashboardSpec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = {
    # name: (replicas, simulated time, keys, terminal size)
    "dashboard": (1, 12.0, (), (80, 24)),
    "dashboard-cluster": (3, 6.0, ("f", "enter"), (120, 36)),
    "dashboard-pd": (0, 2.0, (), (80, 24)),  # 0: 1P2D over tcp-25g, d1 lost at 1.5 s
}


def pd_spec() -> PDDashboardSpec:
    """docs/dashboard.md's P/D screen: 1P2D over a slow link, a decode replica lost and back."""
    tr = open_trace("poisson_20_rps", num_requests=300, seed=0)
    cluster = ClusterSpec(
        trace="poisson_20_rps",
        num_requests=300,
        disaggregated=DisaggregatedSpec(
            prefill=DeploymentSpec(step_time_ms=10, replicas=1),
            decode=DeploymentSpec(step_time_ms=10, replicas=2),
            link="tcp-25g",
        ),
        failures=[FailureEvent(node="d1", time_s=1.5, recover_after_s=5.0)],
    )
    resolved = resolve_cluster(cluster, tr)
    assert isinstance(resolved, ResolvedDisaggregated)
    return PDDashboardSpec(tr, "poisson_20_rps", cluster, resolved, slo=SLO(ttft_ms=1000, tpot_ms=50))


def render_svg(replicas: int, at: float, keys: tuple[str, ...], size: tuple[int, int]) -> str:
    spec: DashboardSpec | PDDashboardSpec = (
        pd_spec()
        if replicas == 0
        else DashboardSpec(
            open_trace("bursty", num_requests=400, seed=3),
            "bursty",
            EngineConfig(num_gpu_blocks=800, max_num_seqs=32),
            LinearStepTime(),
            replicas=replicas,
            slo=SLO(ttft_ms=2000, tpot_ms=50, e2e_ms=8000),
        )
    )
    app = DashboardApp(spec, paused=True, start_at=at)

    async def main() -> str:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            # The screen once it has settled: on a busy host the first paint can still be under
            # way after one pause, so wait until three looks a tenth of a second apart agree.
            shots = [app.export_screenshot(title="servesim dashboard")]
            for _ in range(200):
                await pilot.pause(0.1)
                shots.append(app.export_screenshot(title="servesim dashboard"))
                if len(shots) >= 3 and shots[-1] == shots[-2] == shots[-3]:
                    return shots[-1]
            pytest.fail("the dashboard kept changing for 20 s while paused")

    return asyncio.run(main())


def svg_to_png(svg: Path, png: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(svg.as_uri())
            page.locator("svg").screenshot(path=str(png))
        finally:
            browser.close()


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
@pytest.mark.parametrize("name", list(SHOTS))
def test_the_readme_screenshots_are_what_the_dashboard_draws(name: str, tmp_path: Path) -> None:
    replicas, at, keys, size = SHOTS[name]
    svg = tmp_path / f"{name}.svg"
    svg.write_text(render_svg(replicas, at, keys, size), encoding="utf-8")
    text = svg.read_text(encoding="utf-8")
    assert "batch" in text and "waiting" in text and "events" in text
    png = tmp_path / f"{name}.png"
    svg_to_png(svg, png)
    width, height = png_size(png)
    cols, rows = size
    assert width > 8 * cols and height > 14 * rows  # a terminal of that size, legibly drawn
    if os.environ.get("SERVESIM_UPDATE_DOCS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(svg, DOCS / svg.name)
        shutil.copy(png, DOCS / png.name)
    assert (DOCS / svg.name).read_text(encoding="utf-8") == text, "docs image stale: SERVESIM_UPDATE_DOCS=1"
    assert (DOCS / png.name).exists()
