"""The steps of ``servesim demo``, each a library call whose result is saved as the matching
command's ``--json`` document (``servesim report`` reads them back) and logged as its action.

The data: Azure's 2023 conversation trace (19,366 real requests over an hour) for ingest,
simulation and the report's workload; seeded synthetic traces where a step needs traffic it can
rescale or overload (the sweep, the study, the cluster, the advisor). The deployment is the
default one: Llama-3.1-8B on one H100 (roofline step times, KV cache sized by the memory model).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.actionlog import ActionHandle, AdvisorUsage, record_action
from servesim.errors import InternalError
from servesim.io import write_text_atomic
from servesim.services.traces import Trace

if TYPE_CHECKING:
    from servesim.services.advice import AdviseAnswer, AdviseRequest
    from servesim.services.recovery import RecoverAnswer
    from servesim.services.rescheduling import RescheduleAnswer

MODEL = "llama-3.1-8b"
GPU = "h100"
REAL_TRACE = "azure-conv"
#: Seeds of every random choice in the demo (the examples are byte-identical from run to run).
SEED = 7
SLO_PERCENTILE = "ttft_p99_ms=1000,tpot_p99_ms=100"
NODE_DOWN = "n1"


class DemoRun:
    """What the steps share: the output folder, the files written, the summary lines."""

    def __init__(self, out: Path, *, advisor: str = "auto", formats: list[str] | None = None) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.outbox = self.out / "outbox"
        self.advisor = advisor
        self.formats = formats or ["html", "md"]
        self.files: dict[str, Path] = {}
        self.documents: list[Path] = []
        self.lines: list[str] = []
        self.headline: dict[str, Any] = {}
        self.advisor_usage: AdvisorUsage | None = None
        self.state: dict[str, Any] = {}

    def write(self, name: str, data: Any, *, document: bool = True) -> Path:
        """A JSON document as the commands print it (sorted keys, two-space indent; a result
        document with its ``kind`` and ``schema_version``, as the commands stamp it)."""
        if document and isinstance(data, dict):
            from servesim.report.documents import detect, stamped

            kind = detect(data)
            if kind is not None:
                data = stamped(kind, data)
        path = write_text_atomic(self.out / name, json.dumps(data, indent=2, sort_keys=True) + "\n")
        self.files[name] = path
        if document:
            self.documents.append(path)
        return path

    def say(self, text: str) -> None:
        self.lines.append(text)


def _synthetic(preset: str, n: int, seed: int = SEED) -> Trace:
    from servesim.services.traces import generate_trace, preset_spec

    return generate_trace(preset_spec(preset).model_copy(update={"num_requests": n, "seed": seed}))


# ---------------------------------------------------------------------------------- steps
def ingest(run: DemoRun) -> None:
    """Read the real trace and a synthetic one (written to CSV and read back), inspect both."""
    from servesim.services.traces import inspect_trace, open_trace, write_trace

    with record_action("ingest", {"trace": REAL_TRACE}) as h:
        real = open_trace(REAL_TRACE)
        stats = inspect_trace(real)
        h.output(run.write(f"inspect-{REAL_TRACE}.json", stats.model_dump(mode="json"), document=False))
    path = run.out / "inputs" / "bursty.csv"
    with record_action("generate", {"preset": "bursty", "num_requests": 1200, "seed": SEED}) as h:
        write_trace(_synthetic("bursty", 1200), path)
        h.output(path)
    with record_action("ingest", {"trace": str(path)}) as h:
        h.input_file("trace", path)
        bursty = open_trace(str(path))
        # named relative to the output folder: no machine path in the committed examples
        bstats = inspect_trace(bursty).model_copy(update={"source": "inputs/bursty.csv"})
        h.output(run.write("inspect-bursty.json", bstats.model_dump(mode="json"), document=False))
    run.files["inputs/bursty.csv"] = path
    run.state.update(real=real, real_stats=stats, bursty=bursty)
    run.say(
        f"ingest: {REAL_TRACE} {stats.num_requests:,} requests at {stats.mean_rate_rps:.2f} req/s "
        f"(inter-arrival CV {stats.iat_cv:.2f}); bursty {bstats.num_requests:,} synthetic requests"
    )


#: The command line the demo's simulation is: the document is the one it prints (minus the records).
SIMULATE_COMMAND = (
    f"servesim simulate {REAL_TRACE} --model {MODEL} --gpu {GPU} --slo {SLO_PERCENTILE} --no-requests --json"
)


def simulate_real(run: DemoRun) -> None:
    """The real hour on the default deployment, ``vllm serve``'s defaults on the GPU, per-request
    SLOs: ``SIMULATE_COMMAND``'s request, answered by the service ``servesim simulate`` calls
    (``servesim.services.run``), its document the command's own."""
    from servesim.report.documents import simulate_document
    from servesim.services.deployment import DeploymentSpec, PercentileSLO
    from servesim.services.inputs import TraceInput
    from servesim.services.run import SimulateRequest, prepare

    trace: Trace = run.state["real"]
    request = SimulateRequest(
        trace=TraceInput(source=REAL_TRACE),
        deployment=DeploymentSpec(model=MODEL, gpu=GPU),
        slo=PercentileSLO.parse(SLO_PERCENTILE),
    )
    prepared = prepare(request, trace=trace)  # the trace read at ingest
    with record_action(
        "simulate", {"trace": REAL_TRACE, "model": MODEL, "gpu": GPU, "slo": SLO_PERCENTILE}
    ) as h:
        answer = prepared.run()
        result = answer.result
        doc = simulate_document(answer)
        doc.update(model=MODEL, command=SIMULATE_COMMAND)  # provenance: what to type to get it again
        h.output(run.write("simulate.json", doc))
    s = result.summary
    run.headline.update(
        ttft_p99_ms=round(s.ttft_ms.p99, 1),
        tpot_p99_ms=round(s.tpot_ms.p99, 1),
        output_tokens_per_s=round(s.output_token_throughput, 1),
        goodput_rps=round(s.goodput, 3),
    )
    run.say(
        f"simulate: TTFT p99 {s.ttft_ms.p99:,.1f} ms, TPOT p99 {s.tpot_ms.p99:,.1f} ms, "
        f"{s.output_token_throughput:,.0f} output tok/s, goodput {s.goodput:.2f} req/s "
        f"({s.num_good:,} of {s.num_requests:,} within the SLO)"
    )


