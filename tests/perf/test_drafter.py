"""The drafter's roofline (speculative decoding): an EAGLE / EAGLE-3 / MTP head of the target's
shape or a catalog draft model, timed like the target's steps; the fraction as override and
fallback; what a run records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.speculative import SpeculativeConfig
from servesim.engine.step_time import BatchComposition, DraftSource, DraftTimeModel, resolve_drafter
from servesim.errors import ConfigError
from servesim.perf import RooflineStepTime, build_step_time_model
from servesim.perf.drafter import EAGLE3_DRAFT_VOCAB, RooflineDrafter, head_spec
from servesim.perf.profile import resolve_profile
from servesim.traces.schema import Trace

MNS, MBT = 64, 2048


def target(name: str = "llama-3.1-8b", gpu: str = "h100", tp: int = 1) -> RooflineStepTime:
    return build_step_time_model(name, gpu, tp, max_num_seqs=MNS, max_num_batched_tokens=MBT, warn=False)


def drafter(method: str, k: int = 3, st_: RooflineStepTime | None = None, **kw: object) -> RooflineDrafter:
    d = (st_ or target()).drafter(SpeculativeConfig(method=method, num_speculative_tokens=k, **kw))  # type: ignore[arg-type]
    assert isinstance(d, RooflineDrafter)
    return d


def _trace(n: int = 16, out: int = 60) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": 0.02 * i, "prompt_len": 200 + 13 * i, "output_len": out}
            for i in range(n)
        ],
        source="t",
    )


def test_the_roofline_is_a_draft_source_and_ngram_costs_no_gpu_time() -> None:
    st_ = target()
    assert isinstance(st_, DraftSource)
    assert isinstance(drafter("eagle3"), DraftTimeModel)
    assert st_.drafter(SpeculativeConfig(method="ngram", num_speculative_tokens=3)) is None
    assert not isinstance(ConstantStepTime(step_time_s=0.01), DraftSource)


def test_eagle3_head_weight_bytes_and_pass_time_in_closed_form() -> None:
    """Llama-3.1-8B's EAGLE-3 head on one H100, by hand from its card (h = 4096, 32 query and 8
    KV heads of 128, MLP 14336, vocabulary 128256): QKV over 2h 2 x 4096 x 6144, O 4096 x 4096,
    MLP 3 x 4096 x 14336, an LM head over the 32,000-token draft vocabulary; the fusion fc
    3 x 4096 x 4096 on the first pass only. bf16: 2 bytes a weight."""
    d = drafter("eagle3")
    later_params = 2 * 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 32_000 * 4096
    assert later_params == 374_341_632
    assert d.later.weight_bytes_read == 2 * later_params
    assert d.first.weight_bytes_read == 2 * (later_params + 3 * 4096 * 4096)
    # A later pass of one request at context 0 is its weight read at the profile's bandwidth
    # efficiency plus the one layer's overhead (no per-step or per-request cost: see drafter.py).
    prof = resolve_profile(None, "h100")
    by_hand = 2 * later_params / (3.35e12 * prof.gemm_bandwidth_efficiency) + prof.per_layer_overhead_s
    assert d.later.step_time(BatchComposition(1, 0, [])) == pytest.approx(by_hand, rel=0.005)
    assert by_hand == pytest.approx(311.4e-6, rel=0.01)  # ~0.31 ms: 4.3 % of the target's decode step
    # Its KV cache is one layer's: 2 x 8 KV heads x 128 x 2 bytes a token.
    assert d.later.kv_bytes_per_token == 4096


def test_head_shapes_follow_the_target_card() -> None:
    llama = target().model
    eagle = head_spec(llama, "eagle", 1)
    assert eagle.spec.num_layers == 1 and eagle.spec.vocab_size == llama.vocab_size
    assert eagle.every_pass_params == 2 * 4096 * 4096 and eagle.first_pass_params == 0
    e3 = head_spec(llama, "eagle3", 1)
    assert e3.spec.vocab_size == EAGLE3_DRAFT_VOCAB and e3.first_pass_params == 3 * 4096 * 4096
    moe = target("mixtral-8x7b", tp=2).model
    assert not head_spec(moe, "eagle", 2).spec.is_moe  # EAGLE heads are dense
    mtp = head_spec(moe, "mtp", 2).spec
    assert mtp.is_moe and mtp.num_layers == 1 and mtp.num_moe_layers == 1  # MTP: the target's kind


def test_draft_model_is_the_catalog_model_on_the_draft_tp() -> None:
    d = drafter("draft_model", model="llama-3.2-1b")
    one_b = build_step_time_model("llama-3.2-1b", "h100", warn=False)
    assert d.first.weight_bytes_read == one_b.weight_bytes_read and d.first.tp == 1
    big = target("llama-3.1-70b", tp=4)
    assert drafter("draft_model", st_=big, model="llama-3.1-8b").first.tp == 4  # vLLM: the target's TP
    assert drafter("draft_model", st_=big, model="llama-3.1-8b", draft_tensor_parallel_size=1).first.tp == 1
    with pytest.raises(ConfigError, match="only 1 or the target's tensor_parallel_size"):
        drafter("draft_model", st_=big, model="llama-3.1-8b", draft_tensor_parallel_size=2)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            {"model": "nope"},
            r"speculative_config.model 'nope' is not a model of servesim's catalog; known "
            r"models: .*llama-3.2-1b",
        ),
        ({"model": "qwen2.5-7b"}, "vocabulary .* differs"),
    ],
)
def test_a_draft_model_that_cannot_run_is_a_config_error(extra: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        drafter("draft_model", **extra)


@settings(max_examples=40, deadline=None)
@given(
    method=st.sampled_from(["eagle", "eagle3", "mtp", "draft_model"]),
    k=st.integers(1, 6),
    ctx=st.integers(0, 8000),
    drafts=st.integers(0, 5),
    n=st.integers(1, 200),
)
def test_drafter_time_grows_with_the_batch(method: str, k: int, ctx: int, drafts: int, n: int) -> None:
    """n + 1 requests of the same shape never draft faster than n (KV reads, GEMM tokens, padding)."""
    kw = {"model": "llama-3.2-1b"} if method == "draft_model" else {}
    d = _DRAFTERS.setdefault((method, k), drafter(method, k, **kw))

    def t(rows: int) -> float:
        chunks = [(drafts + 1, ctx)] * rows if drafts else []
        batch = BatchComposition(0 if drafts else rows, 0 if drafts else rows * (ctx + 1), chunks)
        return d.draft_time(batch, rows, rows * (ctx + drafts + 1))

    assert t(n + 1) >= t(n) > 0


_DRAFTERS: dict[tuple[str, int], RooflineDrafter] = {}


def test_not_a_fixed_fraction_the_head_costs_more_of_a_step_at_high_batch() -> None:
    d = drafter("eagle3", k=5)
    st_ = target()

    def share(n: int) -> float:
        batch = BatchComposition(0, 0, [(6, 300)] * n)
        return d.draft_time(batch, n, 306 * n) / 5 / st_.step_time(BatchComposition(n, 306 * n, []))

    assert share(1) < share(64)


def _run(spec: dict[str, object], model: object) -> object:
    cfg = EngineConfig(
        max_num_seqs=MNS, max_num_batched_tokens=MBT, num_gpu_blocks=3000, speculative_config=spec
    )
    return simulate(_trace(), cfg, model)  # type: ignore[arg-type]


class _NoDrafter:
    """The roofline's step times without its drafter (what a model without one gets)."""

    def __init__(self, inner: RooflineStepTime) -> None:
        self.inner = inner

    def step_time(self, batch: BatchComposition) -> float:
        return self.inner.step_time(batch)


