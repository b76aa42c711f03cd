# Cython declarations for scheduler.py (the compiled core; scheduler.py stays the reference).
cimport cython

from servesim.engine.decode_group cimport DecodeGroup
from servesim.engine.kv_cache_manager cimport KVCacheManager
from servesim.engine.request cimport Request
from servesim.engine.step_plan cimport (PrefillCadence, StepPlan, any_prefill_chunk, running_index,
                                        running_tokens, tokens_kept)


cdef class Scheduler:
    cdef public KVCacheManager kv
    cdef public long long budget, max_num_seqs, threshold, max_model_len, _admit_seq
    cdef public long long total_preemptions, spec_k, draft_slots, input_left
    cdef public long long spec_drafted, spec_accepted, spec_verifications
    cdef public long long input_budget, max_num_active, mbt, prefill_interval, max_loras, pp_step
    cdef public bint adaptive
    cdef public PrefillCadence cadence
    cdef public object acceptance, drafts
    cdef public bint chunked, priority, protect_starved, boost_starved, async_sched, mamba_align
    cdef public list running, explicit
    cdef public object waiting, starvation_threshold, connector, kv_xfer
    cdef public DecodeGroup group

    @cython.locals(plan=StepPlan, n_eligible=cython.longlong, thr=cython.longlong, budget=cython.longlong,
                   xfer=object, fair=cython.longlong, defer=cython.bint,
                   cadence=PrefillCadence)
    cpdef StepPlan schedule(self, long long step, double now)
    @cython.locals(running=list, kv=KVCacheManager, budget=cython.longlong, mml=cython.longlong,
                   scheduled=list, i=cython.Py_ssize_t, r=Request, n=cython.longlong, ok=cython.bint,
                   victim=Request, vi=cython.Py_ssize_t, j=cython.Py_ssize_t, s=Request,
                   sn=cython.longlong, ds=cython.longlong, ib=cython.longlong, sp=cython.longlong,
                   defer=cython.bint)
    cpdef long long _running_pass(self, StepPlan plan, long long thr) except? -1
    @cython.locals(group=DecodeGroup, budget=cython.longlong, mml=cython.longlong, kv=KVCacheManager,
                   explicit=list, running=list, chunks=list, group_blocks=cython.longlong,
                   blocks=cython.longlong, left=cython.longlong, used=cython.longlong,
                   j=cython.Py_ssize_t, r=Request, members_before=cython.longlong,
                   avail=cython.longlong, n=cython.longlong)
    cpdef long long _fast_running_pass(self, StepPlan plan, long long step, long long thr) except? -2
    @cython.locals(running=list, kv=KVCacheManager, r=Request, hit=list, hit_tokens=cython.longlong,
                   num_tokens=cython.longlong, ext=cython.longlong, n=cython.longlong,
                   k=cython.longlong, ds=cython.longlong, ib=cython.longlong, cap=cython.longlong,
                   padded=cython.bint, pad_ok=cython.bint, has_running_scheduled=cython.bint,
                   xfer=object, ready=object, q=object, fresh=cython.bint, load_async=cython.bint,
                   computed=cython.longlong, reserved=cython.longlong, gpu=cython.longlong,
                   skipped=list, max_loras=cython.longlong, loras=object, x=Request)
    cpdef _waiting_pass(self, StepPlan plan, long long budget, long long thr, double now)
    @cython.locals(lost=cython.longlong, reused=cython.longlong, moved=cython.longlong)
    cdef inline void _admit(self, StepPlan plan, Request r, long long computed, long long gpu,
                            long long ext, long long n, double now) except *
    cpdef Request _victim(self, Request r)
    cpdef _preempt(self, Request r)
    @cython.locals(group=DecodeGroup, r=Request)
    cpdef materialize_all(self, long long step, double now)
    @cython.locals(mml=cython.longlong, finished=list, r=Request, n=cython.longlong, c=cython.longlong,
                   o=cython.longlong, group=DecodeGroup, done=list, xfer=object)
    cpdef list update(self, StepPlan plan, long long step, double t_end)
    @cython.locals(mml=cython.longlong, k=cython.longlong, kv=KVCacheManager, finished=list, r=Request,
                   n=cython.longlong, c=cython.longlong, d=cython.longlong, a=cython.longlong,
                   o=cython.longlong, stop=cython.bint, kept=cython.longlong, draws=list,
                   j=cython.Py_ssize_t)
    cpdef list _verify(self, StepPlan plan, long long step, double t_end)
    @cython.locals(reqs=list, ns=list, r=Request, n=cython.longlong, d=cython.longlong, out=list)
    cpdef list _draws(self, StepPlan plan)
    @cython.locals(seg=list)
    cdef inline void _emitted(self, Request r, long long step, double t_end)
    @cython.locals(running=list, kv=KVCacheManager, r=Request, sending=dict)
    cpdef retire(self, list finished, double t_end)
    cpdef list finish_requests(self, list requests, long long outcome, long long step, double t)
    @cython.locals(group=DecodeGroup, candidates=list, keep=list, r=Request, seg=list)
    cpdef _regroup(self, StepPlan plan, long long next_step)

