# Cython declarations for engine.py (the compiled core; engine.py stays the reference).
cimport cython

from servesim.engine.block_pool cimport BlockPool
from servesim.engine.decode_group cimport DecodeGroup
from servesim.engine.kv_cache_manager cimport KVCacheManager
from servesim.engine.request cimport Request
from servesim.engine.scheduler cimport Scheduler, StepPlan


cdef class TraceArrays:
    cdef public long long n
    cdef public list req_id, arrival, prompt_len, output_len, priority, prefix_len, group, hash_ids
    cdef public object hash_block_size, num_shared_ids, spec_accept_rate

    cpdef Request make_request(self, long long i)


cdef class Recorder:
    cdef public object steps, step_end, itl_run_first, itl_run_last, itl_gaps
    cdef public object first_scheduled, first_token, finish, num_output, preemptions, recomputed
    cdef public object reused, prefix_hit, outcome, token_steps, spec_steps
    cdef public list preemption_events, starvation_events
    cdef public long long prefix_queries, prefix_hits
    cdef public bint rolling
    cdef public long long step_base, request_base, request_top, events_dropped

    @cython.locals(i=cython.longlong)
    cpdef close_request(self, Request r)
    @cython.locals(n=cython.Py_ssize_t, drop=cython.Py_ssize_t, used=cython.longlong)
    cpdef trim(self, long long keep_steps, long long keep_requests, double oldest_arrival=*)
    cpdef bint trim_due(self, long long keep_steps, long long keep_requests) except -1
    @cython.locals(seg=list, c=cython.longlong, prev=cython.longlong, j=cython.Py_ssize_t,
                   s=cython.longlong)
    cpdef flush_tokens(self, Request r)


cdef class PendingStep:
    cdef public StepPlan plan
    cdef public object batch
    cdef public double start, duration
    cdef public long long num_running, num_waiting, kv_used


cdef class Engine:
    cdef public object config, name, emit, _step_time, _decode_terms, step_time, _timeouts, kv_connector
    cdef public object _drafter
    cdef public long long num_closed, _next_progress, _empty_steps, max_model_len, step, _next
    cdef public double _draft_fraction, draft_time_s
    cdef public long long _spec_k
    cdef public bint stretch, check_invariants, external_arrivals
    cdef public TraceArrays trace
    cdef public BlockPool pool
    cdef public KVCacheManager kv
    cdef public Scheduler scheduler
    cdef public Recorder rec
    cdef public double now
    cdef public dict live

    cpdef run_until(self, double limit)
    @cython.locals(sched=Scheduler, running=list, arrival=list, n=cython.longlong, timeouts=cython.bint,
                   now=cython.double, step=cython.longlong, plan=StepPlan, conn=object,
                   n_waiting=cython.longlong)
    cpdef PendingStep begin_step(self, double limit=*)
    @cython.locals(p=PendingStep, ended=cython.longlong, last=cython.double, end=cython.double)
    cpdef tuple steps_until(self, PendingStep pending, double horizon, double t_ext, double until)
    @cython.locals(sched=Scheduler, rec=Recorder, plan=StepPlan, now=cython.double, step=cython.longlong,
                   t_end=cython.double, finished=list, r=Request, prefill=cython.longlong,
                   v0=cython.longlong, a0=cython.longlong)
    cpdef list end_step(self, PendingStep p)
    @cython.locals(sched=Scheduler, group=DecodeGroup, step=cython.longlong, t=cython.double,
                   next_arrival=cython.double, n=cython.longlong, end=cython.longlong, pool=BlockPool,
                   free=cython.longlong, usable=cython.longlong, buckets=list, bs=cython.longlong,
                   ctx=cython.longlong, running=list, n_running=cython.longlong,
                   n_waiting=cython.longlong, first=cython.longlong, pops=cython.longlong,
                   dt=cython.double, t_end=cython.double, taken=cython.longlong, done=list, r=Request,
                   terms_n=cython.longlong, head=cython.double, per_ctx=cython.double,
                   tail=cython.double, seq=cython.double)
    cpdef bint _decode_stretch(self, double limit) except -1
    @cython.locals(arrival=list, n=cython.longlong, now=cython.double, mml=cython.longlong,
                   timeouts=cython.bint, live=dict, i=cython.longlong, r=Request)
    cpdef _arrive(self)
    cpdef _close(self, Request r)
