"""The page itself and Plotly.js (from the plotly wheel: nothing is fetched from a CDN)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from servesim.web.problems import Problem

router = APIRouter(include_in_schema=False)
STATIC = Path(__file__).resolve().parent.parent / "static"


def plotly_js() -> Path:
    spec = importlib.util.find_spec("plotly")  # located, not imported: only its package data is used
    if spec is None or spec.origin is None:
        raise Problem(404, "the plotly package is not installed")
    return Path(spec.origin).parent / "package_data" / "plotly.min.js"


@router.get("/")
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-store"})


@router.get("/vendor/plotly.min.js")
def plotly() -> FileResponse:
    path = plotly_js()
    if not path.is_file():
        raise Problem(404, "plotly.min.js is missing from the plotly package")
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})
