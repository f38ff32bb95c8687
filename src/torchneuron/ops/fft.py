"""FFTs: the three aten primitives every torch.fft function (and stft/istft) lowers to.

``_fft_r2c`` (real -> complex, optionally one-sided), ``_fft_c2c`` (forward or
inverse) and ``_fft_c2r`` (one-sided complex -> real), each over a list of
dims, unnormalized or scaled by 1/sqrt(n) or 1/n (PyTorch's fft_norm_mode:
0 none, 1 by_root_n, 2 by_n, n the product of the signal sizes).  Computed as
a sequence of 1-d XLA FFTs (XLA's FFT op takes at most 3 trailing axes).
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ..numerics import cast
from ..lowering import lower, out_dtype, out_meta

_C = {jnp.dtype(jnp.float32): jnp.complex64, jnp.dtype(jnp.float64): jnp.complex128,
      jnp.dtype(jnp.float16): jnp.complex64, jnp.dtype(jnp.bfloat16): jnp.complex64,
      jnp.dtype(jnp.complex64): jnp.complex64, jnp.dtype(jnp.complex128): jnp.complex128}


def _dims(dim, ndim):
    return [d % ndim for d in dim] if ndim else []


def _scale(x, n, normalization):
    if normalization == 1:
        return x * jnp.asarray(1 / math.sqrt(n), x.real.dtype)
    if normalization == 2:
        return x * jnp.asarray(1 / n, x.real.dtype)
    return x


def _c2c(x, dims, forward):
    for d in dims:
        if forward:
            x = jnp.fft.fft(x, axis=d)
        else:  # the unnormalized inverse
            x = jnp.fft.ifft(x, axis=d, norm="forward")
    return x


@lower("_fft_c2c.default", static=("dim", "normalization", "forward"))
def fft_c2c(self, dim, normalization, forward):
    dims = _dims(dim, self.ndim)
    x = self.astype(_C[jnp.dtype(self.dtype)])
    if not dims or 0 in self.shape:
        return cast(x, out_dtype())
    n = math.prod(self.shape[d] for d in dims)
    return cast(_scale(_c2c(x, dims, forward), n, normalization), out_dtype())


@lower("_fft_r2c.default", static=("dim", "normalization", "onesided"))
def fft_r2c(self, dim, normalization, onesided):
    dims = _dims(dim, self.ndim)
    ct = _C[jnp.dtype(self.dtype)]
    x = self.astype(jnp.real(jnp.zeros((), ct)).dtype)
    if not dims or 0 in self.shape:
        return jnp.zeros(tuple(out_meta().shape), out_dtype())
    n = math.prod(self.shape[d] for d in dims)
    last = dims[-1]
    if onesided:
        y = jnp.fft.rfft(x, axis=last)
    else:
        y = jnp.fft.fft(x.astype(ct), axis=last)
    y = _c2c(y, dims[:-1], True)
    return cast(_scale(y, n, normalization), out_dtype())


@lower("_fft_c2r.default", static=("dim", "normalization", "last_dim_size"))
def fft_c2r(self, dim, normalization, last_dim_size):
    dims = _dims(dim, self.ndim)
    x = self.astype(_C[jnp.dtype(self.dtype)])
    if not dims or 0 in self.shape or last_dim_size == 0:
        return jnp.zeros(tuple(out_meta().shape), out_dtype())
    last = dims[-1]
    y = _c2c(x, dims[:-1], False)
    y = jnp.fft.irfft(y, n=int(last_dim_size), axis=last, norm="forward")
    n = math.prod(y.shape[d] for d in dims)
    return cast(_scale(y, n, normalization), out_dtype())

