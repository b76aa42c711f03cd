# Cython declarations for engine.py (the compiled core; engine.py stays the reference).
cimport cython

from servesim.engine.block_pool cimport BlockPool
from servesim.engine.decode_group cimport DecodeGroup
from servesim.engine.kv_cache_manager cimport KVCacheManager
from servesim.engine.recorder cimport Recorder
from servesim.engine.request cimport Request
from servesim.engine.scheduler cimport Scheduler
from servesim.engine.step_plan cimport PendingStep, StepPlan
from servesim.engine.trace_arrays cimport TraceArrays


cdef class Engine:
    cdef public object config, name, emit, _step_time, _decode_terms, step_time, _timeouts, kv_connector
    cdef public object _drafter, gate, adapters, _group_used
    cdef public long long num_closed, _next_progress, _empty_steps, max_model_len, step, _next
    cdef public double _draft_fraction, draft_time_s
    cdef public long long _spec_k, _terms_n
    cdef public tuple _terms
    cdef public bint stretch, check_invariants, external_arrivals, _async
    cdef public PendingStep _held
    cdef public object _pp  # pipeline_steps.BatchQueue (None without pipeline parallelism)
    cdef public TraceArrays trace
    cdef public BlockPool pool
    cdef public KVCacheManager kv
    cdef public Scheduler scheduler
    cdef public Recorder rec
    cdef public double now
    cdef public dict live
    cdef public PendingStep _span
    cdef public double _span_dt, _span_end

    cpdef run_until(self, double limit)
    @cython.locals(sched=Scheduler, running=list, arrival=list, n=cython.longlong, timeouts=cython.bint,
                   now=cython.double, step=cython.longlong, plan=StepPlan, xfer=object, cutoff=cython.double,
                   n_waiting=cython.longlong, terms_of=object, nd=cython.longlong, head=cython.double,
                   per_ctx=cython.double, tail=cython.double, seq=cython.double)
    cpdef PendingStep begin_step(self, double limit=*)
    @cython.locals(p=PendingStep, ended=cython.longlong, last=cython.double, end=cython.double)
    cpdef tuple steps_until(self, PendingStep pending, double horizon, double t_ext, double until)
    @cython.locals(sched=Scheduler, rec=Recorder, plan=StepPlan, now=cython.double, step=cython.longlong,
                   t_end=cython.double, finished=list, r=Request, prefill=cython.longlong,
                   v0=cython.longlong, a0=cython.longlong)
    cpdef list _apply(self, PendingStep p, long long step)
    @cython.locals(step=cython.longlong, held=PendingStep)
    cpdef list end_step(self, PendingStep p)
    @cython.locals(sched=Scheduler, group=DecodeGroup, step=cython.longlong, t=cython.double,
                   next_arrival=cython.double, n=cython.longlong, end=cython.longlong, pool=BlockPool,
                   free=cython.longlong, usable=cython.longlong, buckets=list, bs=cython.longlong,
                   ctx=cython.longlong, n_running=cython.longlong,
                   n_waiting=cython.longlong, first=cython.longlong, pops=cython.longlong,
                   dt=cython.double, t_end=cython.double,
                   terms_n=cython.longlong, head=cython.double, per_ctx=cython.double,
                   tail=cython.double, seq=cython.double, due=cython.double, xfer=object)
    cpdef bint _decode_stretch(self, double limit) except -1
    cdef double _stretch_horizon(self, double limit) except? -1.0
    @cython.locals(group=DecodeGroup, pool=BlockPool, taken=cython.longlong, done=list, rec=Recorder,
                   r=Request, xfer=object)
    cdef void _stretch_finish(self, long long step, double t, double dt, double t_end, long long n,
                              long long free, long long n_running, long long n_waiting) except *
    @cython.locals(group=DecodeGroup, pool=BlockPool, taken=cython.longlong)
    cdef void _stretch_end(self, long long step, double t, long long free) except *
    @cython.locals(arrival=list, n=cython.longlong, now=cython.double, mml=cython.longlong,
                   timeouts=cython.bint, live=dict, i=cython.longlong, r=Request, trace=TraceArrays,
                   kv=KVCacheManager)
    cpdef _arrive(self, double now)
    cpdef _close(self, Request r)