#: The traffic of the demo's sweep and study: 500 requests of the bundled conversation trace's
#: lengths, Poisson at its rate (a generator preset: the sweep can rescale it, fresh seeds redraw it).
CAPACITY_TRACE = "azure_conv_like"
CAPACITY_REQUESTS = 500
#: The study's space: small enough for the 2-GPU budget (every trial runs; none is pruned as too big).
TUNE_SPACE = ["tensor_parallel_size=1,2", "replicas=1,2", "enable_chunked_prefill=true"]
#: Fresh seeds of the sweep and of the study's re-verification: the same seeds and the same rate
#: lattice, so both give the same SLO knee for the same deployment.
CAPACITY_SEEDS = 2
#: The command lines the demo's sweep and study are (their documents are the ones they print).
SATURATE_COMMAND = (
    f"servesim saturate {CAPACITY_TRACE} -n {CAPACITY_REQUESTS} --seed {SEED} --model {MODEL} --gpu {GPU} "
    f"--slo {SLO_PERCENTILE} --seeds {CAPACITY_SEEDS} --json"
)
TUNE_COMMAND = (
    f"servesim tune {CAPACITY_TRACE} -n {CAPACITY_REQUESTS} --seed {SEED} --model {MODEL} --gpu {GPU} "
    f"--slo {SLO_PERCENTILE} --objective pareto --trials 16 --trial-seeds 1 --verify-seeds {CAPACITY_SEEDS} "
    f"--max-gpus 2 {' '.join(f'--space {x}' for x in TUNE_SPACE)} --storage memory --executor local "
    "--jobs 1 --json"
)


def _capacity_trace() -> Any:
    from servesim.services.inputs import TraceInput

    return TraceInput(source=CAPACITY_TRACE, num_requests=CAPACITY_REQUESTS, seed=SEED)


def saturate_request() -> Any:
    """``SATURATE_COMMAND``'s request (``servesim.services.capacity.SaturateRequest``)."""
    from servesim.services.capacity import Execution, SaturateRequest
    from servesim.services.deployment import DeploymentSpec, PercentileSLO

    return SaturateRequest(
        trace=_capacity_trace(),
        deployment=DeploymentSpec(model=MODEL, gpu=GPU),
        slo=PercentileSLO.parse(SLO_PERCENTILE),
        seeds=CAPACITY_SEEDS,
        execution=Execution(executor="local"),
    )


