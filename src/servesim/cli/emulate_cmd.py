"""``servesim emulate``: an OpenAI-compatible vLLM fleet on Ray Serve, timed by the engine.

Ray is imported only when the command runs (``servesim --help`` stays fast). Loopback by
default; any other address needs a token (``--token``/``--token-file``), never printed.
``--prefill-replicas N --decode-replicas M``: a disaggregated fleet behind one endpoint, its pools
resolved as ``servesim cluster`` resolves them (``servesim.spec.ClusterSpec``, ``resolve_cluster``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from servesim.cli.common import fail, read_token
from servesim.cli.engine_flags import deployment_flags, deployment_spec, engine_flags
from servesim.errors import InputError, InternalError
from servesim.services.deployment import DeploymentSpec

if TYPE_CHECKING:
    from servesim.emulate.emulator import PDLayout
    from servesim.emulate.ray_serve import EmulatorSettings
    from servesim.services.cluster import Replica

DEFAULT_MAX_MODEL_LEN = 8192  # the context the emulated replicas serve unless --max-model-len says


def register(app: typer.Typer) -> None:
    app.command("emulate")(emulate_cmd)


@deployment_flags
@engine_flags
def emulate_cmd(
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON file of vLLM keys."),
    replicas: int | None = typer.Option(
        None, "--replicas", min=1, max=64, help="Replicas replica-0..replica-{N-1} (default 1)."
    ),
    router: str | None = typer.Option(
        None, help="Router policy (servesim's routers; default least_outstanding)."
    ),
    time_scale: float = typer.Option(
        1.0, min=0.001, help="Wall seconds per simulated second (10: the GPU runs ten times slower)."
    ),
    fail_at: list[str] = typer.Option(
        [], "--fail", help="REPLICA@TIME[+RECOVER_AFTER] (simulated s from start), repeatable."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (anything but loopback needs a token)."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port."),
    served_model_name: str | None = typer.Option(
        None, help="The model name clients send (default: the --model, or llama-3.1-8b)."
    ),
    max_streams: int = typer.Option(1024, min=1, help="Open requests at once; beyond it, 429."),
    token: str | None = typer.Option(
        None, help="Require this bearer token on /v1 (prefer --token-file: argv is visible to others)."
    ),
    token_file: Path | None = typer.Option(None, help="Read the token from this file (first line)."),
    address: str | None = typer.Option(None, help="Join this Ray cluster instead of starting Ray locally."),
    num_cpus: int = typer.Option(2, min=1, help="CPUs of the local Ray instance."),
    duration_s: float | None = typer.Option(
        None, min=0.1, help="Stop after this many wall seconds (default: serve until interrupted)."
    ),
    shutdown_timeout_s: float = typer.Option(
        30.0,
        min=0.0,
        max=3600.0,
        help="On SIGTERM/SIGINT: new requests get 503, open ones this many seconds to finish.",
    ),
    prefill_replicas: int | None = typer.Option(
        None,
        min=1,
        max=64,
        help="Disaggregated: replicas p0.. of the prefill pool (with --decode-replicas).",
    ),
    decode_replicas: int | None = typer.Option(
        None, min=1, max=64, help="Disaggregated: replicas d0.. of the decode pool."
    ),
    link_name: str | None = typer.Option(
        None, "--link", help="Disaggregated: KV-transfer link preset (default rdma-400g)."
    ),
    short_prompt_tokens: int | None = typer.Option(
        None, min=0, help="Disaggregated: prompts shorter than this prefill on the decode replica."
    ),
    *,
    flags: dict[str, Any],
    deployment: DeploymentSpec,
) -> None:
    """Serve an OpenAI-compatible emulated vLLM fleet (Ray Serve) timed by servesim's engine."""
    from pydantic import ValidationError

    from servesim import RouterSpec
    from servesim.emulate.app import is_loopback
    from servesim.errors import user_errors
    from servesim.services.cluster import LinkSpec
    from servesim.services.perf import DEFAULT_MODEL

    caught: tuple[type[BaseException], ...] = (ValidationError, OSError, *user_errors())
    try:
        secret = read_token(token, token_file)
        if not is_loopback(host) and secret is None:
            raise InputError(f"--host {host} is not loopback: give --token or --token-file")
        dep = deployment_spec(deployment, config, flags)
        if dep.engine.get("max_model_len") is None:
            dep = dep.model_copy(update={"engine": {**dep.engine, "max_model_len": DEFAULT_MAX_MODEL_LEN}})
        model = deployment.model or DEFAULT_MODEL
        pd = _disaggregated(
            dep,
            config,
            prefill_replicas,
            decode_replicas,
            link_name,
            short_prompt_tokens,
            fail_at,
            given={"--replicas": replicas, "--router": router},
        )
        fleet: list[Replica] = []
        layout = None
        if pd is not None:
            layout, failures, size, timed_as = pd
            typer.echo(f"timed as: {timed_as}")
        else:
            fleet, failures, size = _aggregated(dep, replicas or 1, fail_at)
        route = RouterSpec.model_validate({"policy": router or "least_outstanding"})
        context = LinkSpec(
            model=model, tp=deployment.tp or 1, kv_dtype=dep.engine.get("kv_cache_dtype", "auto")
        ).context()
        from servesim.emulate.ray_serve import EmulatorSettings

        settings = EmulatorSettings(
            replicas=fleet,
            model=served_model_name or model,
            router=route,
            time_scale=time_scale,
            max_streams=max_streams,
            api_key=secret,
            host=host,
            port=port,
            failures=tuple(failures),
            context=context,
            disaggregated=layout,
        )
    except caught as exc:
        fail(exc)
    _serve(
        settings, size, address=address, num_cpus=num_cpus, duration_s=duration_s, grace_s=shutdown_timeout_s
    )


