# Cython declarations for spec_draws.py (the compiled core; spec_draws.py stays the reference).
# The MT19937 words are C unsigned ints (32 bits), so the reference's `& 0xFFFFFFFF` are no-ops.
cimport cython

from servesim.engine.request cimport Request

cdef unsigned int MASK32, UPPER, MATRIX_A, TEMPER_B, TEMPER_C


@cython.locals(total=cython.Py_ssize_t, mt=cython.uint[::1], tiled=cython.uint[::1],
               addend=cython.uint[::1], kw=cython.uint[::1],
               lane=cython.Py_ssize_t, nrates=cython.Py_ssize_t, nflat=cython.Py_ssize_t,
               b=cython.Py_ssize_t, width=cython.Py_ssize_t, r=Request, idx=cython.ulonglong,
               verification=cython.ulonglong, lo=cython.ulonglong, hi=cython.ulonglong,
               used=cython.Py_ssize_t, s=cython.Py_ssize_t, j=cython.Py_ssize_t, own=cython.bint,
               p=cython.double)
cpdef accepted_batch(unsigned long long seed, list reqs, list ns, double[::1] rates, double[::1] flat,
                     list out)

@cython.locals(x=cython.Py_ssize_t, i=cython.Py_ssize_t, s=cython.Py_ssize_t, _k=cython.Py_ssize_t,
               cur=cython.Py_ssize_t, prv=cython.Py_ssize_t, add=cython.Py_ssize_t,
               lane=cython.Py_ssize_t, y=cython.uint, mask=cython.uint, sub=cython.uint)
cdef void _init_by_array(unsigned int[::1] mt, unsigned int[::1] tiled, unsigned int[::1] addend) noexcept

@cython.locals(a=cython.Py_ssize_t, u=cython.double, q=cython.double)
cdef Py_ssize_t _count(unsigned int[::1] mt, Py_ssize_t lane, Py_ssize_t n, bint own, double p,
                       double[::1] rates, Py_ssize_t nrates) noexcept

@cython.locals(y=cython.uint, v=cython.uint, out=cython.uint)
cdef inline unsigned int _output(unsigned int[::1] mt, Py_ssize_t lane, Py_ssize_t i) noexcept