def tune_request() -> Any:
    """``TUNE_COMMAND``'s request (``servesim.services.tune.TuneRequest``): a small Pareto study."""
    from servesim.services.capacity import Execution
    from servesim.services.deployment import DeploymentSpec, PercentileSLO
    from servesim.services.tune import TuneRequest, parse_space

    return TuneRequest(
        trace=_capacity_trace(),
        deployment=DeploymentSpec(model=MODEL, gpu=GPU),
        slo=PercentileSLO.parse(SLO_PERCENTILE),
        objective="pareto",
        trials=16,
        seed=SEED,
        trial_seeds=1,
        verify_seeds=CAPACITY_SEEDS,
        max_gpus=2,
        space=parse_space(TUNE_SPACE),
        storage=None,
        execution=Execution(executor="local", jobs=1),
    )


def _tuning_setup() -> tuple[Any, Any, Any]:
    """The demo study's workload, hardware and SLO (as the service prepares them)."""
    from servesim.services.tune import prepare

    prepared = prepare(tune_request())
    return prepared.workload, prepared.hardware, prepared.request.slo


def saturate(run: DemoRun) -> None:
    """Scale the arrival rate of Azure-like traffic: ``SATURATE_COMMAND``'s request, answered by
    the service ``servesim saturate`` calls; the line says what the knee was measured on."""
    from servesim.report.capacity import saturate_document
    from servesim.services.capacity import saturate as sweep
    from servesim.views.saturation import scope_text

    params = {"trace": CAPACITY_TRACE, "num_requests": CAPACITY_REQUESTS, "seed": SEED, "slo": SLO_PERCENTILE}
    with record_action("saturate", params) as h:
        answer = sweep(saturate_request())
        h.output(run.write("saturate.json", saturate_document(answer)))
    rep = answer.report
    run.headline.update(goodput_knee_rps=rep.goodput_knee_rps, saturation_rps=rep.saturation_rps)
    knee = "-" if rep.goodput_knee_rps is None else f"{rep.goodput_knee_rps:,.3g}"
    sat = "-" if rep.saturation_rps is None else f"{rep.saturation_rps:,.3g}"
    run.say(
        f"saturate: SLO knee {knee} req/s, unstable from {sat} req/s {scope_text(rep)} "
        f"({rep.num_simulations} simulations)"
    )


def tune(run: DemoRun) -> None:
    """A small Pareto study (NSGA-II) and its recommendation, re-verified on fresh seeds:
    ``TUNE_COMMAND``'s request, answered by the service ``servesim tune`` calls."""
    import optuna

    from servesim.cli.capacity_render import write_outbox
    from servesim.report.capacity import tune_document
    from servesim.services.tune import tune as study
    from servesim.views.recommendation import lead_clauses

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    params = {
        "trace": CAPACITY_TRACE,
        "trials": 16,
        "objective": "pareto",
        "seed": SEED,
        "slo": SLO_PERCENTILE,
    }
    with record_action("tune", params) as h:
        answer = study(tune_request())
        rec = answer.recommendation
        if rec is not None:
            for p in write_outbox(rec, run.outbox / "recommendation"):
                h.output(p)
                run.files[str(p.relative_to(run.out))] = p
        h.output(run.write("tune.json", tune_document(answer)))
    res = answer.study
    if rec is None:
        run.say(f"tune: {res.n_trials} trials, none feasible under {SLO_PERCENTILE}")
        return
    run.headline.update(recommended_gpus=rec.gpus, vllm_serve=rec.vllm_serve_command)
    run.say(
        f"tune: {res.n_trials} trials ({res.n_feasible} feasible, "
        f"{len(res.pareto_front)} on the Pareto front); "
        f"recommended {rec.replicas} x TP {rec.deployment.tensor_parallel_size}: {lead_clauses(rec)[0]}"
    )


CLUSTER_RATE = 30  # req/s over three replicas: comfortable for three, too much for the two left
CLUSTER_BLOCKS = 3000  # KV blocks per replica (48k tokens): small enough that survivors preempt
LINK_GBPS = 25.0


