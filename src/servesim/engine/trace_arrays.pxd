# Cython declarations for trace_arrays.py (the compiled core; trace_arrays.py stays the reference).
from servesim.engine.request cimport Request


cdef class TraceArrays:
    cdef public long long n, max_context
    cdef public list req_id, arrival, prompt_len, output_len, priority, prefix_len, group, hash_ids
    cdef public list lora, lora_names
    cdef public object hash_block_size, num_shared_ids, spec_accept_rate

    cpdef Request make_request(self, long long i)
