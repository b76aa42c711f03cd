"""How ``servesim emulate`` starts Ray (``ray_serve.start``): a local instance gets Ray Serve's
switches and servesim's proxy callback in the environment its processes inherit (the user's
own values win), and only then does the ingress trust the proxy's receipt stamp; a joined cluster
(``--address``), or a Ray up in the process but not started so, keeps its own and is not trusted.
The suite's shared Ray (tests/ray_session.py) is started by the same ``init_local``. No Ray is
started here: ``ray.init`` and Serve's calls are replaced."""

from __future__ import annotations

import os
from typing import Any

import pytest

ray_serve = pytest.importorskip("servesim.emulate.ray_serve")
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from servesim import EngineConfig, LinearStepTime, Replica  # noqa: E402

CALLBACK_VAR, CALLBACK = ray_serve.PROXY_CALLBACK


class _Fake:
    """``ray.init`` and Serve's calls, recording what ``start`` handed them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.up = False
        self.inits: list[tuple[dict[str, Any], dict[str, str | None]]] = []
        self.deployed: list[Any] = []
        names = [*ray_serve.SERVE_ENV, CALLBACK_VAR]
        monkeypatch.setattr(ray, "is_initialized", lambda: self.up)

        def init(**kwargs: Any) -> None:
            self.inits.append((kwargs, {k: os.environ.get(k) for k in names}))
            self.up = True

        monkeypatch.setattr(ray, "init", init)
        monkeypatch.setattr(ray_serve, "_start_serve", lambda settings: None)
        monkeypatch.setattr(ray_serve, "wait_ready", lambda host, port: None)
        monkeypatch.setattr(serve, "run", lambda app, **kw: self.deployed.append(app))

        class Ingress:
            def options(self, **kw: Any) -> Any:
                return self

            def bind(self, settings: Any) -> Any:
                return settings

        monkeypatch.setattr(ray_serve, "_ingress_class", Ingress)


def _settings() -> Any:
    one = [Replica("replica-0", EngineConfig(num_gpu_blocks=100), LinearStepTime())]
    return ray_serve.EmulatorSettings(replicas=one, model="llama-3.1-8b", port=18124)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> _Fake:
    for name in [*ray_serve.SERVE_ENV, CALLBACK_VAR]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(ray_serve, "_edge_stamps", False)
    return _Fake(monkeypatch)


def test_a_local_start_sets_serves_switches_and_the_stamp_for_ray_alone(fake: _Fake) -> None:
    ray_serve.start(_settings(), num_cpus=3)
    ((kwargs, env),) = fake.inits
    assert kwargs == {"num_cpus": 3, "include_dashboard": False, "log_to_driver": False}
    assert env == {**ray_serve.SERVE_ENV, CALLBACK_VAR: CALLBACK}  # what the raylet inherits
    assert all(os.environ.get(k) is None for k in env)  # this process's environment as it was
    (deployed,) = fake.deployed
    assert deployed.trust_edge_stamp


def test_the_users_own_callback_and_switch_win_and_nothing_is_trusted(
    fake: _Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALLBACK_VAR, "mine:middlewares")
    monkeypatch.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "99")
    ray_serve.start(_settings())
    ((kwargs, env),) = fake.inits
    assert kwargs["num_cpus"] == 2
    assert env[CALLBACK_VAR] == "mine:middlewares" and env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == "99"
    assert not fake.deployed[0].trust_edge_stamp


def test_a_ray_up_in_the_process_is_used_and_trusted_only_if_init_local_started_it(fake: _Fake) -> None:
    ray_serve.init_local(2)  # as tests/ray_session.py starts the suite's Ray
    ray_serve.start(_settings())
    assert len(fake.inits) == 1 and fake.deployed[-1].trust_edge_stamp
    fake.up = False  # shut down elsewhere (not by ``stop``): a cluster joined next is not trusted
    ray_serve.start(_settings(), address="ray://elsewhere:10001")
    kwargs, env = fake.inits[-1]
    assert kwargs == {"address": "ray://elsewhere:10001", "include_dashboard": False, "log_to_driver": False}
    assert env[CALLBACK_VAR] is None and not fake.deployed[-1].trust_edge_stamp