def cluster_trace() -> Trace:
    """Azure-like lengths (resampled from the bundled conversation trace), Poisson 30 req/s."""
    from servesim.services.traces import generate_trace, preset_spec

    spec = preset_spec("azure_conv_like")
    arrival = preset_spec(f"poisson_{CLUSTER_RATE}_rps").arrival
    return generate_trace(spec.model_copy(update={"num_requests": 1500, "seed": SEED, "arrival": arrival}))


def cluster(run: DemoRun) -> None:
    """Three replicas with a small KV cache; n1 fails mid-run; compare recovery strategies. The
    run is the ``ClusterSpec`` ``servesim cluster`` builds, answered by the service it calls
    (``servesim.services.cluster``); its document is the command's."""
    from servesim.report.documents import cluster_answer_document
    from servesim.services.cluster import ClusterRequest, FailureEvent, prepare_aggregated
    from servesim.services.deployment import ClusterSpec, DeploymentSpec, PercentileSLO
    from servesim.services.inputs import TraceInput
    from servesim.services.traces import write_trace

    path = run.out / "inputs" / "cluster.csv"  # the spec names the trace the run read
    write_trace(cluster_trace(), path)
    run.files["inputs/cluster.csv"] = path
    source = TraceInput(source=str(path), label="inputs/cluster.csv")  # no machine path in the examples
    trace = source.open()
    horizon = float(trace.df["arrival_time_s"].max())
    # vllm serve's batch limits on the GPU; a small KV cache so that the failure's lost requests
    # are felt (CLUSTER_BLOCKS, stated in the action's parameters)
    spec = ClusterSpec(
        trace="inputs/cluster.csv",  # relative to the output folder, as the other inputs
        deployment=DeploymentSpec(
            model=MODEL,
            gpu=GPU,
            replicas=3,
            engine={"num_gpu_blocks": CLUSTER_BLOCKS, "starvation_threshold": 2},
        ),
        link={"bandwidth_gbps": LINK_GBPS},
        failures=[FailureEvent(node=NODE_DOWN, time_s=round(horizon / 2, 3))],
        recovery="compare",
        slo=PercentileSLO(ttft_p99_ms=1000, tpot_p99_ms=100),
    )
    prepared = prepare_aggregated(ClusterRequest(spec=spec, trace=source), trace=trace)
    cfg, events = prepared.resolved.setups[0].config, prepared.resolved.events
    params = {
        "trace": f"azure_conv_like at {CLUSTER_RATE} req/s",
        "num_requests": len(trace),
        "replicas": 3,
        "num_gpu_blocks": CLUSTER_BLOCKS,
        "fail": f"{NODE_DOWN}@{events[0].time_s}",
        "bandwidth_gbps": LINK_GBPS,
    }
    with record_action("cluster", params) as h:
        answer = prepared.run()
        planner = answer.results.get("planner")
        if planner is None:
            raise InternalError("invariant broken: planner is None")
        doc = cluster_answer_document(answer)
        h.output(run.write("cluster.json", doc))
    run.state.update(cluster_trace=trace, planner=planner, failure=events[0], max_num_seqs=cfg.max_num_seqs)
    p = answer.rows[1]
    run.say(
        f"cluster: {NODE_DOWN} fails at {events[0].time_s:g} s; {p.interrupted} requests interrupted "
        f"({p.migrated} migrated, {p.restarted} restarted by the planner); {doc['num_starved']} STARVED "
        "on the survivors"
    )


def recover(run: DemoRun) -> None:
    """The failure as a record of its interrupted jobs: migrate or recompute each; manifests."""
    record = failure_record(run)
    path = run.write("inputs/failure-n1.json", record, document=False)
    with record_action("recover", {"events": str(path)}) as h:
        h.input_file("events", path)
        plan = save_recovery(run, record, h).plans[0]
    run.say(
        f"recover: {len(plan.scheduled_migrations)} jobs planned ({plan.num_migrations} migrate, "
        f"{plan.num_cold_restarts} restart cold); hand-off manifests in {run.outbox / 'recovery'}"
    )


def save_recovery(run: DemoRun, record: Any, h: ActionHandle | None = None) -> RecoverAnswer:
    """``servesim recover RECORD --outbox OUT/outbox/recovery``'s request, answered by its service
    (``servesim.services.recovery``): the manifests written, ``recover.json`` the command's document."""
    from servesim.report.documents import recover_document
    from servesim.services.recovery import RecoverRequest
    from servesim.services.recovery import recover as plan_recovery

    answer = plan_recovery(RecoverRequest(events=record))
    for p in answer.write_manifests(run.outbox / "recovery")[0]:
        _output(run, h, p)
    path = run.write("recover.json", recover_document(answer))
    if h is not None:
        h.output(path)
    return answer