def _aggregated(
    dep: DeploymentSpec, n: int, fail_at: list[str]
) -> tuple[list[Replica], list[tuple[str, float, float | None]], str]:
    """``n`` identical replicas replica-0.. of the deployment, the ``--fail`` events naming them
    (replica, simulated s, recover after), and the fleet's size for the banner."""
    from servesim.cli.cluster_flags import parse_fail
    from servesim.cli.simulate_cmd import deploy
    from servesim.services.cluster import Replica

    setup, _ = deploy(dep, None, as_json=False)
    names = [f"replica-{k}" for k in range(n)]
    failures = []
    for text in fail_at:
        f = parse_fail(text)
        if f.node not in names:
            raise InputError(f"--fail {text!r}: no replica {f.node!r}; replicas: {', '.join(names)}")
        failures.append((f.node, f.time_s, f.recover_after_s))
    return [Replica(name, setup.config, setup.step_time) for name in names], failures, f"{n}"


def _serve(
    settings: EmulatorSettings,
    size: str,
    *,
    address: str | None,
    num_cpus: int,
    duration_s: float | None,
    grace_s: float,
) -> None:
    """Serve until the duration ends or a signal stops it. SIGTERM and SIGINT (in the
    foreground or not) stop it cleanly, as vLLM's server does: no new requests (503), the open
    ones get ``grace_s`` to finish, then Serve and Ray shut down, no Ray process is left, exit 0
    (``servesim.cli.stop_signals``)."""
    from servesim.cli.stop_signals import Stop, stop_on_signals
    from servesim.emulate import ray_serve

    error: BaseException | None = None
    serving = False
    with stop_on_signals() as signals:
        try:
            ray_serve.start(settings, address=address, num_cpus=num_cpus, on_ray_up=signals.reinstall)
            serving = True
            typer.echo(
                f"emulating {size} x {settings.model} on http://{settings.host}:{settings.port}/v1 "
                f"(time scale {settings.time_scale:g}; Ctrl-C or SIGTERM stops)"
            )
            deadline = None if duration_s is None else time.monotonic() + duration_s
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.5)
        except Stop as stop:
            if serving:  # as vLLM's server: no new requests, the open ones finish (bounded)
                typer.echo(
                    f"{stop}: draining the open requests (up to {grace_s:g} s; new ones get 503)",
                    err=True,
                )
                signals.hold()
                left = ray_serve.drain(grace_s)
                if left:
                    typer.echo(f"{left} requests still open after {grace_s:g} s: cut", err=True)
            typer.echo(f"{stop}: stopping Serve and Ray", err=True)
        except (TimeoutError, OSError, ray_serve.ServeStartError) as exc:
            error = exc
        finally:
            signals.hold()
            ray_serve.stop()
    if error is not None:
        fail(error)


