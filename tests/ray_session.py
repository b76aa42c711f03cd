"""One local Ray instance (and one Ray Serve) for every test that needs one in-process: a pytest
plugin (tests/conftest.py loads it), importable as a helper.

Why: each Ray start took minutes on the 2-core machine beside two busy loops (the Serve test's
fixture ~270 s, the P/D-on-Serve test ~259 s, the Ray tuning executor ~102 s: issue 47), most of
the suite's time. The in-process Ray tests now share one instance, started as ``servesim
emulate`` starts its own (``ray_serve.init_local``: Serve's switches and the proxy's receipt
stamp), with Serve on one port; each emulator test deploys its app there and deletes it after,
so none sees another's replicas or metrics. The tests using it run one after another (the
``ray`` xdist group, ordered first in it by tests/conftest.py); Ray is shut down after the last
of them, so it does not idle beside the tests that start ``servesim emulate`` (their own Ray).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from free_ports import free_port

#: The fixtures that start the shared Ray (a test using either is one of its users).
USERS = ("local_ray", "serve_emulator")
NUM_CPUS = 2  # the Ray tuning executor's two trials at once; Serve's actors take none


class _LocalRay:
    """The shared instance: started on first use, stopped after its last user."""

    def __init__(self) -> None:
        self.up = False
        self.serve_port: int | None = None

    def ensure(self) -> None:
        if self.up:
            return
        # A local instance's workers run this interpreter: Ray's `uv run` hook is not needed
        # (what servesim's Ray executor sets before it imports Ray).
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        ray_serve = pytest.importorskip("servesim.emulate.ray_serve")
        pytest.importorskip("ray")
        ray_serve.init_local(NUM_CPUS)
        self.up = True

    def shutdown(self) -> None:
        if self.up:
            from servesim.emulate import ray_serve

            self.up, self.serve_port = False, None
            ray_serve.stop()


_RAY = _LocalRay()


@pytest.fixture
def local_ray() -> None:
    """Ray is initialized in this process (the shared instance)."""
    _RAY.ensure()


@pytest.fixture
def serve_emulator(local_ray: None) -> Iterator[Callable[..., str]]:
    """``start(settings)``: the emulator of ``ray_serve.EmulatorSettings`` on the shared Ray
    Serve (its port replaces the settings'), through ``ray_serve.start`` as ``servesim emulate``
    deploys it; its URL. The app is deleted at the end of the test."""
    from servesim.emulate import ray_serve

    deployed = False

    def start(settings: Any) -> str:
        nonlocal deployed
        if _RAY.serve_port is None:
            _RAY.serve_port = free_port()  # for every test's app
        settings = dataclasses.replace(settings, port=_RAY.serve_port)
        deployed = True
        ray_serve.start(settings)
        return f"http://127.0.0.1:{settings.port}"

    yield start
    if deployed:
        from ray import serve

        serve.delete(ray_serve.APP_NAME)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the test's own fixtures: Ray down if the next test does not use it."""
    try:
        return (yield)
    finally:
        if nextitem is None or not uses_local_ray(nextitem):
            _RAY.shutdown()


def pytest_sessionfinish() -> None:
    _RAY.shutdown()


def uses_local_ray(item: pytest.Item) -> bool:
    """Whether ``item`` runs on the shared Ray (tests/conftest.py orders those first)."""
    return any(f in getattr(item, "fixturenames", ()) for f in USERS)
