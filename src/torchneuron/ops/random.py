"""Random ops: uniform/normal/bernoulli/random_/randperm/multinomial/dropout, ...

Every lowering draws with :func:`rng_key` (the per-device generator state:
seed + offset, advanced once per op call), so ``torch.manual_seed`` /
``torch.neuron.manual_seed`` reproduce streams and ``get_rng_state`` /
``set_rng_state`` round-trip them.  The streams are not CPU's (different
generator), but every distribution, range and dtype rule is PyTorch's.

Argument checks that depend only on Python arguments and the dtype (bounds of
``from``/``to``, ``p`` in [0, 1], dtype support) reproduce PyTorch's wording by
running PyTorch's own CPU kernel on a one-element scratch tensor with a
private generator, once per executable build (never per call, never on the
tensor's data).  Checks that depend on tensor values (``std >= 0`` for
``normal(mean, std)``, ``0 <= p <= 1`` for ``bernoulli(p)``, a valid
distribution for ``multinomial``) read one flag back from the device before
sampling, as PyTorch's CPU (and for ``normal``, CUDA) kernels do.

A ``generator=`` that is not None is refused: ``torch.Generator("neuron")``
cannot be constructed by a Python backend, and a CPU generator does not drive
a device stream (PyTorch raises the same error on CUDA).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch
from jax import lax

from ..numerics import jdtype, opmath, real_dtype, scalar_type_name, tdtype
from ..lowering import lower, meta_kernel, out_dtype, out_meta, read_back, rng_key

aten = torch.ops.aten

_VGEN = torch.Generator()  # scratch generator for argument validation only
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


# ---------------------------------------------------------------- helpers
def no_generator(generator):
    """PyTorch's error for a generator of another device (a neuron generator cannot be
    made by a Python backend, so any generator is refused)."""
    if generator is not None:
        dev = getattr(generator, "device", None)
        kind = dev.type if dev is not None else type(generator).__name__
        raise RuntimeError(f"Expected a 'neuron' device type for generator but found '{kind}'")


def _tdtype():
    """The torch dtype of the (first) result / mutated self."""
    m = out_meta()
    if isinstance(m, (list, tuple)):
        m = m[0]
    return m.dtype


def _validate(fn, dtype):
    """Run PyTorch's CPU kernel on a 1-element scratch tensor: its argument checks and
    dtype dispatch raise PyTorch's own errors (and warnings)."""
    fn(torch.empty(1, dtype=dtype))


def _compute_float(dt):
    """The float type to draw in for a result of jax dtype dt (>= float32)."""
    dt = jnp.dtype(dt)
    if dt in (jnp.dtype(jnp.float64), jnp.dtype(jnp.complex128)):
        return jnp.float64
    return jnp.float32


def _open_uniform(key, shape, dt):
    """Uniform in the open interval (0, 1), in float dtype dt."""
    tiny = jnp.finfo(dt).tiny
    return jax.random.uniform(key, shape, dt, minval=tiny, maxval=1.0)


def _kw_from(from_, kw, default):
    if "from" in kw:
        from_ = kw.pop("from")
    if kw:
        raise TypeError(f"unexpected arguments {sorted(kw)}")
    return default if from_ is None else from_


# ---------------------------------------------------------------- uniform / normal
def _uniform_values(key, shape, dt, lo, hi):
    dt = jnp.dtype(dt)
    if jnp.issubdtype(dt, jnp.complexfloating):
        rd = real_dtype(dt)
        parts = jax.random.uniform(key, shape + (2,), rd, minval=lo, maxval=hi)
        return lax.complex(parts[..., 0], parts[..., 1])
    return jax.random.uniform(key, shape, dt, minval=lo, maxval=hi)


@lower("uniform.default", "uniform_.default", random=True)
def uniform(self, from_=0.0, to=1.0, *, generator=None, **kw):
    from_ = _kw_from(from_, kw, 0.0)
    no_generator(generator)
    tdt = _tdtype()
    _validate(lambda t: t.uniform_(from_, to, generator=_VGEN), tdt)
    if tdt.is_complex:
        lo, hi = from_, to
    else:
        fi = torch.finfo(tdt)
        lo = min(max(from_, fi.min), fi.max)
        hi = max(min(to, fi.max), fi.min)
    return _uniform_values(rng_key(), tuple(self.shape), self.dtype, lo, hi)


