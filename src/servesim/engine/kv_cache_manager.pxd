# Cython declarations for kv_cache_manager.py (the compiled core; the .py stays the reference).
cimport cython

from servesim.engine.block_pool cimport BlockPool
from servesim.engine.request cimport Request


cdef class KVCacheManager:
    cdef public long long block_size, max_model_len, watermark_blocks, lookahead, hash_lookahead
    cdef public bint caching, full_sequence_must_fit
    cdef public BlockPool pool

    @cython.locals(per=cython.longlong)
    cpdef block_key(self, Request r, long long i)
    @cython.locals(per=cython.longlong, rec=list)
    cpdef bint is_cached(self, Request r, long long i) except -1
    cpdef init_request(self, Request r)
    @cython.locals(n=cython.longlong, hit=list, m=cython.longlong, per=cython.Py_ssize_t, j=cython.Py_ssize_t,
                   lim=cython.Py_ssize_t, k=cython.Py_ssize_t, rec=list, hashed=dict)
    cpdef list lookup(self, Request r)
    @cython.locals(full=cython.longlong, start=cython.longlong, shared=cython.longlong, end=cython.longlong,
                   known=cython.longlong)
    cpdef cache_blocks(self, Request r, long long num_tokens)
    @cython.locals(need=cython.longlong)
    cpdef long long blocks_needed_running(self, Request r, long long n) except? -1
    @cython.locals(need=cython.longlong, pool=BlockPool, t=cython.longlong, nt=cython.longlong)
    cpdef bint allocate_running(self, Request r, long long n) except -1
    @cython.locals(
        pool=BlockPool, room=cython.longlong, mml=cython.longlong, num_tokens=cython.longlong,
        beyond=cython.longlong,
    )
    cpdef long long admission_room(
        self, Request r, list hit, long long num_held, bint has_running
    ) except? -1
    @cython.locals(
        pool=BlockPool, bs=cython.longlong, mml=cython.longlong, num_tokens=cython.longlong,
        num_hit=cython.longlong, held=cython.longlong, room=cython.longlong, computed=cython.longlong,
        total=cython.longlong, more=cython.longlong, slots=cython.longlong, hit=list,
    )
    cpdef bint allocate_slots(
        self, Request r, long long num_new_tokens, list new_computed_blocks, bint has_running,
        long long num_external_computed_tokens=*, bint delay_cache_blocks=*, long long reserved_blocks=*
    ) except -1
    cpdef long long aligned_split(self, Request r, long long n, long long start) except? -1
    cpdef new_step_starts(self)
    cpdef free(self, Request r)
    @cython.locals(lo=cython.longlong, hi=cython.longlong, mid=cython.longlong)
    cpdef free_preempted(self, Request r)


@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t, w=cython.Py_ssize_t,
               out=list, width=list, alive=list, groups=list, deeper=list, g=list, parts=dict, part=list,
               going=list)
cpdef list shared_id_prefixes(hash_ids, prompt_len, long long hash_block_size)
@cython.locals(covered=cython.Py_ssize_t, per=cython.Py_ssize_t, n=cython.Py_ssize_t, out=list,
               j=cython.Py_ssize_t, keys=list, i=cython.Py_ssize_t, first=cython.Py_ssize_t,
               last=cython.Py_ssize_t)
cpdef tuple hash_id_bases(
    hash_ids, long long hash_block_size, long long block_size, long long prompt_len, long long lookahead=*
)
cpdef list hash_id_keys(
    hash_ids, long long hash_block_size, long long block_size, long long prompt_len, long long lookahead=*
)
