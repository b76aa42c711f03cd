# Cython declarations for recorder.py (the compiled core; recorder.py stays the reference).
cimport cython

from servesim.engine.request cimport Request


cdef class Recorder:
    cdef public object steps, durations, step_end, itl_run_first, itl_run_last, itl_gaps
    cdef public object first_scheduled, first_token, finish, num_output, preemptions, recomputed
    cdef public object reused, prefix_hit, outcome, token_steps, spec_steps, lora_skips, kv_group_steps
    cdef public list preemption_events, starvation_events
    cdef public long long prefix_queries, prefix_hits
    cdef public bint rolling
    cdef public long long step_base, request_base, request_top, events_dropped, num_kv_groups

    @cython.locals(i=cython.longlong)
    cpdef close_request(self, Request r)
    @cython.locals(n=cython.Py_ssize_t, drop=cython.Py_ssize_t, used=cython.longlong)
    cpdef trim(self, long long keep_steps, long long keep_requests, double oldest_arrival=*)
    cpdef bint trim_due(self, long long keep_steps, long long keep_requests) except -1
    @cython.locals(seg=list, c=cython.longlong, prev=cython.longlong, j=cython.Py_ssize_t,
                   s=cython.longlong)
    cpdef flush_tokens(self, Request r)
