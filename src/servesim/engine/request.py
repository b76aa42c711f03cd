"""A request's hot state inside the engine: a plain slotted class, no validation, no properties.

Token accounting follows vLLM: ``num_tokens`` = prompt + generated outputs; each step the
scheduler gives a request tokens so that ``num_computed`` catches up with ``num_tokens``. A
request produces one output token in a step that computes all of its known tokens.
"""

from __future__ import annotations

# Status (ints: compared in the hot loop).
WAITING = 0
RUNNING = 1
PREEMPTED = 2
FINISHED = 3
REJECTED = 4
WAITING_FOR_REMOTE_KVS = 6  # vLLM's RequestStatus of that name: blocks allocated, its KV loading

# Outcomes: every request ends with exactly one. Codes index OUTCOMES (their reported names).
OUTCOMES = (
    "unfinished",
    "finished",
    "finished_max_model_len",
    "rejected_prompt_too_long",
    "rejected_queue_timeout",
    "aborted",
    "rejected_max_num_queued_reqs",
    "rejected_max_num_queued_tokens",
)
OUTCOME_UNFINISHED = 0
OUTCOME_FINISHED = 1
OUTCOME_LENGTH_CAPPED = 2
OUTCOME_REJECTED_TOO_LONG = 3
OUTCOME_REJECTED_TIMEOUT = 4
OUTCOME_ABORTED = 5  # the client went away (vLLM: FINISHED_ABORTED); online runs only
OUTCOME_REJECTED_QUEUED_REQS = 6  # HTTP 503 from vLLM's API server: max_num_queued_reqs
OUTCOME_REJECTED_QUEUED_TOKENS = 7  # HTTP 503 from vLLM's API server: max_num_queued_tokens


class Request:
    """Mutable per-request state; field meanings mirror ``vllm.v1.request.Request``."""

    __slots__ = (
        "admit_seq",
        "arrival",
        "blocks",
        "eligible_step",
        "external_tokens",
        "finish_time",
        "first_scheduled",
        "first_token",
        "group",
        "hash_block_size",
        "hash_ids",
        "hash_keys",
        "hash_per",
        "idx",
        "in_flight",
        "last_token",
        "lora",
        "lost_tokens",
        "max_tokens",
        "migrated_tokens",
        "moved_token_time",
        "num_cached_blocks",
        "num_computed",
        "num_live_blocks",
        "num_output",
        "num_preemptions",
        "num_shared_blocks",
        "outcome",
        "placeholders",
        "prefill_chunk",
        "prefix_hit_tokens",
        "prefix_len",
        "priority",
        "prompt_len",
        "recomputed_tokens",
        "req_id",
        "reused_tokens",
        "segments",
        "spec_accepted",
        "spec_drafted",
        "spec_padded",
        "spec_sched",
        "spec_tokens",
        "spec_verifications",
        "starved",
        "status",
        "sync_step",
    )

    def __init__(
        self,
        idx: int,
        req_id: str,
        arrival: float,
        prompt_len: int,
        max_tokens: int,
        priority: int = 0,
        group: int = -1,
        prefix_len: int = 0,
        hash_ids: list[int] | None = None,
        hash_block_size: int = 0,
        lora: int = 0,
    ) -> None:
        self.idx = idx  # position in the trace; unique, used in block-content keys
        self.req_id = req_id
        self.arrival = arrival
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.priority = priority
        # Prefix identity: shared-prefix group index (-1: none) and its length, or the trace's
        # hash_ids (one per hash_block_size tokens), turned into per-block content keys for the
        # replica's block size by KVCacheManager.init_request.
        self.group = group
        self.prefix_len = prefix_len
        self.hash_ids = hash_ids
        self.hash_block_size = hash_block_size
        # vLLM's lora_request.lora_int_id: the adapter (1, 2, ... in the trace's order of first
        # use) or 0 for the base model; the scheduler counts the distinct ones against max_loras.
        self.lora = lora
        # Compact keys (hash_id_bases): block i < num_shared_blocks has key
        # hash_keys[i // hash_per] + 4 * (i % hash_per).
        self.hash_keys: list[int] | None = None
        self.hash_per = 1
        self.status = WAITING
        self.num_computed = 0
        self.num_output = 0
        self.blocks: list[int] = []
        # Prefix-cache state of the held blocks (see block_pool): the first num_cached_blocks are
        # hashed as in vLLM, of which the first num_live_blocks can be hit by a lookup. Blocks
        # below num_shared_blocks hold content other requests may share (group prefix, hash_ids).
        self.num_cached_blocks = self.num_live_blocks = self.num_shared_blocks = 0
        self.admit_seq = -1  # order of (re)admission into running: running list is sorted by it
        self.sync_step = -1  # fast path: step at which num_computed/num_output were last exact
        # Records.
        self.first_scheduled = -1.0
        self.first_token = -1.0
        self.last_token = -1.0
        self.finish_time = -1.0
        self.num_preemptions = 0
        self.starved = False  # preempted starvation_threshold times (see scheduler)
        self.lost_tokens = 0  # tokens computed before the latest preemption
        self.recomputed_tokens = 0  # of those, tokens computed again after re-admission
        self.reused_tokens = 0  # of those, tokens recovered from the prefix cache instead
        self.migrated_tokens = 0  # of those, tokens whose KV was moved from a lost replica
        # Cluster moves: the prefix (in tokens) whose KV migrates in with the request, and the
        # time of its last token on the replica it left (for the inter-token gap across a move).
        self.external_tokens = 0
        self.moved_token_time = -1.0
        self.prefix_hit_tokens = 0  # prefix-cache hit at first admission
        # Output-token timeline as runs of consecutive steps: [first_step, count, ...] flattened.
        self.segments: list[int] = []
        self.outcome = OUTCOME_UNFINISHED
        # Speculative decoding (vLLM's spec_token_ids, as a count: ids do not matter here).
        self.spec_tokens = 0  # drafts proposed after the last step, to verify in the next
        self.spec_sched = 0  # of them, scheduled in the step in flight
        self.prefill_chunk = False  # vLLM's is_prefill_chunk (kept with speculation or a prefill cadence)
        self.spec_padded = False  # that step's drafts are vLLM's padding (never accepted)
        self.spec_verifications = 0  # verifications so far (seeds the acceptance draws)
        self.spec_drafted = 0  # drafts verified, over the request's life
        self.spec_accepted = 0  # of them, accepted
        # Async scheduling (vLLM's AsyncScheduler): num_computed advances when a step is
        # scheduled; a step in flight that samples holds a placeholder for its token until its
        # output is applied, and in_flight counts the tokens of the steps not yet applied.
        self.placeholders = self.in_flight = 0
        # Pipeline parallelism (engine.pipeline_steps): vLLM's next_decode_eligible_step, the
        # scheduler call from which the request may decode again (0: at once, without PP).
        self.eligible_step = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output

    def __repr__(self) -> str:
        return (
            f"Request({self.req_id!r}, prompt={self.prompt_len}, out={self.num_output}/{self.max_tokens}, "
            f"computed={self.num_computed}, status={self.status})"
        )
