# Cython declarations for step_plan.py (the compiled core; step_plan.py stays the reference).
cimport cython

from servesim.engine.request cimport Request


cdef class StepPlan:
    cdef public list scheduled, preempted, new, resumed, prefix_hits, spec, loaded, samples, drafts
    cdef public long long num_group_decodes, group_ctx_sum, lora_skipped
    cdef public bint defer_prefill, carried_prefill

    @cython.locals(decodes=cython.longlong, ctx=cython.longlong, prefill=cython.longlong,
                   r=Request, n=cython.longlong)
    cpdef batch(self)
    @cython.locals(n=cython.longlong, ctx=cython.longlong, r=Request, m=cython.longlong, c=cython.longlong)
    cpdef double draft_time(self, batch, drafter, long long k, double draft_fraction, step_time) except? -1.0


@cython.locals(n=cython.longlong, cap=cython.longlong)
cpdef long long running_tokens(Request r, long long thr, long long budget, long long max_model_len) except? -1
cpdef Py_ssize_t running_index(list running, Request r) except -1
@cython.locals(room=cython.longlong, n=cython.longlong)
cpdef long long tokens_kept(Request r, long long verified, long long max_model_len) except -1
@cython.locals(r=Request)
cpdef bint any_prefill_chunk(list scheduled) except -1
@cython.locals(nd=cython.longlong, t=cython.longlong, n_seq=cython.longlong,
               attn=cython.double, c=cython.longlong, cached=cython.longlong, ac=cython.double,
               am=cython.double, ctx=cython.double, dc=cython.double, dm=cython.double,
               head=cython.double, tail=cython.double, seq=cython.double, out=cython.double)
cpdef double roofline_step_time(batch, double a_cmp, double a_ctx, double a_mem, double d_cmp,
                                terms_of) except? -1.0


cdef class PendingStep:
    cdef public StepPlan plan
    cdef public object batch
    cdef public double start, duration
    cdef public long long num_running, num_waiting, kv_used
    cdef public object kv_groups


cdef class PrefillCadence:
    cdef public long long interval, last_prefill_step, num_executed_steps
    cdef public bint capacity_bound

    @cython.locals(r=Request)
    cpdef bint defer(self, list running) except -1
    @cython.locals(r=Request, n=cython.longlong)
    cpdef after(self, StepPlan plan)
