# Cython declarations for block_pool.py (the compiled core; block_pool.py stays the reference).
cimport cython


cdef class BlockPool:
    cdef public list _blank
    cdef public object _lru
    cdef public long long _next_run, num_free, num_gpu_blocks
    cdef public dict block_hash, cached, _dups, ref
    cdef public bint enable_caching

    @cython.locals(blank=list, need=cython.longlong, ref=dict, cached=dict, block_hash=dict)
    cpdef list get_new_blocks(self, long long n)
    cpdef _blank_leading_dead_runs(self)
    cpdef _evict_duplicate(self, b, h)
    @cython.locals(block_hash=dict, ref=dict, cached=dict, i=cython.Py_ssize_t)
    cpdef register(self, list blocks, list keys)
    @cython.locals(ref=dict, head_taken=cython.bint, c=cython.longlong)
    cpdef touch(self, list blocks)
    @cython.locals(ref=dict, n=cython.longlong)
    cpdef long long num_evictable_among(self, list blocks) except? -1
    @cython.locals(freed=cython.longlong, ref=dict, c=cython.longlong, i=cython.Py_ssize_t)
    cpdef free(self, list blocks, long long num_live, long long num_hashed)