def _normal_values(key, shape, dt, mean, std):
    """mean + std * N(0, 1) drawn in (at least) float32, cast to dt.  Complex: real and
    imaginary parts each mean + std/sqrt(2) * N(0, 1), as PyTorch."""
    dt = jnp.dtype(dt)
    if jnp.issubdtype(dt, jnp.complexfloating):
        rd = real_dtype(dt)
        z = jax.random.normal(key, shape + (2,), rd)
        v = jnp.asarray(mean, rd) + jnp.asarray(std / math.sqrt(2.0), rd) * z
        return lax.complex(v[..., 0], v[..., 1])
    cd = _compute_float(dt)
    z = jax.random.normal(key, shape, cd)
    return (jnp.asarray(mean, cd) + jnp.asarray(std, cd) * z).astype(dt)


@lower("normal_.default", "normal_functional.default", random=True)
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    no_generator(generator)
    tdt = _tdtype()
    _validate(lambda t: t.normal_(mean, std, generator=_VGEN), tdt)
    return _normal_values(rng_key(), tuple(self.shape), self.dtype, mean, std)


def _normal_tensors(mean, std):
    dt = out_dtype()
    shape = tuple(out_meta().shape)
    key = rng_key()
    if jnp.issubdtype(dt, jnp.complexfloating):
        rd = real_dtype(dt)
        z = jax.random.normal(key, shape + (2,), rd)
        m = jnp.broadcast_to(jnp.asarray(mean), shape)
        s = jnp.broadcast_to(jnp.asarray(std), shape)
        if jnp.issubdtype(m.dtype, jnp.complexfloating):
            mr, mi = jnp.real(m).astype(rd), jnp.imag(m).astype(rd)
        else:
            mr = mi = m.astype(rd)
        s = jnp.abs(s).astype(rd) / jnp.sqrt(jnp.asarray(2.0, rd))
        return lax.complex(mr + s * z[..., 0], mi + s * z[..., 1])
    cd = _compute_float(dt)
    z = jax.random.normal(key, shape, cd)
    return (jnp.asarray(mean).astype(cd) + jnp.asarray(std).astype(cd) * z).astype(dt)


@lower("normal.Tensor_Tensor", random=True, check=lambda *a, **k: _check_normal(*a, **k))
def normal_tt(mean, std, *, generator=None):
    no_generator(generator)
    return _normal_tensors(mean, std)


@lower("normal.Tensor_float", random=True)
def normal_tf(mean, std=1.0, *, generator=None):
    no_generator(generator)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _normal_tensors(mean, std)


@lower("normal.float_Tensor", random=True, check=lambda *a, **k: _check_normal(*a, **k))
def normal_ft(mean, std, *, generator=None):
    no_generator(generator)
    return _normal_tensors(mean, std)


@lower("normal.float_float", random=True)
def normal_ff(mean, std, size, *, generator=None, dtype=None, layout=None, device=None,
              pin_memory=None):
    no_generator(generator)
    tdt = _tdtype()
    _validate(lambda t: t.normal_(mean, std, generator=_VGEN), tdt)
    return _normal_values(rng_key(), tuple(out_meta().shape), out_dtype(), mean, std)


@lower("log_normal.default", "log_normal_.default", random=True)
def log_normal(self, mean=1.0, std=2.0, *, generator=None):
    no_generator(generator)
    _validate(lambda t: t.log_normal_(mean, std, generator=_VGEN), _tdtype())
    cd = _compute_float(self.dtype)
    z = jax.random.normal(rng_key(), tuple(self.shape), cd)
    return jnp.exp(jnp.asarray(mean, cd) + jnp.asarray(std, cd) * z).astype(self.dtype)


@lower("exponential.default", "exponential_.default", random=True)
def exponential(self, lambd=1.0, *, generator=None):
    no_generator(generator)
    _validate(lambda t: t.exponential_(lambd, generator=_VGEN), _tdtype())
    cd = _compute_float(self.dtype)
    u = _open_uniform(rng_key(), tuple(self.shape), cd)
    # u in (0, 1): -log(u) > 0, never 0 or inf
    return (-jnp.log(u) / jnp.asarray(lambd, cd)).astype(self.dtype)