def test_explicit_draft_step_fraction_wins_over_the_roofline_drafter() -> None:
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "draft_step_fraction": 0.07}
    st_ = target()
    assert resolve_drafter(st_, SpeculativeConfig(**spec)) is None  # type: ignore[arg-type]
    given_ = _run(spec, st_)
    fallback = _run({k: v for k, v in spec.items() if k != "draft_step_fraction"}, _NoDrafter(st_))
    own = _run({k: v for k, v in spec.items() if k != "draft_step_fraction"}, st_)
    sp, fb, ow = given_.summary.speculative, fallback.summary.speculative, own.summary.speculative  # type: ignore[attr-defined]
    # The model without a drafter falls back to DRAFT_STEP_FRACTION["eagle3"], 0.07: the same as given.
    assert sp.draft_time_s == fb.draft_time_s > 0
    assert list(given_.requests["finish_s"]) == list(fallback.requests["finish_s"])  # type: ignore[attr-defined]
    assert "as given" in sp.draft_timing and "DRAFT_STEP_FRACTION" in fb.draft_timing
    assert ow.draft_time_s != sp.draft_time_s and ow.draft_timing.startswith("EAGLE-3 head of llama-3.1-8b")


class _Recording(RooflineStepTime):
    """Records each step time the engine asks for, and each drafter time."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.times: list[float] = []
        self.drafts: list[float] = []

    def step_time(self, batch: BatchComposition) -> float:
        t = super().step_time(batch)
        self.times.append(t)
        return t

    def drafter(self, spec: SpeculativeConfig) -> DraftTimeModel | None:
        inner = super().drafter(spec)
        assert inner is not None
        rec = self.drafts

        class Rec:
            def draft_time(self, batch: BatchComposition, num_rows: int, ctx_sum: int) -> float:
                t = inner.draft_time(batch, num_rows, ctx_sum)  # type: ignore[union-attr]
                rec.append(t)
                return t

            def describe(self) -> str:
                return inner.describe()  # type: ignore[union-attr]

        return Rec()


def test_each_step_record_is_the_target_pass_plus_the_drafter() -> None:
    base = target()
    rec = _Recording(base.model, base.gpu, 1, base.profile, max_num_seqs=MNS, max_num_batched_tokens=MBT)
    res = _run({"method": "eagle3", "num_speculative_tokens": 3}, rec)
    steps = res.steps  # type: ignore[attr-defined]
    assert len(rec.times) == len(rec.drafts) == len(steps)
    for d, t, dr in zip(steps["duration_s"], rec.times, rec.drafts, strict=True):
        assert d == t + dr
    assert res.summary.speculative.draft_time_s == pytest.approx(sum(rec.drafts))  # type: ignore[attr-defined]


def test_speculation_off_never_asks_for_a_drafter() -> None:
    base = target()
    rec = _Recording(base.model, base.gpu, 1, base.profile, max_num_seqs=MNS, max_num_batched_tokens=MBT)
    cfg = EngineConfig(max_num_seqs=MNS, max_num_batched_tokens=MBT, num_gpu_blocks=3000)
    off = simulate(_trace(), cfg, rec, fast=False)
    plain = simulate(_trace(), cfg, base, fast=False)
    assert rec.drafts == [] and list(off.requests["finish_s"]) == list(plain.requests["finish_s"])
