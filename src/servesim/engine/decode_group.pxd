# Cython declarations for decode_group.py (the compiled core; decode_group.py stays the reference).
cimport cython

from servesim.engine.kv_cache_manager cimport KVCacheManager
from servesim.engine.request cimport Request


cdef class DecodeGroup:
    cdef public long long block_size, max_model_len, n, ctx_base
    cdef public list buckets, finish_heap, limbo
    cdef public KVCacheManager kv

    @cython.locals(c0=cython.longlong, limit=cython.longlong)
    cpdef add(self, Request r, long long step)
    @cython.locals(s0=cython.longlong, c0=cython.longlong, d=cython.longlong, bs=cython.longlong,
                   missing=cython.longlong, limbo=list)
    cpdef materialize(self, Request r, long long step, double last_token_time)
    @cython.locals(heap=list, r=Request)
    cpdef next_finish_step(self)
    @cython.locals(heap=list, out=list, r=Request)
    cpdef list take_finishing(self, long long step, double t_end)
    cpdef compact(self)
