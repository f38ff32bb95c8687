"""Special functions: Bessel and Airy functions and the orthogonal polynomials
(``torch.special.*``), in float64 algorithms where XLA has none."""
from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jsp
from jax import lax

from ..lowering import in_compute_dtype, in_result_dtype
from ..lowering import lower as _lower_plain


# Every special-function lowering checks PyTorch's dtype support at trace time (probe.py).
def lower(*names, static=()):
    return _lower_plain(*names, static=static, probe=True)


# ---------------------------------------------------------------- Bessel and Airy functions
# Computed in float64 (then rounded to the result dtype) from integral representations,
# series and asymptotic expansions, with PyTorch's (Cephes') edge cases:
#   J_m(x)  by the trapezoidal rule over a full period of cos(x sin t - m t) (exact up to
#           aliasing for |x| <= 25), Y_0 / Y_1 from those J_m by Neumann's series, and
#           Hankel's expansions beyond;
#   K_0 / K_1 by the trapezoidal rule on the even, analytic integrand of
#           int exp(-x cosh t) cosh(nu t) dt (x >= 1), their power series below;
#   Ai      from the Maclaurin series (|x| small), K_{1/3} (x > 0) and its oscillatory
#           expansion (x << 0).
_EULER = 0.57721566490153286061
_BJ_N = 160  # trapezoid nodes over [0, 2 pi)
_BJ_K = 36  # terms of Neumann's series
_BJ_X = 25.0  # beyond: Hankel's asymptotic expansions


def _bessel_tables():
    import numpy as np

    t = 2 * np.pi * np.arange(_BJ_N) / _BJ_N
    m = np.arange(2 * _BJ_K + 2)[:, None]
    wc = np.cos(m * t) / _BJ_N  # J_m = C . wc[m] + S . ws[m]
    ws = np.sin(m * t) / _BJ_N
    k = np.arange(1, _BJ_K + 1)[:, None]
    sgn = (-1.0) ** k
    # Y0 = (2/pi)(log(x/2)+gamma) J0 - (4/pi) sum_k (-1)^k J_2k / k
    y0c = -(4 / np.pi) * np.sum(sgn * wc[2 * k[:, 0]] / k, axis=0)
    y0s = -(4 / np.pi) * np.sum(sgn * ws[2 * k[:, 0]] / k, axis=0)
    # Y1 = -(2/pi) J0/x + (2/pi)(log(x/2)+gamma) J1 + (2/pi) sum_k (-1)^k (J_2k-1 - J_2k+1)/k
    d_c = wc[2 * k[:, 0] - 1] - wc[2 * k[:, 0] + 1]
    d_s = ws[2 * k[:, 0] - 1] - ws[2 * k[:, 0] + 1]
    y1c = (2 / np.pi) * np.sum(sgn * d_c / k, axis=0)
    y1s = (2 / np.pi) * np.sum(sgn * d_s / k, axis=0)
    return dict(sin_t=np.sin(t), j0c=wc[0], j0s=ws[0], j1c=wc[1], j1s=ws[1], y0c=y0c, y0s=y0s,
                y1c=y1c, y1s=y1s)


_BT = None


def _bt():
    global _BT
    if _BT is None:
        _BT = _bessel_tables()
    return _BT


def _bessel_dft(x):
    """(C, S) = cos / sin(x sin t_j) for the trapezoid nodes, shape x.shape + (N,)."""
    arg = x[..., None] * jnp.asarray(_bt()["sin_t"])
    return jnp.cos(arg), jnp.sin(arg)


def _dot(c, s, wc, ws):
    return c @ jnp.asarray(wc) + s @ jnp.asarray(ws)