def _disaggregated(
    dep: DeploymentSpec,
    config: Path | None,
    n_prefill: int | None,
    n_decode: int | None,
    link: str | None,
    short: int | None,
    fail_at: list[str],
    *,
    given: dict[str, object],
) -> tuple[PDLayout, list[tuple[str, float, float | None]], str, str] | None:
    """The disaggregated fleet the flags ask for (None: an aggregated one): the pools checked and
    named as ``servesim cluster`` does (``cluster_flags.disagg_spec``, ``resolve_cluster``), each pool the
    command's deployment (its model, GPU, TP and vLLM keys), resolved by ``resolve_cluster``;
    the failures as (replica, simulated s, recover after); the fleet's size for the banner, and
    how its pools are timed. ``given``: the aggregated fleet's flags, refused here."""
    from servesim.cli.cluster_flags import FleetFlags, disagg_spec, parse_fail
    from servesim.cli.engine_flags import file_settings
    from servesim.emulate.emulator import PDLayout
    from servesim.services.deployment import (
        ClusterSpec,
        DisaggregatedSpec,
        ResolvedDisaggregated,
        resolve_cluster,
    )
    from servesim.services.traces import Trace

    if n_prefill is None and n_decode is None:
        for flag, value in (("--link", link), ("--short-prompt-tokens", short)):
            if value is not None:
                raise InputError(
                    f"{flag}: only for a disaggregated fleet (--prefill-replicas and --decode-replicas)"
                )
        return None
    for flag, asked in given.items():
        if asked is not None and n_prefill is not None and n_decode is not None:
            raise InputError(
                f"{flag}: a disaggregated fleet is --prefill-replicas + --decode-replicas, "
                "routed as vLLM's P/D proxy (prefix-aware prefill, least-KV decode)"
            )
    pools_flags = FleetFlags(
        prefill_replicas=n_prefill, decode_replicas=n_decode, link=link, short_prompt_tokens=short
    )
    spec = disagg_spec({}, file_settings(config), pools_flags, dep)
    if spec is None:
        raise InternalError("a disaggregated layout asked for and none made")
    online = Trace.empty("<online>")
    pools = DisaggregatedSpec(
        prefill=dep.model_copy(update={"replicas": spec.prefill.replicas}),
        decode=dep.model_copy(update={"replicas": spec.decode.replicas}),
        link=spec.link,
        short_prompt_tokens=spec.short_prompt_tokens,
    )
    run = ClusterSpec(trace="<online>", disaggregated=pools, failures=[parse_fail(x) for x in fail_at])
    pd = resolve_cluster(run, online)
    if not isinstance(pd, ResolvedDisaggregated):
        raise InternalError("a disaggregated cluster resolved without its pools")
    events = pd.events
    layout = PDLayout(pd.prefill, pd.decode, pd.context, pd.short_prompt_tokens)
    failures = [(f.node, f.time_s, f.recover_after_s) for f in events]
    size = f"{spec.prefill.replicas}P{spec.decode.replicas}D (link {spec.link})"
    return layout, failures, size, pd.timed_as
