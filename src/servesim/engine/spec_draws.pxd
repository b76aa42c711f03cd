# Cython declarations for spec_draws.py (the compiled core; spec_draws.py stays the reference).
# The MT19937 words are C unsigned ints (32 bits), so the reference's `& 0xFFFFFFFF` are no-ops.
cimport cython

from servesim.engine.request cimport Request

cdef unsigned int MASK32, UPPER, MATRIX_A, TEMPER_B, TEMPER_C
cdef double NAN


@cython.locals(start=cython.Py_ssize_t, total=cython.Py_ssize_t, i=cython.Py_ssize_t, r=Request,
               base=cython.longlong, held=bytes, off=cython.longlong, a=cython.longlong,
               n=cython.longlong, needy=list)
cpdef accepted_batch(unsigned long long seed, list reqs, list ns, double[::1] rates, double[::1] flat,
                     Py_ssize_t cap, dict table, list out)

@cython.locals(count=cython.Py_ssize_t, size=cython.longlong[::1], lanes=cython.Py_ssize_t,
               target=cython.Py_ssize_t, grew=cython.bint, j=cython.Py_ssize_t, r=Request)
cdef _ahead_sizes(list reqs, list needy)

@cython.locals(size=cython.longlong[::1], count=cython.Py_ssize_t, lanes=cython.Py_ssize_t,
               res=bytearray, mt=cython.uint[::1], addend=cython.uint[::1], own=cython.double[::1],
               kw=cython.uint[::1], nflat=cython.Py_ssize_t, nrates=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, lane=cython.Py_ssize_t, j=cython.Py_ssize_t, r=Request,
               idx=cython.ulonglong, p=cython.double, t=cython.Py_ssize_t,
               verification=cython.ulonglong, lo=cython.ulonglong, hi=cython.ulonglong,
               used=cython.Py_ssize_t, s=cython.Py_ssize_t, w=cython.Py_ssize_t,
               width=cython.Py_ssize_t, x=cython.Py_ssize_t, i=cython.Py_ssize_t,
               a=cython.longlong, n=cython.longlong, drawn=bytes, v=cython.longlong,
               base=cython.longlong, held=bytes)
cdef _draw_ahead(unsigned long long seed, list reqs, list ns, list needy, double[::1] rates,
                 double[::1] flat, Py_ssize_t cap, dict table, list out, Py_ssize_t start)

@cython.locals(x=cython.Py_ssize_t, i=cython.Py_ssize_t, s=cython.Py_ssize_t, _k=cython.Py_ssize_t,
               cur=cython.Py_ssize_t, prv=cython.Py_ssize_t, add=cython.Py_ssize_t,
               g=cython.Py_ssize_t, lane=cython.Py_ssize_t, y=cython.uint, mask=cython.uint,
               sub=cython.uint, word=cython.uint)
cdef void _init_by_array(unsigned int[::1] mt, unsigned int[::1] base, unsigned int[::1] addend,
                         Py_ssize_t width) noexcept

@cython.locals(a=cython.Py_ssize_t, u=cython.double, q=cython.double)
cdef Py_ssize_t _count(unsigned int[::1] mt, Py_ssize_t lane, Py_ssize_t width, Py_ssize_t n, double p,
                       double[::1] rates, Py_ssize_t nrates) noexcept

@cython.locals(y=cython.uint, v=cython.uint, out=cython.uint)
cdef inline unsigned int _output(unsigned int[::1] mt, Py_ssize_t lane, Py_ssize_t width,
                                 Py_ssize_t i) noexcept