def _hankel(n, x):
    """Hankel's asymptotic (P, Q, chi) for J_n, Y_n at large x."""
    mu = 4.0 * n * n
    p = jnp.ones_like(x)
    q = jnp.zeros_like(x)
    term = jnp.ones_like(x)
    for k in range(1, 24):
        term = term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * x)
        if k % 2:
            q = q + (term if (k // 2) % 2 == 0 else -term)
        else:
            p = p + (term if (k // 2) % 2 == 0 else -term)
    chi = x - (n / 2.0 + 0.25) * math.pi
    return p, q, chi


def _j(n, x):
    ax = jnp.abs(x)
    small = ax <= _BJ_X
    xs = jnp.where(small, ax, 0.0)
    c, s = _bessel_dft(xs)
    bt = _bt()
    near = _dot(c, s, bt[f"j{n}c"], bt[f"j{n}s"])
    xl = jnp.where(small, _BJ_X + 1, ax)
    p, q, chi = _hankel(n, xl)
    far = jnp.sqrt(2 / (math.pi * xl)) * (p * jnp.cos(chi) - q * jnp.sin(chi))
    r = jnp.where(small, near, far)  # (+-inf gives NaN, like Cephes)
    if n == 1:
        r = jnp.where(x < 0, -r, r)
    return r


def _y(n, x):
    small = x <= _BJ_X
    xs = jnp.where(small & (x > 0), x, 1.0)
    c, s = _bessel_dft(xs)
    bt = _bt()
    lg = (2 / math.pi) * (jnp.log(xs / 2) + _EULER)
    j0 = _dot(c, s, bt["j0c"], bt["j0s"])
    if n == 0:
        near = lg * j0 + _dot(c, s, bt["y0c"], bt["y0s"])
    else:
        j1 = _dot(c, s, bt["j1c"], bt["j1s"])
        near = -(2 / math.pi) * j0 / xs + lg * j1 + _dot(c, s, bt["y1c"], bt["y1s"])
    xl = jnp.where(small, _BJ_X + 1, x)
    p, q, chi = _hankel(n, xl)
    far = jnp.sqrt(2 / (math.pi * xl)) * (p * jnp.sin(chi) + q * jnp.cos(chi))
    r = jnp.where(small, near, far)
    r = jnp.where(x == 0, -jnp.inf, r)
    return jnp.where(x < 0, jnp.nan, r)


_K_H = 0.25
_K_NODES = 160


def _k_scaled_quad(nu, x):
    """exp(x) K_nu(x) for x >= 1 by the trapezoidal rule (t = u w, w = min(1, x^-1/2))."""
    import numpy as np

    u = jnp.asarray(np.arange(_K_NODES) * _K_H)
    wgt = jnp.asarray(np.where(np.arange(_K_NODES) == 0, 0.5, 1.0) * _K_H)
    w = jnp.minimum(1.0, lax.rsqrt(x))[..., None]
    t = u * w
    f = jnp.exp(-x[..., None] * (jnp.cosh(t) - 1)) * jnp.cosh(nu * t)
    return jnp.sum(f * wgt, axis=-1) * w[..., 0]


def _k_series(n, x):
    """K_0 / K_1 from their power series (x small)."""
    z = x * x / 4
    lg = jnp.log(x / 2)
    if n == 0:
        i0 = jnp.zeros_like(x)
        acc = jnp.zeros_like(x)
        term = jnp.ones_like(x)
        psi = -_EULER
        for k in range(30):
            if k:
                term = term * z / (k * k)
                psi = psi + 1.0 / k
            i0 = i0 + term
            acc = acc + psi * term
        return -lg * i0 + acc
    i1 = jnp.zeros_like(x)
    acc = jnp.zeros_like(x)
    term = x / 2  # (x/2)^(2k+1) / (k! (k+1)!)
    psi_sum = -2 * _EULER + 1.0  # psi(k+1) + psi(k+2)
    for k in range(30):
        if k:
            term = term * z / (k * (k + 1))
            psi_sum = psi_sum + 1.0 / k + 1.0 / (k + 1)
        i1 = i1 + term
        acc = acc + psi_sum * term
    return 1 / x + lg * i1 - acc / 2


def _k(n, x, scaled):
    big = x >= 1
    xb = jnp.where(big, x, 1.0)
    xs = jnp.where(big | (x <= 0), 0.5, x)
    far = _k_scaled_quad(float(n), xb)
    near = _k_series(n, xs)
    if scaled:
        r = jnp.where(big, far, near * jnp.exp(xs))
    else:
        r = jnp.where(big, far * jnp.exp(-xb), near)
    r = jnp.where(x == jnp.inf, 0.0, r)
    r = jnp.where(x == 0, jnp.inf, r)
    return jnp.where(x < 0, jnp.nan, r)


_AI0 = 0.355028053887817239260
_AIP0 = 0.258819403792806798405


def _airy_ai(x):
    # Maclaurin series, |x| <= 8 (x > 2 uses K_{1/3}, x < -8 the asymptotic expansion)
    xm = jnp.clip(x, -8.0, 8.0)
    x3 = xm * xm * xm
    f = jnp.ones_like(xm)
    g = xm
    tf, tg = jnp.ones_like(xm), xm
    for k in range(60):
        tf = tf * x3 / ((3 * k + 2) * (3 * k + 3))
        tg = tg * x3 / ((3 * k + 3) * (3 * k + 4))
        f = f + tf
        g = g + tg
    series = _AI0 * f - _AIP0 * g
    # x > 2: Ai(x) = sqrt(x/3) / pi * K_{1/3}(zeta), zeta = 2/3 x^{3/2}
    xp = jnp.where(x > 2, x, 4.0)
    zeta = 2.0 / 3.0 * xp * jnp.sqrt(xp)
    pos = jnp.sqrt(xp / 3) / math.pi * jnp.exp(-zeta) * _k_scaled_quad(1.0 / 3.0, zeta)
    # x < -8: the oscillatory expansion in zeta = 2/3 z^{3/2}
    z = jnp.where(x < -8, -x, 9.0)
    ze = 2.0 / 3.0 * z * jnp.sqrt(z)
    p = jnp.ones_like(z)
    q = jnp.zeros_like(z)
    u = 1.0
    term = jnp.ones_like(z)
    for k in range(1, 30):
        # u_k = (2k+1)(2k+3)...(6k-1) / (216^k k!)
        num = 1.0
        for j in range(2 * k + 1, 6 * k, 2):
            num *= j
        u = num / (216.0 ** k * math.factorial(k))
        term = u / ze ** k
        sign = 1.0 if (k // 2) % 2 == 0 else -1.0
        if k % 2:
            q = q + sign * term
        else:
            p = p + sign * term
    ang = ze + math.pi / 4
    neg = (jnp.sin(ang) * p - jnp.cos(ang) * q) / (math.sqrt(math.pi) * jnp.sqrt(jnp.sqrt(z)))
    r = jnp.where(x > 2, pos, jnp.where(x < -8, neg, series))
    r = jnp.where(x > 103.892, 0.0, r)
    return jnp.where(jnp.isinf(x), jnp.nan, r)


def _sph_j0(x):
    small = jnp.abs(x) < 0.5
    xs = jnp.where(small, 1.0, x)
    x2 = x * x
    taylor = 1 + x2 * (-1 / 6 + x2 * (1 / 120 + x2 * (-1 / 5040 + x2 * (1 / 362880 + x2 * (
        -1 / 39916800 + x2 * (1 / 6227020800))))))
    r = jnp.where(small, taylor, jnp.sin(xs) / xs)
    return jnp.where(jnp.isinf(x), 0.0, r)


def _f64(f):
    def fn(x):
        (x,) = in_result_dtype(x)
        return f(x.astype(jnp.float64)).astype(x.dtype)
    return fn


for _n, _f in {
    "special_bessel_j0.default": lambda x: _j(0, x),
    "special_bessel_j1.default": lambda x: _j(1, x),
    "special_bessel_y0.default": lambda x: _y(0, x),
    "special_bessel_y1.default": lambda x: _y(1, x),
    "special_modified_bessel_i0.default": jsp.i0,
    "special_modified_bessel_i1.default": jsp.i1,
    "special_modified_bessel_k0.default": lambda x: _k(0, x, False),
    "special_modified_bessel_k1.default": lambda x: _k(1, x, False),
    "special_scaled_modified_bessel_k0.default": lambda x: _k(0, x, True),
    "special_scaled_modified_bessel_k1.default": lambda x: _k(1, x, True),
    "special_airy_ai.default": _airy_ai,
    "special_spherical_bessel_j0.default": _sph_j0,
}.items():
    lower(_n)(_f64(_f))


# ---------------------------------------------------------------- orthogonal polynomials
# PyTorch evaluates these by their three-term recurrences (a loop up to n, per element),
# with closed forms at the interval ends and, for large n inside the interval,
# trigonometric forms.  Here one while-loop runs to the largest n of the tensor.
def _recurrence(x, iters, q0, step):
    """Run q_{j+1} = step(j, p_j, q_j) for `iters` (per element) steps from (1, q0)."""
    if x.size == 0:
        return q0

    def cond(st):
        return st[0] < jnp.max(iters)

    def body(st):
        j, p, q = st
        r = step(j.astype(x.dtype), p, q)
        act = j < iters
        return j + 1, jnp.where(act, q, p), jnp.where(act, r, q)

    _, _, q = lax.while_loop(cond, body, (jnp.zeros((), iters.dtype), jnp.ones_like(x), q0))
    return q


def _poly_n(n, x):
    # PyTorch converts n with static_cast<int64_t>: truncation; NaN / inf act as negative
    n = jnp.asarray(n)
    if jnp.issubdtype(n.dtype, jnp.inexact):
        n = jnp.where(jnp.isfinite(n), jnp.trunc(n), -1.0).astype(jnp.int64)
    else:
        n = n.astype(jnp.int64)
    return jnp.broadcast_arrays(x, n)


def _pm(cond, dt):
    return jnp.where(cond, 1.0, -1.0).astype(dt)


def _cheb(kind, shifted):
    def fn(x, n):
        (x,) = in_compute_dtype(x)
        x, n = _poly_n(n, x)
        nf = n.astype(x.dtype)
        dt = x.dtype
        y = x + x - 1 if shifted else x
        even = (n % 2) == 0
        q0 = {"t": y, "u": y + y, "v": y + y - 1, "w": y + y + 1}[kind]
        big = {"t": 6, "u": 8, "v": 8, "w": 8}[kind] if not shifted else \
            {"t": 6, "u": 6, "v": 6, "w": 4}[kind]
        inside = (n > big) & (jnp.abs(y) < 1)
        ends = (x == 1) | (x == 0) if shifted else jnp.abs(x) == 1
        iters = jnp.where(inside | ends, 0, n - 1)  # the loop only where it decides
        rec = _recurrence(y, iters, q0, lambda j, p, q: (y + y) * q - p)
        a = jnp.arccos(jnp.where(inside, y, 0.0))
        if kind == "t":
            trig = jnp.cos(nf * a)
            top, bottom = jnp.ones_like(x), _pm(even, dt)
        elif kind == "u":
            sa = jnp.sin(a)
            trig = jnp.where(sa != 0, jnp.sin((nf + 1) * a) / jnp.where(sa != 0, sa, 1),
                             (nf + 1) * jnp.cos((nf + 1) * a) / y)
            top, bottom = nf + 1, _pm(even, dt) * (nf + 1)
        elif kind == "v":
            trig = jnp.where(jnp.sin(a / 2) != 1, jnp.cos((nf + 0.5) * a) / jnp.cos(a / 2),
                             _pm(even, dt) * (2 * nf + 1))
            top, bottom = jnp.ones_like(x), _pm(even, dt) * (2 * nf + 1)
        else:
            trig = jnp.where(jnp.cos(a / 2) != 1, jnp.sin((nf + 0.5) * a) / jnp.sin(a / 2),
                             jnp.where(y > 0, 2 * nf + 1, _pm(even, dt)) if not shifted
                             else _pm(even, dt))
            top, bottom = 2 * nf + 1, _pm(even, dt)
        r = jnp.where(n == 1, q0, rec)
        r = jnp.where(n == 0, 1.0, r)
        r = jnp.where(inside, trig, r)
        if shifted:
            r = jnp.where(x == 0, bottom, r)
            r = jnp.where(x == 1, top, r)
        else:
            r = jnp.where(jnp.abs(x) == 1, jnp.where(x > 0, top, bottom), r)
        return jnp.where(n < 0, 0.0, r).astype(dt)

    return fn


def _hermite(physicists):
    def fn(x, n):
        (x,) = in_compute_dtype(x)
        x, n = _poly_n(n, x)
        limit = 128 if x.dtype == jnp.float32 else 512
        iters = jnp.where(n > limit, 0, n - 1)
        if physicists:  # H_{j+1} = 2x H_j - 2j H_{j-1}
            q0 = x + x
            rec = _recurrence(x, iters, q0, lambda j, p, q: (x + x) * q - (2 * j + 2) * p)
        else:  # He_{j+1} = x He_j - j He_{j-1}
            q0 = x
            rec = _recurrence(x, iters, q0, lambda j, p, q: x * q - (j + 1) * p)
        r = jnp.where(n == 1, q0, rec)
        r = jnp.where(n > limit, jnp.nan, r)
        r = jnp.where(n == 0, 1.0, r)
        return jnp.where(n < 0, 0.0, r).astype(x.dtype)

    return fn


def _laguerre(x, n):
    (x,) = in_compute_dtype(x)
    x, n = _poly_n(n, x)
    q0 = 1 - x
    rec = _recurrence(x, jnp.where(x == 0, 0, n - 1), q0,
                      lambda j, p, q: ((2 * (j + 1) + (1 - x)) * q - (j + 1) * p) / (j + 2))
    r = jnp.where(n == 1, q0, rec)
    r = jnp.where((n == 0) | (x == 0), 1.0, r)
    return jnp.where(n < 0, 0.0, r).astype(x.dtype)


def _legendre(x, n):
    (x,) = in_compute_dtype(x)
    x, n = _poly_n(n, x)
    rec = _recurrence(x, jnp.where(jnp.abs(x) == 1, 0, n - 1), x,
                      lambda j, p, q: ((2 * (j + 1) + 1) * x * q - (j + 1) * p) / (j + 2))
    r = jnp.where(n == 1, x, rec)
    r = jnp.where(n == 0, 1.0, r)
    r = jnp.where(jnp.abs(x) == 1, jnp.where((x > 0) | (n % 2 == 0), 1.0, -1.0), r)
    return jnp.where(n < 0, 0.0, r).astype(x.dtype)


for _name, _f in {
    "chebyshev_polynomial_t": _cheb("t", False), "chebyshev_polynomial_u": _cheb("u", False),
    "chebyshev_polynomial_v": _cheb("v", False), "chebyshev_polynomial_w": _cheb("w", False),
    "shifted_chebyshev_polynomial_t": _cheb("t", True),
    "shifted_chebyshev_polynomial_u": _cheb("u", True),
    "shifted_chebyshev_polynomial_v": _cheb("v", True),
    "shifted_chebyshev_polynomial_w": _cheb("w", True),
    "hermite_polynomial_h": _hermite(True), "hermite_polynomial_he": _hermite(False),
    "laguerre_polynomial_l": _laguerre, "legendre_polynomial_p": _legendre,
}.items():
    lower(f"special_{_name}.default", f"special_{_name}.x_scalar",
          f"special_{_name}.n_scalar")(_f)
