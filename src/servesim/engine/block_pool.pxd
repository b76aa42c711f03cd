# Cython declarations for block_pool.py (the compiled core; block_pool.py stays the reference).
# The queue links, dead counts and reference counts are typed memoryviews over the .py's
# array('i'): 32-bit C integer cells (half the cache lines of 64-bit ones; block ids and counts
# fit), no Python object per block. (Indexed through ``self``: a local copy of a memoryview costs
# an atomic acquisition.)
cimport cython


cdef class BlockPool:
    cdef public list _blank, _dead, content
    cdef public int[::1] _next, _prev, dead_before, ref, slot
    cdef public long long num_free, num_gpu_blocks, num_live_queued, dead_tail
    cdef public dict cached, _dups, hashed
    cdef public bint enable_caching

    @cython.locals(tail=cython.longlong)
    cdef inline void _append_live(self, long long b)
    @cython.locals(p=cython.longlong, s=cython.longlong)
    cdef void _remove_live(self, long long b)
    @cython.locals(h=cython.longlong, k=cython.longlong, m=cython.Py_ssize_t, dead=list)
    cdef long long _take_leading_dead(self, list out, long long need) except -1
    @cython.locals(blank=list, out=list, need=cython.longlong, have=cython.Py_ssize_t, b=cython.longlong,
                   s=cython.longlong, content=list, cached=dict, hashed=dict, dups=dict, k=cython.longlong,
                   rec=list, prev=object, dec=cython.longlong)
    cpdef list get_new_blocks(self, long long n)
    @cython.locals(last=cython.Py_ssize_t)
    cdef _uncount(self, base, list rec, long long n)
    cpdef _evict_duplicate(self, long long b, h)
    @cython.locals(k=cython.longlong, rec=list, dups=dict, same=list, last=cython.Py_ssize_t)
    cdef _evict_hashed(self, long long b, base)
    @cython.locals(content=list, hashed=dict, rec=list, got=object, i=cython.Py_ssize_t, k=cython.Py_ssize_t,
                   b=cython.longlong, j=cython.Py_ssize_t, first=cython.Py_ssize_t, end=cython.Py_ssize_t,
                   t=cython.Py_ssize_t)
    cpdef register_hashed(self, list blocks, Py_ssize_t lo, Py_ssize_t hi, list bases, Py_ssize_t per)
    @cython.locals(content=list, cached=dict, i=cython.Py_ssize_t, b=cython.longlong)
    cpdef register(self, list blocks, list keys)
    @cython.locals(c=cython.longlong, b=cython.longlong)
    cpdef touch(self, list blocks)
    @cython.locals(n=cython.longlong, b=cython.longlong)
    cpdef long long num_evictable_among(self, list blocks) except? -1
    @cython.locals(freed=cython.longlong, c=cython.longlong, i=cython.Py_ssize_t, b=cython.longlong,
                   tail=cython.longlong)
    cpdef free(self, list blocks, long long num_live, long long num_hashed)
