"""The emulator on Ray Serve: one ingress deployment serving the FastAPI app (``serve.ingress``).

The fleet's replicas share one simulated clock, so they live in the ingress replica's process:
routing reads every replica's scheduler state at the arrival time and the recovery planner reads
the survivors' when a node fails, exactly as ``servesim cluster`` does offline; tokens reach the
streams through the event loop, not one Ray message each (on a small machine the 200+ concurrent
streams a test holds would otherwise cost a cross-actor call per token). A failure kills the
simulated replica (its engine, KV and step in flight) and the planner moves its requests.

Latency: where servesim starts Ray itself, the serving path is shortened and its remaining
inbound milliseconds taken out of the simulation, with Ray Serve's own switches (set in the
environment the Ray processes inherit; a cluster joined with ``--address`` keeps its own):

* ``RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD=0``, ``RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0``:
  the replica runs the app on its main event loop and the proxy its router on its own, instead
  of handing every request and every streamed chunk between threads (measured: ~5 ms of wall
  time less per request on the 2-core machine; Ray plans them as defaults, ray-project/ray#61226);
* ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``: the proxy stamps each request's receipt
  (``servesim.emulate.edge``), which is when the emulated vLLM received it.

Ray is imported here only (and this module only by ``servesim emulate``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from servesim import RecoveryContext, Replica, RouterSpec
from servesim.errors import ServesimError

if TYPE_CHECKING:
    from servesim.emulate.emulator import PDLayout

APP_NAME = "servesim-emulate"


@dataclass(frozen=True)
class EmulatorSettings:
    """Everything the ingress replica needs to build its emulator (pickled to the Ray actor)."""

    replicas: list[Replica]
    model: str
    router: RouterSpec = field(default_factory=RouterSpec)
    time_scale: float = 1.0
    max_streams: int = 1024
    api_key: str | None = field(default=None, repr=False)  # never in logs
    host: str = "127.0.0.1"
    port: int = 8000
    failures: tuple[tuple[str, float, float | None], ...] = ()  # (replica, at simulated s, recover after)
    context: RecoveryContext | None = None  # the model's KV size and the link, for the planner
    trust_edge_stamp: bool = False  # the proxy stamps receipts (set by ``start`` when it can)
    disaggregated: PDLayout | None = None  # prefill and decode pools instead of ``replicas``


# Ray Serve's switches for the local instance ``start`` launches (see the module docstring).
SERVE_ENV = {
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    # Serve's controller kills a proxy that has not answered its ready check within 5 s (Ray's
    # default); a proxy importing servesim on a busy host can take longer, and is killed before
    # it ran. 30 s, still inside the 60 s ``serve.start`` waits for it.
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30",
}
PROXY_CALLBACK = ("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", "servesim.emulate.edge:proxy_middlewares")


def _ingress_class() -> Any:
    from ray import serve

    @serve.deployment(name="EmulatorIngress", num_replicas=1, ray_actor_options={"num_cpus": 0})
    @serve.ingress()
    class EmulatorIngress:
        """Builds the emulator and its app inside the Serve replica."""

        def __init__(self, settings: EmulatorSettings) -> None:
            from servesim.emulate.emulator import Emulator

            self.settings = settings
            self.emulator = Emulator(
                settings.replicas,
                model=settings.model,
                router=settings.router,
                time_scale=settings.time_scale,
                max_streams=settings.max_streams,
                failures=settings.failures,
                context=settings.context,
                disaggregated=settings.disaggregated,
            )

        def __serve_build_asgi_app__(self) -> Any:
            from servesim.emulate.app import build_app

            app = build_app(
                self.emulator,
                api_key=self.settings.api_key,
                bind_host=self.settings.host,
                trust_edge_stamp=self.settings.trust_edge_stamp,
            )
            self.drain_state = app.state.drain
            return app

        async def drain(self, grace_s: float) -> int:
            """Refuse new requests (503) and wait up to ``grace_s`` for the open ones (their
            streams run to ``[DONE]``); the number still open then."""
            state = getattr(self, "drain_state", None)
            return 0 if state is None else int(await state.close(grace_s))

    return EmulatorIngress


def start(
    settings: EmulatorSettings,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    on_ray_up: Callable[[], None] | None = None,
) -> None:
    """Start Ray (or join ``address``), Serve on ``settings.host:port``, and the ingress; returns
    once it answers. ``stop()`` undoes it (also after a partial start). ``on_ray_up`` runs once
    ``ray.init`` returned: it replaces the driver's SIGTERM handler, which the caller may want
    back (``servesim.cli.stop_signals``). A Ray already up in this process is used as it is
    (the tests start one for all of theirs): its proxy stamps receipts if ``init_local`` set it
    up to."""
    import ray
    from ray import serve

    global _edge_stamps
    if not ray.is_initialized():
        _edge_stamps = False  # a Ray shut down elsewhere took its stamping proxy with it
        if address is not None:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            init_local(num_cpus if num_cpus is not None else 2)
    if on_ray_up is not None:
        on_ray_up()
    if _edge_stamps:
        settings = replace(settings, trust_edge_stamp=True)
    _start_serve(settings)
    # Serve queues requests beyond max_ongoing_requests (default 5) at the proxy: let the
    # emulator's own cap (429 beyond it) be the limit, and a few health/metrics/admin calls more.
    ingress = _ingress_class().options(max_ongoing_requests=settings.max_streams + 32)
    serve.run(ingress.bind(settings), name=APP_NAME, route_prefix="/", blocking=False)
    wait_ready(settings.host, settings.port)


#: Whether the Ray up in this process was started by ``init_local`` with servesim's proxy
#: callback (then its proxy stamps each request's receipt; ``stop`` clears it).
_edge_stamps = False


def init_local(num_cpus: int = 2) -> None:
    """Start a local Ray instance with Ray Serve's switches (``SERVE_ENV``) and, unless the user
    set their own, servesim's proxy callback, in the environment its processes inherit."""
    import ray

    global _edge_stamps
    env = {k: os.environ.get(k, v) for k, v in SERVE_ENV.items()}  # the user's own win
    name, callback = PROXY_CALLBACK
    stamps = os.environ.get(name, callback) == callback  # never replace the user's own callback
    if stamps:
        env[name] = callback
    with _environment(env):  # inherited by the raylet, so by Serve's actors
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    _edge_stamps = stamps