def _output(run: DemoRun, h: ActionHandle | None, path: Path) -> None:
    """A file a step wrote for review: in its action's outputs and the demo's file list."""
    if h is not None:
        h.output(path)
    run.files[str(path.relative_to(run.out))] = path


def failure_record(run: DemoRun) -> dict[str, Any]:
    """The planner run's interrupted requests as a ``servesim recover`` failure record, with the
    survivors as they were at the failure (running decodes, free KV blocks)."""
    planner = run.state["planner"]
    t = float(run.state["failure"].time_s)
    df = run.state["cluster_trace"].df
    prompt = dict(zip(df["req_id"], df["prompt_len"], strict=True))
    jobs = []
    for m in planner.moves.itertuples(index=False):
        computed = int(m.tokens_moved) + int(m.recompute_tokens)
        p = int(prompt[m.req_id])
        jobs.append(
            {
                "job_id": str(m.req_id),
                "prompt_tokens": p,
                "generated_tokens": max(0, computed - p),
                "kv_cache_checkpointed": True,  # the cluster checkpoints KV continuously
            }
        )
    survivors = []
    steps = planner.steps
    for name in sorted(set(steps["replica"]) - {NODE_DOWN}):
        before = steps[(steps["replica"] == name) & (steps["start_s"] <= t)]
        last = before.iloc[-1] if len(before) else None
        running = int(last["num_running"]) if last is not None else 0
        survivors.append(
            {
                "name": str(name),
                "running_decodes": running,
                "free_blocks": CLUSTER_BLOCKS - 1 - (int(last["kv_blocks_used"]) if last is not None else 0),
                "free_slots": run.state["max_num_seqs"] - running,
            }
        )
    return {
        "interrupted_node": NODE_DOWN,
        "preemption_timestamp": t,
        "network_bandwidth_gbps": LINK_GBPS,
        "batch_id": "demo-n1",
        "active_jobs": jobs,
        "context": {"model": MODEL, "gpu": GPU, "tp": 1, "max_num_seqs": run.state["max_num_seqs"]},
        "cluster": survivors,
    }


def reschedule(run: DemoRun) -> None:
    """Re-admit the interrupted requests SLA-aware, aging the ones preempted again and again."""
    data = reschedule_input(run)
    path = run.write("inputs/interrupted.json", data, document=False)
    with record_action("reschedule", {"file": str(path)}) as h:
        h.input_file("file", path)
        plan = save_rescheduling(run, data, h).plan
    aged = sum(1 for p in plan.requests if p.aged)
    run.say(
        f"reschedule: {len(plan.requests)} requests, {plan.num_violations} projected SLA misses, "
        f"{aged} aged (starvation guard), {plan.prefix_cache_savings_tokens:,} tokens reused"
    )


def save_rescheduling(run: DemoRun, data: Any, h: ActionHandle | None = None) -> RescheduleAnswer:
    """``servesim reschedule FILE``'s request, answered by its service; ``reschedule.json`` its document."""
    from servesim.report.documents import reschedule_document
    from servesim.services.rescheduling import RescheduleRequest
    from servesim.services.rescheduling import reschedule as plan_reschedule

    answer = plan_reschedule(RescheduleRequest(data=data))
    path = run.write("reschedule.json", reschedule_document(answer))
    if h is not None:
        h.output(path)
    return answer


def reschedule_input(run: DemoRun) -> dict[str, Any]:
    """The interrupted requests at the failure: what they had done, what is left, their SLA budget
    (the SLO's TTFT plus its TPOT per remaining token), how long they had waited and how often
    they had lost their slot (earlier preemptions plus this interruption): aging puts the ones
    that waited or lost it too often first, so none starves behind newer work."""
    planner = run.state["planner"]
    t = float(run.state["failure"].time_s)
    df = run.state["cluster_trace"].df.set_index("req_id")
    pre = planner.preemptions
    before = pre[pre["time_s"] <= t]["req_id"].value_counts()
    reqs = []
    for m in planner.moves.itertuples(index=False):
        row = df.loc[m.req_id]
        done = int(m.tokens_moved) + int(m.recompute_tokens)
        out_done = max(0, done - int(row["prompt_len"]))
        remaining = max(1, int(row["output_len"]) - out_done)
        reqs.append(
            {
                "req_id": str(m.req_id),
                "tokens_processed": done,
                "tokens_remaining": remaining,
                "sla_budget_ms": float(1000 + 100 * remaining),
                "prompt_len": int(row["prompt_len"]),
                "preemptions": int(before.get(m.req_id, 0)) + 1,
                "waited_ms": round((t - float(row["arrival_time_s"])) * 1000.0, 3),
            }
        )
    return {"batch_capacity": 16, "interrupted_requests": reqs, "model": MODEL, "gpu": GPU}