@lower("geometric.default", "geometric_.default", random=True)
def geometric(self, p, *, generator=None):
    no_generator(generator)
    _validate(lambda t: t.geometric_(p, generator=_VGEN), _tdtype())
    u = _open_uniform(rng_key(), tuple(self.shape), jnp.float64)
    v = jnp.ceil(jnp.log(u) / jnp.log1p(jnp.asarray(-p, jnp.float64)))
    v = jnp.maximum(v, 1.0)  # trials until the first success: >= 1
    dt = jnp.dtype(self.dtype)
    if jnp.issubdtype(dt, jnp.integer):
        v = jnp.minimum(v, float(jnp.iinfo(dt).max))
    return v.astype(dt)


@lower("cauchy.default", "cauchy_.default", random=True)
def cauchy(self, median=0.0, sigma=1.0, *, generator=None):
    no_generator(generator)
    _validate(lambda t: t.cauchy_(median, sigma, generator=_VGEN), _tdtype())
    cd = _compute_float(self.dtype)
    u = _open_uniform(rng_key(), tuple(self.shape), cd)
    return (jnp.asarray(median, cd) + jnp.asarray(sigma, cd) * jnp.tan(jnp.pi * (u - 0.5))).astype(
        self.dtype)


# ---------------------------------------------------------------- bernoulli
def _bernoulli_mask(key, shape, p):
    """uniform [0, 1) < p (float32 draws: 2^-24 resolution, and cheap on accelerators)."""
    if isinstance(p, (int, float)):
        return jax.random.uniform(key, shape, jnp.float32) < p
    p = jnp.asarray(p)
    cd = _compute_float(p.dtype)
    return jax.random.uniform(key, shape, cd) < jnp.broadcast_to(p.astype(cd), shape)


@lower("bernoulli_.float", "bernoulli.p", random=True)
def bernoulli_float(self, p=0.5, *, generator=None):
    no_generator(generator)
    _validate(lambda t: t.bernoulli_(p, generator=_VGEN), _tdtype())
    return _bernoulli_mask(rng_key(), tuple(self.shape), p).astype(self.dtype)


def _check_p_dtype(pdt, tdt):
    if not pdt.is_floating_point:
        raise NotImplementedError(f'"bernoulli_tensor_cpu_p_" not implemented for '
                                  f"'{scalar_type_name(pdt)}'")
    if tdt.is_complex:
        raise NotImplementedError(f'"bernoulli_tensor_cpu_self_" not implemented for '
                                  f"'{scalar_type_name(tdt)}'")


@lower("bernoulli.Tensor", "bernoulli_.Tensor", random=True,
       check=lambda *a, **k: _check_bernoulli_tensor(*a, **k))
def bernoulli_tensor(self, p, *, generator=None):
    no_generator(generator)
    p = jnp.asarray(p)
    return _bernoulli_mask(rng_key(), tuple(self.shape), p).astype(self.dtype)


@lower("bernoulli.default", random=True, check=lambda *a, **k: _check_bernoulli(*a, **k))
def bernoulli(self, *, generator=None):
    no_generator(generator)
    return _bernoulli_mask(rng_key(), tuple(self.shape), self).astype(self.dtype)


# ---------------------------------------------------------------- random_ / randint
def _np_cast_int(v, dt):
    """static_cast<int64_t>(static_cast<scalar_t>(v)) as C++ does it (through float for
    half/bfloat16)."""
    if dt == torch.float64:
        return int(float(v))
    f = np.array(v, np.int64).astype(np.float32)
    if dt == torch.float16:
        f = f.astype(np.float16)
    elif dt == torch.bfloat16:
        f = f.astype(ml_dtypes.bfloat16)
    return int(np.array(f, np.float64))


def _digits(dt):
    return {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}[dt]


def _update_from(frm, dt):
    fp1 = _np_cast_int(frm + 1, dt)
    if fp1 < frm:
        f_ = abs(frm + 1)
        n = f_.bit_length() - 1 if f_ else 0
        frm = fp1 + (1 << (n - _digits(dt) + 1))
    return frm


