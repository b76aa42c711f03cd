"""The simulated fleet on a wall clock: what the HTTP app calls (no Ray, no HTTP here).

Simulated time is wall time since start divided by ``time_scale`` (``--time-scale 10``: the
simulated GPU runs ten times slower than real time). One asyncio task drives the
``servesim.OnlineFleet``: it sleeps until the next step end (or a submission wakes it), advances
the fleet to now, and wakes every stream whose request produced tokens or finished, so a token
reaches its client when the simulated scheduler emits it. Requests arrive at the simulated time
the server received them (``submit(received_at=)``; the engine runs ``lag_s`` behind the clock so
that a request the ingress sees a little after its receipt still joins its step); a disconnect
aborts the request (its KV freed); ``fail`` loses a replica and its requests follow the recovery
planner's decision (their streams resume on the survivor).

Latency histograms on /metrics are in simulated seconds: what the emulated vLLM would report.

Disaggregated (``disaggregated=PDLayout(...)``): the fleet is a prefill pool and a decode pool
(``servesim.OnlineFleet.disaggregated``), the client sees one endpoint as behind vLLM's P/D proxy or llm-d:
its tokens stream from the decode replica, its TTFT counts prefill, KV transfer and the first
decode step, and a disconnect aborts both legs. Every metric carries a ``pool`` label next to
``engine``; the request's legs are observed on the replica that ran each (queue and prefill time
on the prefill replica, queue and decode time on the decode replica), and each KV transfer as
vLLM's NixlConnector reports it on the decode side (``vllm:nixl_xfer_time_seconds``,
``vllm:nixl_bytes_transferred``, ``vllm:nixl_num_failed_transfers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from servesim import OnlineFleet, OnlineRequest, RecoveryContext, Replica, RouterSpec
from servesim.emulate.edge import sleep_until
from servesim.emulate.tokens import HASH_BLOCK, block_hashes
from servesim.errors import InputError

# vLLM's buckets (vllm/v1/metrics/loggers.py, V1 engine), seconds: TTFT to 2560 s, inter-token
# latency to 80 s, request latencies (e2e, queue) to 7680 s.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
UNROUTED = "unrouted"  # the engine label of requests waiting for any replica to come back
# vLLM's NixlConnector buckets (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py):
# transfer time 5 ms to 5 s; bytes per transfer 2 KiB to 8 GiB, every other power of two.
NIXL_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))


@dataclass(frozen=True)
class PDLayout:
    """A disaggregated fleet: the prefill and decode replicas, the KV link (the served model's
    KV size and the preset's bandwidth and setup latency), the short-prompt threshold."""

    prefill: list[Replica]
    decode: list[Replica]
    link: RecoveryContext
    short_prompt_tokens: int = 0


#: vLLM's 503 bodies (vllm/exceptions.py: QueueOverflowError, MaxQueuedTokensError) by outcome.
REFUSALS = {
    "rejected_max_num_queued_reqs": "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance.",
    "rejected_max_num_queued_tokens": "The engine has reached its prefill token backlog limit. "
    "Please try again later or on a different instance.",
}


class Overloaded(Exception):
    """More open requests than ``max_streams`` (answered 429)."""


class BadRequest(InputError):
    """A request vLLM would refuse (answered 400 with this message)."""


class UnknownModel(BadRequest):
    """A model this server does not serve (vLLM answers 404 ``NotFoundError``)."""


@dataclass(frozen=True, slots=True)
class Tokens:
    """What a stream sends next: ``count`` new output tokens, and whether the request is done."""

    start: int  # index of the first new token
    count: int
    done: bool
    outcome: str
    due: float | None = None  # when the client should see them (time.monotonic() s); None: now


class _Stream:
    __slots__ = ("changed", "engine", "first_seen", "last_token_s", "req", "seen")

    def __init__(self, req: OnlineRequest) -> None:
        self.req = req
        self.changed = asyncio.Event()
        self.seen = 0  # tokens published to metrics
        self.first_seen = False
        self.last_token_s: float | None = None
        self.engine = UNROUTED  # the replica holding it (the metrics' ``engine`` label)


class _FleetCollector(Collector):
    """The per-replica gauges and counters, read from the fleet at scrape time."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        em = self.emulator
        labels = list(em.label_names)
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Requests in the running batch.", labels=labels
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Requests waiting to be scheduled.", labels=labels
        )
        kv = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage (1 = 100 percent).", labels=labels)
        queries = CounterMetricFamily(
            "vllm:prefix_cache_queries", "Prefix-cache queries, in tokens.", labels=labels
        )
        hits = CounterMetricFamily("vllm:prefix_cache_hits", "Prefix-cache hits, in tokens.", labels=labels)
        preempt = CounterMetricFamily("vllm:num_preemptions", "Preemptions.", labels=labels)
        for m in em.fleet.replica_metrics():
            lv = list(em.label_values(m.name))
            running.add_metric(lv, m.num_running)
            waiting.add_metric(lv, m.num_waiting)
            kv.add_metric(lv, m.kv_usage)
            queries.add_metric(lv, m.prefix_cache_queries)
            hits.add_metric(lv, m.prefix_cache_hits)
            preempt.add_metric(lv, m.num_preemptions)
        # Requests no replica holds (every replica down): still waiting, so counted as waiting,
        # under engine="unrouted" (a sum over engines is the fleet's whole queue).
        waiting.add_metric(list(em.label_values(UNROUTED)), em.fleet.num_parked())
        yield from (running, waiting, kv, queries, hits, preempt)


class Emulator:
    """A simulated vLLM fleet served in wall time; see the module docstring."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        model: str,
        router: RouterSpec | None = None,
        time_scale: float = 1.0,
        max_streams: int = 1024,
        recovery: str = "planner",
        failures: Sequence[tuple[str, float, float | None]] = (),
        context: RecoveryContext | None = None,
        frontend_latency_s: float | None = None,
        async_scheduling: bool | None = None,
        lag_s: float | None = None,
        disaggregated: PDLayout | None = None,
    ) -> None:
        if not time_scale > 0 or math.isinf(time_scale):
            raise InputError(f"--time-scale must be a positive number, not {time_scale}")
        self.fleet: OnlineFleet
        if disaggregated is not None:
            pd = disaggregated
            self.fleet = OnlineFleet.disaggregated(
                pd.prefill,
                pd.decode,
                pd.link,
                short_prompt_tokens=pd.short_prompt_tokens,
                rolling_records=True,
            )
            replicas = [*pd.prefill, *pd.decode]
        else:
            self.fleet = OnlineFleet(replicas, router, recovery, context, rolling_records=True)
        self.pools: dict[str, str] | None = self.fleet.pools  # disaggregated: each replica's pool
        self.model = model
        self.time_scale = time_scale
        self.max_streams = max_streams
        self.max_model_len = self.fleet.max_model_len
        # vLLM's API-server queue limits on any replica: a request's 503 is known once routed
        self.admission_limits = any(
            r.config.max_num_queued_reqs is not None or r.config.max_num_queued_tokens is not None
            for r in replicas
        )
        # What a client sees on top of the engine's times, as the calibrated profile (the step
        # model's) says and the offline replay adds: the front end, and asynchronous scheduling.
        profile = getattr(replicas[0].step_time, "profile", None)
        if frontend_latency_s is None:
            frontend_latency_s = float(getattr(profile, "frontend_latency_s", 0.0))
        if async_scheduling is None:
            async_scheduling = bool(getattr(profile, "async_scheduling", False))
        self.frontend_latency_s = frontend_latency_s
        self.async_scheduling = async_scheduling
        # The engine runs this many simulated seconds behind the clock, so that a request stamped
        # at its receipt joins the step it would have joined although the ingress sees it a few
        # wall milliseconds later; tokens still reach clients on time, since each is delivered
        # the front-end latency (more than the lag) after the engine produced it.
        if lag_s is None:
            lag_s = frontend_latency_s / 2
        if not 0 <= lag_s <= frontend_latency_s:
            raise InputError(f"lag_s must be within [0, {frontend_latency_s}] (the front-end latency)")
        self.lag_s = lag_s
        self._streams: dict[int, _Stream] = {}
        self._next_id = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        for node, at, back in failures:  # scheduled: (replica, simulated s from start, recover after)
            self.fleet.fail(node, at, back)
        self._register_metrics()

    def _register_metrics(self) -> None:
        """vLLM's /metrics (the fleet's gauges read at scrape time, the latency histograms and
        counters observed as requests stream); disaggregated, the legs' and transfers' too."""
        self.registry = CollectorRegistry()
        self.registry.register(_FleetCollector(self))
        # as vLLM V1 labels every metric (engine: the replica); disaggregated, its pool too
        self.label_names: tuple[str, ...] = ("model_name", "engine", *(("pool",) if self.pools else ()))
        lab = list(self.label_names)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT.", lab, registry=self.registry, buckets=TTFT_BUCKETS
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Inter-token latency.",
            lab,
            registry=self.registry,
            buckets=ITL_BUCKETS,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "E2E latency.",
            lab,
            registry=self.registry,
            buckets=E2E_BUCKETS,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Time waiting.",
            lab,
            registry=self.registry,
            buckets=E2E_BUCKETS,
        )
        self.success = Counter(
            "vllm:request_success", "Finished requests.", [*lab, "finished_reason"], registry=self.registry
        )
        # vLLM's own labels (model_name, reason: no engine); served only where a limit is set
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=self.registry if self.admission_limits else None,
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens.", lab, registry=self.registry)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Output tokens.", lab, registry=self.registry
        )
        if self.pools is not None:  # the legs and the KV transfers of a disaggregated fleet
            self._register_pd_metrics(lab)

    def _register_pd_metrics(self, lab: list[str]) -> None:
        self.prefill_time = Histogram(
            "vllm:request_prefill_time_seconds",
            "Time in the prefill phase (the prefill leg, on the prefill replica).",
            lab,
            registry=self.registry,
            buckets=E2E_BUCKETS,
        )
        self.decode_time = Histogram(
            "vllm:request_decode_time_seconds",
            "Time in the decode phase (KV landed to the last token, on the decode replica).",
            lab,
            registry=self.registry,
            buckets=E2E_BUCKETS,
        )
        self.transfer_leg = Histogram(
            "servesim:kv_transfer_leg_seconds",
            "Decode blocks allocated to the KV landed: link queue plus wire (the transfer leg).",
            lab,
            registry=self.registry,
            buckets=TTFT_BUCKETS,
        )
        self.xfer_time = Histogram(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            lab,
            registry=self.registry,
            buckets=NIXL_TIME_BUCKETS,
        )
        self.xfer_bytes = Histogram(
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per NIXL KV Cache transfers.",
            lab,
            registry=self.registry,
            buckets=NIXL_BYTES_BUCKETS,
        )
        self.xfer_failed = Counter(
            "vllm:nixl_num_failed_transfers",
            "Number of failed NIXL KV Cache transfers.",
            lab,
            registry=self.registry,
        )

    def label_values(self, engine: str) -> tuple[str, ...]:
        """A replica's label values: the model, the replica, and (disaggregated) its pool;
        requests no replica holds are the decode pool's (parked decode legs)."""
        if self.pools is None:
            return (self.model, engine)
        return (self.model, engine, self.pools.get(engine, "decode"))

    # ------------------------------------------------------------------ the clock
    def sim_now(self) -> float:
        """The simulated time now: wall seconds since start / time scale."""
        return self.sim_time(time.monotonic())

    def sim_time(self, wall: float) -> float:
        """The simulated time at ``wall`` (``time.monotonic()`` seconds)."""
        return (wall - self._t0) / self.time_scale

    def start(self) -> None:
        """Start the clock and the driver (inside the serving event loop)."""
        if self._task is None:
            self._t0 = time.monotonic()
            self._task = asyncio.get_running_loop().create_task(self._drive())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _drive(self) -> None:
        while True:
            self.fleet.advance_until(self.sim_now() - self.lag_s)
            self._publish()
            t_next = self.fleet.next_time() + self.lag_s
            timeout = None if math.isinf(t_next) else max(0.0, (t_next - self.sim_now()) * self.time_scale)
            # Just past the step end, so that advance_until (strictly before) includes it.
            if timeout is not None:
                timeout += 1e-6 * self.time_scale
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()

    def _publish(self) -> None:
        """Wake the streams that changed; observe their latencies (simulated seconds)."""
        if self.pools is not None:
            bytes_per_token = self.fleet.link.bytes_total(1)
            for x in self.fleet.ended_transfers():
                lv = self.label_values(x.decode)
                if x.landed:
                    self.xfer_time.labels(*lv).observe(x.end_s - x.start_s)
                    self.xfer_bytes.labels(*lv).observe(x.tokens * bytes_per_token)
                elif not x.aborted:  # cut off by a lost replica
                    self.xfer_failed.labels(*lv).inc()
        for s in self._streams.values():
            r = s.req
            n = r.num_output
            if n == s.seen and not r.done:
                continue
            s.engine = self.fleet.replica_of(r) or s.engine
            labels = self.label_values(s.engine)
            if n > s.seen:
                if not s.first_seen and r.first_token_s is not None:
                    s.first_seen = True
                    self.ttft.labels(*labels).observe(r.first_token_s - r.arrival_s + self._lag(r))
                    # vLLM counts a request's prompt tokens with its first token (IterationStats)
                    self.prompt_tokens.labels(*labels).inc(r.prompt_len)
                    s.last_token_s = r.first_token_s
                    new = n - s.seen - 1
                else:
                    new = n - s.seen
                last = r.last_token_s
                if new > 0 and last is not None and s.last_token_s is not None:
                    gap = (last - s.last_token_s) / new  # exact when one token a step is seen
                    for _ in range(new):
                        self.itl.labels(*labels).observe(gap)
                s.last_token_s = last
                self.generation_tokens.labels(*labels).inc(n - s.seen)
                s.seen = n
            s.changed.set()

    # ------------------------------------------------------------------ requests
    @property
    def num_open(self) -> int:
        return len(self._streams)

    def submit(
        self,
        req_id: str,
        prompt_tokens: Sequence[int],
        max_tokens: int | None,
        priority: int = 0,
        *,
        received_at: float | None = None,
    ) -> int:
        """Admit a request that reached the server at ``received_at`` (``time.monotonic()``
        seconds; default now); returns its stream key. Raises ``Overloaded`` (429) beyond
        ``max_streams`` open requests and ``BadRequest`` for what vLLM refuses."""
        if len(self._streams) >= self.max_streams:
            raise Overloaded(
                f"{len(self._streams)} requests are open, the limit (--max-streams) is {self.max_streams}"
            )
        n_prompt = len(prompt_tokens)
        mml = self.max_model_len
        if max_tokens is None:
            max_tokens = mml - n_prompt  # vLLM: whatever the context has left
        if n_prompt + max_tokens > mml:
            raise BadRequest(
                f"This model's maximum context length is {mml} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        if max_tokens < 1:
            raise BadRequest(f"the prompt ({n_prompt} tokens) leaves no room to generate in {mml} tokens")
        self.start()
        key = self._next_id
        self._next_id += 1
        now = self.sim_now()
        # Received before the engine's clock (more than the lag ago)? Then it arrives at that
        # clock, the earliest it can still join a step.
        arrival = now if received_at is None else min(now, max(now - self.lag_s, self.sim_time(received_at)))
        req = self.fleet.submit(
            req_id,
            arrival,
            n_prompt,
            max_tokens,
            priority=priority,
            hash_ids=block_hashes(prompt_tokens),
            hash_block_size=HASH_BLOCK,
        )
        self._streams[key] = _Stream(req)
        self._wake.set()
        return key

    def request(self, key: int) -> OnlineRequest:
        return self._streams[key].req

    async def refusal(self, key: int) -> str | None:
        """vLLM's 503 message when the replica's API server refused the request (a queue limit:
        ``max_num_queued_reqs`` / ``max_num_queued_tokens``, ``servesim.engine.admission``), else
        None once a replica holds it. Waits for its arrival to be routed (the next turn of the
        loop); only a fleet with such a limit needs to (vLLM answers before it streams)."""
        s = self._streams[key]
        r = s.req
        while not r.done and self.fleet.replica_of(r) is None:
            await asyncio.sleep(0.001)
        message = REFUSALS.get(r.outcome) if r.done else None
        if message is not None:
            self._streams.pop(key, None)
            self.admission_rejections.labels(self.model, r.outcome.removeprefix("rejected_")).inc()
        return message

    def client_delay_s(self, req: OnlineRequest) -> float:
        """Simulated seconds a client sees each token after the engine produced it."""
        return self.frontend_latency_s + self._lag(req)

    def _lag(self, req: OnlineRequest) -> float:
        """What vLLM's asynchronous scheduling adds to a request's latencies: in its own /metrics
        too (TTFT and E2E from the request's arrival at the API server), unlike the front end's
        HTTP and streaming time, which only the client sees."""
        return self.fleet.step_in_flight_at_arrival(req) if self.async_scheduling else 0.0

    async def tokens(self, key: int, *, paced: bool = True) -> AsyncIterator[Tokens]:
        """The request's output as it is produced, each token due ``client_delay_s`` after the
        engine produced it: ``paced``, yielded when due; else as soon as known, with its due
        time (for a consumer that paces them nearer the client: ``servesim.emulate.edge``).
        Aborts the request if the consumer leaves (a client disconnect cancels the iteration)
        before it is done."""
        s = self._streams[key]
        sent = 0
        delay: float | None = None
        try:
            while True:
                await s.changed.wait()
                s.changed.clear()
                r = s.req
                n, done, outcome = r.num_output, r.done, r.outcome
                if n > sent or done:
                    if delay is None and r.first_token_s is not None:
                        delay = self.client_delay_s(r)
                    t = r.finish_s if done else r.last_token_s
                    due = None if not delay or t is None else self._t0 + (t + delay) * self.time_scale
                    if paced and due is not None:  # later tokens wait for the next turn
                        await sleep_until(due)
                    yield Tokens(sent, n - sent, done, outcome, due)
                    sent = n
                    if done:
                        return
        finally:
            self._close(key)

    def _close(self, key: int) -> None:
        s = self._streams.pop(key, None)
        if s is None:
            return
        r = s.req
        s.engine = self.fleet.replica_of(r) or s.engine
        lv = self.label_values(s.engine)
        if not r.done:
            self.fleet.abort(r, self.sim_now())
            self.success.labels(*lv, "abort").inc()
            self._wake.set()
            return
        reason = {"finished": "length", "finished_max_model_len": "length", "aborted": "abort"}.get(
            r.outcome, "error"
        )
        self.success.labels(*lv, reason).inc()
        if r.finish_s is not None:
            self.e2e.labels(*lv).observe(r.finish_s - r.arrival_s + self._lag(r))
        if self.pools is not None:
            self._observe_legs(self.fleet, r)
        elif r.first_scheduled_s is not None:
            self.queue.labels(*lv).observe(r.first_scheduled_s - r.arrival_s)

    def _observe_legs(self, fleet: OnlineFleet, r: OnlineRequest) -> None:
        """A served disaggregated request's legs, each on the replica that ran it."""
        legs = fleet.legs(r)
        if legs is None:
            return
        hist = {
            "prefill_queue": self.queue,
            "decode_queue": self.queue,
            "prefill": self.prefill_time,
            "transfer": self.transfer_leg,
            "decode": self.decode_time,
        }
        for leg, (engine, seconds) in legs.items():
            hist[leg].labels(*self.label_values(engine)).observe(max(0.0, seconds))

    # ------------------------------------------------------------------ failures
    def fail(self, replica: str, recover_after_s: float | None = None) -> float:
        """Lose ``replica`` now (simulated seconds; ``recover_after_s`` later it comes back
        empty); returns the simulated time of the failure. Raises ``BadRequest`` for a name
        that is not a replica or one already down."""
        if replica not in self.fleet.names:
            raise BadRequest(f"no replica {replica!r}; replicas: {', '.join(self.fleet.names)}")
        self.start()
        t = max(self.sim_now(), self.fleet.now)
        try:
            self.fleet.fail(replica, t, recover_after_s)
        except InputError as e:
            raise BadRequest(str(e)) from None
        self._wake.set()
        return t

    def moves(self) -> list[dict[str, object]]:
        """The recovery decisions taken so far, one per interrupted request."""
        if self.pools is not None:  # cluster.pd.RECOVERY_ACTIONS
            return [
                {
                    "request": m.req_id,
                    "time_s": m.time_s,
                    "from": m.node,
                    "to": m.target,
                    "strategy": m.action,
                    "reason": m.reason,
                }
                for m in self.fleet.recoveries
            ]
        return [
            {
                "request": m.req_id,
                "time_s": m.time_s,
                "from": m.from_node,
                "to": m.to_node,
                "strategy": m.strategy,
                "tokens_moved": m.tokens_moved,
                "recompute_tokens": m.recompute_tokens,
                "delay_s": m.delay_s,
            }
            for m in self.fleet.moves
        ]

    def waiting(self) -> list[dict[str, object]]:
        """The requests no replica holds (every replica is down): they wait for one to come
        back, and stay listed (``/admin/moves``) until one does."""
        return [
            {"request": r.req_id, "arrival_s": r.arrival_s, "tokens_generated": r.num_output}
            for r in self.fleet.parked()
        ]
