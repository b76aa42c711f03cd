"""Shared pytest setup: test helpers live next to the tests that use them.

Hypothesis runs derandomized: the same examples on every run, so a CI result is reproducible
(set HYPOTHESIS_PROFILE=explore for fresh random examples while developing).
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Helpers are imported by name (``from polling import wait_until``): tests/'s own and the
# engine's (other folders use its trace builders) are on the path for every test; each folder's
# own are, for its tests, by pytest. Never import from a conftest (tests/test_suite_imports.py).
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent / "engine")]

#: The shared Ray instance of the in-process Ray tests (its fixtures and its shutdown).
pytest_plugins = ("ray_session",)

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _private_data_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Commands write their action log to the data folder: never the user's during tests."""
    os.environ["SERVESIM_DATA_DIR"] = str(tmp_path_factory.mktemp("servesim-data"))


#: Markers of the long tests (tens of seconds to minutes each: servers, Ray, Chromium, docs).
LONG = ("slow", "browser", "ray")


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope == "module" for d in defs)


def _group(item: pytest.Item, name: str) -> None:
    """Put ``item`` in xdist group ``name``: the mark, and the ``@name`` ending its node id, which
    is what ``--dist loadgroup`` groups by. pytest-xdist 3.8 writes that ending to
    ``item._nodeid``, which pytest 9 no longer reads (a node's id is ``item._id``): under pytest
    9 every group was silently split across workers, so two Ray instances started at once and
    each module-scoped fixture (vLLM's oracle, a browser and a server) was built once per worker.
    Setting the id here works on both; xdist adding its own ending after this one is harmless
    (the scope is what follows the last ``@``). tests/test_suite_groups.py checks the grouping."""
    item.add_marker(pytest.mark.xdist_group(name))
    if hasattr(item, "_id") and f"@{name}" not in item.nodeid:
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{name}")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first, each group in the order collected: xdist hands tests out in this
    order, so the two workers share the long ones from the start and end on short ones, instead
    of one worker starting a minutes-long test (the docs', the browser's) when the other is
    nearly done. The tests that start a local Ray instance form one xdist group (``make unit``
    runs ``--dist loadgroup``): one worker runs them one after another while the other keeps
    busy, instead of two Ray instances starting at once on a 2-core machine, each twice as slow.
    Those on the shared Ray (tests/ray_session.py) come first, one after another: Ray starts
    once for them all and is down before the ones that start ``servesim emulate`` (its own Ray).
    The tests of a module that share a module-scoped fixture (a browser and a server, a study,
    vLLM's oracle) form a group too, so the fixture is built once, not once per worker.
    What any test checks is unchanged."""
    from ray_session import uses_local_ray  # the plugin below, loaded by then (not re-imported)

    for item in items:
        if item.get_closest_marker("ray"):
            _group(item, "ray")
        elif _shares_a_module_fixture(item):
            _group(item, f"module:{item.nodeid.split('::')[0]}")
    items.sort(key=lambda item: (not any(item.get_closest_marker(m) for m in LONG), not uses_local_ray(item)))
