# Cython declarations for stretch_cursor.py (the compiled core; stretch_cursor.py stays the reference).
cimport cython

from servesim.engine.decode_group cimport DecodeGroup
from servesim.engine.engine cimport Engine
from servesim.engine.scheduler cimport Scheduler
from servesim.engine.step_plan cimport PendingStep, StepPlan


cdef class StretchCursor:
    cdef public double bound, head, per_ctx, tail, seq
    cdef public bint open
    cdef public long long step, end, free, n, ctx, block_size, outstanding
    cdef public list buckets

    cpdef close(self, double bound)
    @cython.locals(n=cython.longlong)
    cpdef start(self, DecodeGroup group, double t, long long step, long long free, Engine engine)
    @cython.locals(step=cython.longlong, pops=cython.longlong, dt=cython.double)
    cpdef bint quiet_through(self, double t) except -1
    @cython.locals(sched=Scheduler, group=DecodeGroup, plan=StepPlan, end=cython.double, quiet=cython.bint)
    cpdef watch(self, Engine engine, PendingStep p)
    @cython.locals(ended=cython.longlong)
    cpdef tuple settle(self, Engine engine, PendingStep p, double t)


@cython.locals(steps=cython.longlong, k=cython.Py_ssize_t, cursor=StretchCursor, ended=cython.longlong, p=PendingStep)
cpdef long long settle_all(list cursors, list engines, list inflight, list alive, list watched, list queues,
                           double t) except -1
@cython.locals(sched=Scheduler, group=DecodeGroup)
cpdef bint _stretch_follows(Engine engine) except -1