def _update_to(to, dt):
    tm1 = _np_cast_int(to - 1, dt)
    if tm1 >= to:
        t_ = abs(to - 1)
        n = t_.bit_length() - 1 if t_ else 0
        to = tm1 - (1 << (n - _digits(dt) + 1))
    return to


def _int_range(frm, to, tdt):
    """(base, range) of PyTorch's random_(from, to): values base + [0, range); range None
    means the full 64-bit range."""
    if to is not None:
        if tdt.is_floating_point:
            frm, to = _update_from(frm, tdt), _update_to(to, tdt)
        return frm, to - frm
    if frm == _INT64_MIN:
        return frm, None
    if tdt.is_floating_point:
        to_inc = min(1 << _digits(tdt), _INT64_MAX)
        frm = _update_from(frm, tdt)
    elif tdt == torch.bool:
        to_inc = 1
    else:
        to_inc = int(torch.iinfo(tdt).max)
    return frm, to_inc - frm + 1


def _random_values(key, shape, dt, base, rng):
    bits = jax.random.bits(key, shape, jnp.uint64)
    if rng is not None:
        bits = bits % jnp.uint64(rng) + jnp.uint64(base & 0xFFFFFFFFFFFFFFFF)
    v = lax.bitcast_convert_type(bits, jnp.int64)
    dt = jnp.dtype(dt)
    if dt == jnp.bool_:
        return v != 0
    return v.astype(dt)


@lower("random.from", "random_.from", random=True)
def random_from(self, from_=None, to=None, *, generator=None, **kw):
    frm = int(_kw_from(from_, kw, 0))
    no_generator(generator)
    tdt = _tdtype()
    to = None if to is None else int(to)
    _validate(lambda t: t.random_(frm, to, generator=_VGEN), tdt)
    base, rng = _int_range(frm, to, tdt)
    return _random_values(rng_key(), tuple(self.shape), self.dtype, base, rng)


@lower("random.to", "random_.to", random=True)
def random_to(self, to, *, generator=None):
    no_generator(generator)
    tdt = _tdtype()
    _validate(lambda t: t.random_(to, generator=_VGEN), tdt)
    base, rng = _int_range(0, int(to), tdt)
    return _random_values(rng_key(), tuple(self.shape), self.dtype, base, rng)


@lower("random.default", "random_.default", random=True)
def random_(self, *, generator=None):
    no_generator(generator)
    tdt = _tdtype()
    _validate(lambda t: t.random_(generator=_VGEN), tdt)
    base, rng = _int_range(0, None, tdt)
    return _random_values(rng_key(), tuple(self.shape), self.dtype, base, rng)


# ---------------------------------------------------------------- randperm
def _check_randperm(n, tdt):
    torch.scalar_tensor(n - 1 if n > 0 else n, dtype=tdt)  # "value cannot be converted ..."
    lim = {torch.float16: ((1 << 11) + 1, "2049 for Half"),
           torch.float32: ((1 << 24) + 1, "2^24+1 for Float"),
           torch.float64: ((1 << 53) + 1, "2^53+1 for Double")}.get(tdt)
    if lim is not None and n > lim[0]:
        raise RuntimeError(f"n cannot be greater than {lim[1]} type.")