#: The demo's advice: the bursty trace on the default deployment, 6 optimizer trials.
ADVISE_TRIALS = 6


def advise(run: DemoRun) -> None:
    """Batching advice for the bursty trace (rules, or the DSPy program with a key), re-simulated."""
    from servesim.services.advice import AdviseRequest
    from servesim.services.deployment import DeploymentSpec, PercentileSLO
    from servesim.services.inputs import TraceInput

    request = AdviseRequest(
        task="batching",
        trace=TraceInput(source="inputs/bursty.csv"),  # read at ingest (run.state["bursty"])
        deployment=DeploymentSpec(model=MODEL, gpu=GPU),
        slo=PercentileSLO(ttft_p99_ms=1000, tpot_p99_ms=100),
        optimize=ADVISE_TRIALS,
        seed=SEED,
        advisor=run.advisor,
    )
    params = {"trace": "inputs/bursty.csv", "advisor": run.advisor, "optimize": ADVISE_TRIALS}
    with record_action("advise", params) as h:
        answer = save_advice(run, request, run.state["bursty"], h)
    from servesim.views.advisor import verdict_words

    v = answer.result.verification
    run.say(f"advise: {answer.result.advisor} advisor, {verdict_words(v)[0]}: {v.reason}")


def save_advice(
    run: DemoRun, request: AdviseRequest, trace: Trace | None = None, h: ActionHandle | None = None
) -> AdviseAnswer:
    """``servesim advise ... --apply --outbox OUT/outbox/advice``'s request, answered by its service
    (``servesim.services.advice``); ``advise.json`` its document, the outbox files named relative
    to the output folder. The committed examples name no machine path, so the document leaves out
    the trace's provenance (``inspect-bursty.json`` describes the trace)."""
    from servesim.report.documents import advise_document
    from servesim.services.advice import prepare

    answer = prepare(request, trace=trace).run()
    usage = answer.usage()
    run.advisor_usage = usage
    if h is not None:
        h.advisor = usage
    written = answer.write_outbox(run.outbox / "advice")
    for p in written:
        _output(run, h, p)
    doc = advise_document(answer, [str(p.relative_to(run.out)) for p in written])
    doc.pop("trace_provenance", None)
    path = run.write("advise.json", doc)
    if h is not None:
        h.output(path)
    return answer


def report(run: DemoRun) -> None:
    """Every document above in one report (HTML, Markdown, PDF on request)."""
    from servesim.report import write_report

    with record_action(
        "report", {"inputs": [p.name for p in run.documents], "format": ",".join(run.formats)}
    ) as h:
        for p in run.documents:
            h.input_file(p.name, p)
        written = write_report(
            run.documents,
            run.out,
            formats=run.formats,
            base=run.out,
            command_line="servesim demo",
            compare=False,
        )
        for p in written:
            h.output(p)
            run.files[p.name] = p
    run.say(f"report: {', '.join(p.name for p in written)}")


STEPS: list[tuple[str, Callable[[DemoRun], None]]] = [
    ("ingest and inspect the traces", ingest),
    ("simulate the real hour (Azure 2023)", simulate_real),
    ("saturation sweep", saturate),
    ("tuning study and recommendation", tune),
    ("cluster run with a node failure", cluster),
    ("recovery decisions and manifests", recover),
    ("rescheduling of interrupted requests", reschedule),
    ("advisor", advise),
    ("report", report),
]


def run_demo(
    out: Path,
    *,
    advisor: str = "auto",
    formats: list[str] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> DemoRun:
    """Every step in order (``on_step(label)`` before each, for a progress bar)."""
    run = DemoRun(out, advisor=advisor, formats=formats)
    for label, step in STEPS:
        if on_step is not None:
            on_step(label)
        step(run)
    return run
