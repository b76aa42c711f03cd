# Cython declarations for request.py (the compiled core; request.py stays the reference).
# Counts are C integers (64-bit: every count, index and step stays far below 2**63); times are
# C doubles (they are Python floats in the reference: step ends and trace arrival times).

cdef class Request:
    cdef public long long admit_seq, idx, prompt_len, max_tokens, priority, group, prefix_len
    cdef public long long hash_block_size, hash_per, status, num_computed, num_output, num_cached_blocks
    cdef public long long num_live_blocks, num_shared_blocks, sync_step, num_preemptions
    cdef public long long lost_tokens, recomputed_tokens, reused_tokens, migrated_tokens
    cdef public long long external_tokens, prefix_hit_tokens, outcome
    cdef public long long placeholders, in_flight, lora, eligible_step
    cdef public long long spec_tokens, spec_sched, spec_verifications, spec_drafted, spec_accepted
    cdef public double arrival, first_scheduled, first_token, last_token, finish_time, moved_token_time
    cdef public bint starved, spec_padded, prefill_chunk
    cdef public list blocks, segments
    cdef public object hash_ids, hash_keys, req_id