@lower("randperm.default", "randperm.generator", random=True)
def randperm(n, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    no_generator(generator)
    tdt = _tdtype()
    n = int(n)
    _check_randperm(n, tdt)
    if n == 0:
        return jnp.zeros((0,), out_dtype())
    perm = jax.random.permutation(rng_key(), n)
    return perm.astype(out_dtype())


# ---------------------------------------------------------------- multinomial
@lower("multinomial.default", random=True,
       normalize=lambda *a, **k: _normalize_multinomial(*a, **k))
def multinomial(self, num_samples, replacement=False, *, generator=None):
    no_generator(generator)
    _check_multinomial_static(self.shape, self.dtype, num_samples, replacement)
    p = self if self.ndim == 2 else self[None]
    rows, ncat = p.shape
    key = rng_key()
    n = int(num_samples)
    if rows == 0:
        out = jnp.zeros((0, n), jnp.int64)
    elif not replacement or n == 1:
        # Gumbel top-k, as PyTorch: argmax / topk of p / q with q ~ Exp(1)
        cd = _compute_float(p.dtype)
        q = -jnp.log(_open_uniform(key, p.shape, cd))
        score = p.astype(cd) / q
        if n == 1:
            out = jnp.argmax(score, axis=-1)[:, None]
        else:
            out = lax.top_k(score, n)[1]
    else:
        # inverse CDF: zero-probability categories have an empty interval
        pd = p.astype(jnp.float64)
        cdf = jnp.cumsum(pd, axis=-1)
        u = jax.random.uniform(key, (rows, n), jnp.float64)
        v = u * cdf[:, -1:]
        idx = jax.vmap(lambda c, x: jnp.searchsorted(c, x, side="right"))(cdf, v)
        last_nz = (ncat - 1) - jnp.argmax((pd > 0)[:, ::-1], axis=-1)
        out = jnp.minimum(idx, last_nz[:, None])
    out = out.astype(jnp.int64)
    return out if self.ndim == 2 else out[0]


def _check_multinomial_static(shape, jdt, n, replacement):
    if not (1 <= len(shape) <= 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not jnp.issubdtype(jdt, jnp.floating):
        raise RuntimeError("multinomial only supports floating-point dtypes for input, got: "
                           f"{scalar_type_name(tdtype(jdt))}")
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    ncat = shape[-1]
    if not replacement and n > ncat:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if ncat > (1 << 24):
        raise RuntimeError("number of categories cannot exceed 2^24")


# ---------------------------------------------------------------- dropout

def _times_scale(x, scale):
    """x * scale with PyTorch's opmath (a double scalar times a tensor)."""
    dt = jnp.dtype(x.dtype)
    if jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_:
        return x * scale
    cd = opmath(dt)
    return (x.astype(cd) * jnp.asarray(scale, cd)).astype(dt)


@lower("native_dropout.default", random=True)
def native_dropout(x, p, train=None):
    shape = tuple(x.shape)
    if x.size == 0:
        return x, jnp.zeros(shape, out_dtype(1))
    if train is not None and not train:
        return x, jnp.ones(shape, jnp.bool_)
    p1m = 1.0 - p
    _validate(lambda t: t.bernoulli_(p1m, generator=_VGEN), torch.bool)
    scale = 0.0 if p1m == 0 else 1.0 / p1m
    mask = _bernoulli_mask(rng_key(), shape, p1m)
    return _times_scale(x * mask.astype(x.dtype), scale), mask


@lower("native_dropout_backward.default")
def native_dropout_backward(grad_output, mask, scale):
    dt = out_dtype()
    g = grad_output.astype(dt) * jnp.asarray(mask).astype(dt)
    return _times_scale(g, scale)


# ---------------------------------------------------------------- poisson / gamma
def _need_float(kernel, x):
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{scalar_type_name(tdtype(x.dtype))}'")


@lower("poisson.default", random=True, check=lambda *a, **k: _check_poisson(*a, **k))
def poisson(self, generator=None):
    no_generator(generator)
    _need_float("poisson_cpu", self)
    lam = self.astype(jnp.float64)
    v = jax.random.poisson(rng_key(), lam, tuple(self.shape), jnp.int64)
    return v.astype(self.dtype)


@functools.lru_cache(maxsize=None)
def _empty_categories_msg():
    """CPU's error for multinomial over zero categories (its wording differs between torch
    releases: a min() error on 2.11, an aminmax() one on 2.13)."""
    try:
        torch.multinomial(torch.ones(1, 0), 1, True)
    except RuntimeError as e:
        return str(e)
    return "multinomial(): there are no categories to sample from"


# torch 2.11 has no meta kernel for _standard_gamma (2.13 has)
meta_kernel("_standard_gamma", lambda self, generator=None: torch.empty_like(self))


@lower("_standard_gamma.default", random=True)
def standard_gamma(self, generator=None):
    no_generator(generator)
    _need_float("gamma_cpu", self)
    cd = _compute_float(self.dtype)
    v = jax.random.gamma(rng_key(), self.astype(cd), tuple(self.shape), cd)
    # PyTorch clamps samples to the smallest normal value (also for alpha <= 0 or NaN)
    tiny = jnp.asarray(jnp.finfo(self.dtype).tiny, cd)
    return jnp.where(v >= tiny, v, tiny).astype(self.dtype)


# ---------------------------------------------------------------- value checks (eager)
# Checks on tensor values: one flag computed on the device, read back before the
# sampling executable runs (the ``check`` extras of these overloads; compiled graphs
# use the lowerings without them).
def _device_flag(t, what, arg=None):
    """An int computed on the device from t's values (a small jitted reduction)."""
    return int(read_back(_FLAGS[what], t, static=(arg,)))


def _flag_std(x, _):
    return jnp.any(~(x >= 0)).astype(jnp.int32)


def _flag_p(x, _):
    return jnp.any(~((x >= 0) & (x <= 1))).astype(jnp.int32)


def _first_nonzero(codes):
    codes = codes.reshape(-1)
    i = jnp.argmax(codes != 0)
    return codes[i]


def _flag_multinomial(p, fast):
    p2 = p if p.ndim == 2 else p[None]
    acc = jnp.float64
    if fast:
        bad = ~(jnp.all(p2 < jnp.inf) & jnp.all(p2 >= 0))
        zero = jnp.any(jnp.sum(p2.astype(acc), axis=-1) == 0)
        return jnp.where(bad, 1, jnp.where(zero, 3, 0)).astype(jnp.int32)
    # PyTorch's with-replacement kernel: row by row, element checks then the sum
    e = jnp.where(~(p2 >= 0), 2, jnp.where(~jnp.isfinite(p2), 4, 0))
    row_e = jax.vmap(_first_nonzero)(e)
    row_sum_bad = ~(jnp.sum(p2.astype(acc), axis=-1) > 0)
    rows = jnp.where(row_e != 0, row_e, jnp.where(row_sum_bad, 3, 0))
    return _first_nonzero(rows).astype(jnp.int32)


def _flag_rate(x, _):
    return jnp.any(~(x >= 0)).astype(jnp.int32)


_FLAGS = {"std": _flag_std, "p": _flag_p, "multinomial": _flag_multinomial, "rate": _flag_rate}

_MULTINOMIAL_MSG = {
    1: "probability tensor contains either `inf`, `nan` or element < 0",
    2: "invalid multinomial distribution (encountering probability entry < 0)",
    3: "invalid multinomial distribution (sum of probabilities <= 0)",
    4: "invalid multinomial distribution (encountering probability entry = infinity or NaN)",
}
_P_MSG = ("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
          "message be improved?  If so, please report an enhancement request to PyTorch.)")


def _is_dev(t):
    return isinstance(t, torch.Tensor) and t.device.type == "neuron"


def _check_std(std):
    if _is_dev(std) and std.numel() and _device_flag(std, "std"):
        raise RuntimeError("normal expects all elements of std >= 0.0")


def _check_p(self, p):
    _check_p_dtype(p.dtype, self.dtype)
    if _is_dev(p) and p.numel() and _device_flag(p, "p"):
        raise RuntimeError(_P_MSG)


def _check_normal(mean, std, *, generator=None):
    _check_std(std)


def _check_bernoulli_tensor(self, p, *, generator=None):
    _check_p(self, p)


def _check_bernoulli(self, *, generator=None):
    _check_p(self, self)


def _normalize_multinomial(self, num_samples, replacement=False, *, generator=None):
    no_generator(generator)
    n = int(num_samples)
    _check_multinomial_static(tuple(self.shape), jdtype(self.dtype), n, replacement)
    if self.shape[-1] == 0:
        raise RuntimeError(_empty_categories_msg())
    if self.numel():
        code = _device_flag(self, "multinomial", bool(not replacement or n == 1))
        if code:
            raise RuntimeError(_MULTINOMIAL_MSG[code])
    return (self, n, replacement), {"generator": generator}


def _check_poisson(self, generator=None):
    if _is_dev(self) and self.numel() and self.dtype.is_floating_point and \
            _device_flag(self, "rate"):
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