class ServeStartError(ServesimError):
    """Ray Serve's HTTP proxy did not come up (twice): one line, no Ray traceback."""


#: Tries of ``serve.start``: its proxy must answer within Ray's fixed 60 s, which a host busy
#: with other work can miss once (the proxy actor is then killed before it ran).
SERVE_START_TRIES = 2


def _start_serve(settings: EmulatorSettings) -> None:
    """``serve.start`` on ``settings.host:port``, tried again once after a proxy that did not
    start in time (Serve shut down in between, Ray kept)."""
    import ray
    from ray import serve

    for attempt in range(1, SERVE_START_TRIES + 1):
        try:
            serve.start(http_options={"host": settings.host, "port": settings.port})
            return
        except (ray.exceptions.RayError, TimeoutError) as exc:
            with contextlib.suppress(Exception):
                serve.shutdown()  # type: ignore[no-untyped-call]
            if attempt == SERVE_START_TRIES:
                why = " ".join(str(exc).split())[:200]
                raise ServeStartError(
                    f"Ray Serve's HTTP proxy on {settings.host}:{settings.port} did not start "
                    f"({SERVE_START_TRIES} tries; is the host overloaded?): {type(exc).__name__}: {why}"
                ) from None


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in ``os.environ`` for the block (what a subprocess started in it inherits)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_ready(host: str, port: int, timeout_s: float = 60.0) -> None:
    import httpx

    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/health"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the emulator did not answer {url} within {timeout_s:g} s")
        time.sleep(0.2)


def drain(grace_s: float) -> int | None:
    """Close the ingress to new requests and wait up to ``grace_s`` for the open ones to finish,
    as vLLM's server drains on SIGTERM: the number still open then (None: no ingress answered,
    e.g. a start that did not get that far)."""
    from ray import serve

    try:
        handle = serve.get_app_handle(APP_NAME)
        left: int = handle.drain.remote(grace_s).result(timeout_s=grace_s + 30)
    except Exception:  # Ray's own errors, a Serve that never came up: nothing to drain
        return None
    return left


def stop() -> None:
    """Shut Serve and Ray down (what ``start`` started, however far it got; safe to repeat).
    Serve only while Ray is up: ``serve.shutdown`` would otherwise start a Ray to look in."""
    import ray
    from ray import serve

    global _edge_stamps
    try:
        if ray.is_initialized():
            serve.shutdown()  # type: ignore[no-untyped-call]
    finally:
        _edge_stamps = False
        ray.shutdown()  # also the processes of an init that a signal interrupted
