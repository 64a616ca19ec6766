"""What every Numba-CUDA kernel shares: the per-dtype toolkit (exact multiplies, Philox, the reset
draw, NumPy's clip), the params type generated from an env's declaration, and the one builder of an
env's reset/step/rollout kernels from its reset, physics and observe device functions.

Numerics, for every kernel in this package:

* Every constant is a NumPy scalar of the build's dtype (Numba types an untyped float literal as
  float64), and every multiply goes through ``mul``: on a GPU that is ``__nv_fmul_rn`` /
  ``__nv_dmul_rn``, which NVVM never fuses into an FMA (Numba-CUDA has no ``--fmad=false``), so each
  operation rounds exactly as the NumPy reference does. In the simulator the kernels run as Python
  on NumPy scalars, which round the same way.
* Philox words are held in uint64 and masked to 32 bits: Numba widens uint32 arithmetic to 64 bits,
  and the simulator's NumPy uint32 scalars would warn on the wrap-around Philox relies on.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numba
import numpy as np
from numba import cuda

from ...envs.base import EnvSpec, KernelParams

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # Random123's philox.h multipliers
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)  # and Weyl key increments
_MASK32, _S32, _S8 = np.uint64(0xFFFFFFFF), np.uint64(32), np.uint64(8)


def simulator() -> bool:
    return bool(numba.config.ENABLE_CUDASIM)


def _plain_mul(a, b):
    return a * b


def _plain(fn: Callable) -> Callable:
    return fn


# ---- params: one declaration (EnvSpec.field_names) -> a typed NamedTuple -------------------------
@cache
def params_type(struct_name: str, field_names: tuple[str, ...]) -> type:
    """The env's params struct as a NamedTuple type, generated from its declaration.

    Passed to a kernel by value, a NamedTuple of ``REAL`` scalars is typed by Numba as a
    ``NamedUniTuple(REAL, len(fields))``: its fields are typed constants of the launch, read by
    name (``p.gravity``) and held in the kernel's parameter space (the GPU's constant bank) like a
    CUDA ``__grid_constant__`` struct, so no upload, no pointer and no per-step copy. One class
    per env (cached here), so Numba compiles each env kernel once per dtype.
    """
    return collections.namedtuple(struct_name, field_names)


def params_value(spec: EnvSpec, params: KernelParams) -> tuple:
    """The kernel argument for ``params``: the env's NamedTuple of ``params.dtype`` scalars."""
    cls = params_type(spec.struct_name, spec.field_names)
    return cls(*(params[name] for name in spec.field_names))


# ---- the per-dtype toolkit --------------------------------------------------------------------
@dataclass(frozen=True)
class Toolkit:
    """Device functions and constants of one build dtype ``T`` (the env's REAL)."""

    T: type  # np.float32 or np.float64
    F: type  # np.float32: the policies and Gymnasium's float32 action terms
    #: Decorator of the device functions that use no ``cuda.*`` API: inlined on a GPU, plain
    #: Python in the simulator. (Functions that take cuda.local/shared arrays use cuda.jit.)
    djit: Callable
    mul: Callable  # T * T, correctly rounded, never fused
    mulf: Callable  # float32 * float32, ditto
    dmul: Callable  # float64 * float64, ditto
    zero: Any
    one: Any
    two: Any
    philox: Callable  # (c0, c1, c2, c3, k0, k1) -> (c0, c1, c2, c3), Philox4x32-10
    sym: Callable  # uint32 -> [-1, 1) in T (rng.symmetric)
    uniformf: Callable  # uint32 -> [0, 1) in float32 (rng.uniform)
    reset_draw: Callable  # (seed, i, ep) -> 4 syms: key (seed, i), counter (ep, 0, STREAM_RESET, 0)
    clip: Callable  # np.clip on non-NaN values
    vmax: Callable  # np.maximum's comparison
    vmin: Callable
    sin: Callable  # sin and cos of T: CUDA's, without libdevice's stack frame on a GPU (trig32)
    cos: Callable
    cosf: Callable  # cos of float32 (the policies' Box-Muller)


@cache
def toolkit(dtype_str: str) -> Toolkit:
    T = np.dtype(dtype_str).type
    F = np.float32
    if simulator():
        # Plain Python: the simulator's device-function wrapper only swaps in its fake ``cuda``
        # module (5 us a call), which these functions, using no ``cuda.*`` API, do not need.
        djit = _plain
        mul = mulf = dmul = _plain_mul
    else:
        from numba.cuda import libdevice

        # Inlined, so the [D] state arrays the env functions take stay in registers.
        djit = cuda.jit(device=True, forceinline=True)
        mul = libdevice.fmul_rn if T is np.float32 else libdevice.dmul_rn
        mulf = libdevice.fmul_rn
        dmul = libdevice.dmul_rn
    zero, one, two = T(0), T(1), T(2)
    two24, f_two24 = T(2.0**-24), F(2.0**-24)

    @djit
    def philox(c0, c1, c2, c3, k0, k1):
        for r in range(10):
            if r > 0:
                k0 = (k0 + _W0) & _MASK32
                k1 = (k1 + _W1) & _MASK32
            p0 = _M0 * c0
            p1 = _M1 * c2
            c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _MASK32, (p0 >> _S32) ^ c3 ^ k1, p0 & _MASK32
        return c0, c1, c2, c3

    @djit
    def sym(b):
        # 24 bits, a power-of-two scale, * 2 - 1: every step is exact, so fusing cannot change it.
        return T(b >> _S8) * two24 * two - one

    @djit
    def uniformf(b):  # the top 24 bits times 2^-24, exact in float32
        return mulf(F(b >> _S8), f_two24)

    @djit
    def reset_draw(seed, i, ep):
        c0, c1, c2, c3 = philox(np.uint64(ep), np.uint64(0), np.uint64(0), np.uint64(0),
                                np.uint64(seed), np.uint64(i))  # fmt: skip
        return sym(c0), sym(c1), sym(c2), sym(c3)

    @djit
    def clip(x, lo, hi):  # np.clip on non-NaN values: minimum(maximum(x, lo), hi)
        x = lo if x < lo else x  # noqa: FURB136 - NumPy's comparison, whatever max() does with NaN
        return hi if x > hi else x  # noqa: FURB136

    @djit
    def vmax(a, b):
        return a if a > b else b  # noqa: FURB136

    @djit
    def vmin(a, b):
        return a if a < b else b  # noqa: FURB136

    if simulator():
        sinf, cosf = math.sin, math.cos
    else:
        from numba.cuda import libdevice

        sinf, cosf, _ = trig32(djit, libdevice.float_as_int, libdevice.sincosf, dmul)
    sin, cos = (sinf, cosf) if T is np.float32 else (math.sin, math.cos)
    return Toolkit(T=T, F=F, djit=djit, mul=mul, mulf=mulf, dmul=dmul, zero=zero, one=one, two=two,
                   philox=philox, sym=sym, uniformf=uniformf, reset_draw=reset_draw, clip=clip,
                   vmax=vmax, vmin=vmin, sin=sin, cos=cos, cosf=cosf)  # fmt: skip


# ---- float32 sin and cos without libdevice's stack frame ------------------------------------------
#: Where libdevice's sinf / cosf / sincosf switch to their slow (Payne-Hanek) reduction.
TRIG_LARGE = np.float32(105615.0)
#: 2/pi = 0.a2f9836e 4e441529 fc2757d1 f534ddc0 db629599 3c439041..., least significant word first.
_2OPI = tuple(np.uint64(w) for w in (0x3C439041, 0xDB629599, 0xF534DDC0, 0xFC2757D1, 0x4E441529, 0xA2F9836E))
_U0, _U1, _U2, _U3, _U23, _U30, _U31 = (np.uint64(v) for v in (0, 1, 2, 3, 23, 30, 31))
_U5, _U8, _U128, _U255, _TOP = np.uint64(5), np.uint64(8), np.uint64(128), np.uint64(255), np.uint64(0x80000000)
_PIO2_2M64 = np.float64(float.fromhex("0x1.921fb54442d19p-64"))  # pi/2 * 2^-64


def trig32(djit: Callable, float_bits: Callable, sincosf: Callable, dmul: Callable) -> tuple[Callable, Callable, Callable]:
    """float32 sin and cos as kernels/cuda/pk_common.cuh's pk_sin / pk_cos: libdevice's sinf and cosf below
    |x| = 105615 and, from there, a Payne-Hanek reduction held in registers made to give libdevice's reduced
    argument, then libdevice's polynomials through sincosf of it. Why: libdevice's slow reduction keeps a
    uint32[7] read at a run-time index, which ptxas leaves in a 32-byte stack frame wherever a division's
    called slow path comes first, as in every rollout; behind ``abs(x) >= TRIG_LARGE`` NVVM drops it.
    ``float_bits`` (float32 -> its bits as an integer), ``sincosf`` and ``dmul`` are libdevice's on a GPU;
    tests/test_cuda_trig.py runs the same functions as Python on NumPy scalars."""
    c0, c1, c2, c3, c4, c5 = _2OPI
    f32 = np.float32

    @djit
    def reduce(x):
        # x = (q + f) pi/2, |f| <= 1/2, r = f pi/2: the 7 words of the significand times 192 bits of 2/pi,
        # 2/pi's words moved up j = e / 32 places (selects of constants, no array), so the 3 words the exponent
        # picks are the last 3 made; shifted left by e % 32. Every value below 2^32 unless a product.
        b = np.uint64(float_bits(x)) & _MASK32
        m = ((b << _U8) | _TOP) & _MASK32
        e = ((b >> _U23) & _U255) - _U128  # 15 .. 127 (127: inf)
        j, sh = e >> _U5, e & np.uint64(31)
        p = m * (c0 if j == _U0 else _U0)
        p = m * (c1 if j == _U0 else c0 if j == _U1 else _U0) + (p >> _S32)
        p = m * (c2 if j == _U0 else c1 if j == _U1 else c0 if j == _U2 else _U0) + (p >> _S32)
        p = m * (c3 if j == _U0 else c2 if j == _U1 else c1 if j == _U2 else c0) + (p >> _S32)
        p = m * (c4 if j == _U0 else c3 if j == _U1 else c2 if j == _U2 else c1) + (p >> _S32)
        low = p & _MASK32
        p = m * (c5 if j == _U0 else c4 if j == _U1 else c3 if j == _U2 else c2) + (p >> _S32)
        mid = p & _MASK32
        p = m * (_U0 if j == _U0 else c5 if j == _U1 else c4 if j == _U2 else c3) + (p >> _S32)
        top = p & _MASK32
        hi0 = ((top << sh) & _MASK32) + (mid >> (_S32 - sh))  # sh = 0: mid >> 32 is 0
        lo0 = ((mid << sh) & _MASK32) + (low >> (_S32 - sh))
        hi = ((hi0 << _U2) & _MASK32) + (lo0 >> _U30)
        lo = (lo0 << _U2) & _MASK32
        up = hi >> _U31  # the fraction is 1/2 or more: q rounds up, f is the complement
        q = ((hi0 >> _U30) + up) & _U3
        neg = b >> _U31
        if neg:
            q = (np.uint64(4) - q) & _U3  # -q mod 4, with no wrap-around
        if up:
            hi = ~hi & _MASK32
            lo = ~lo & _MASK32
        f = f32(dmul(np.float64(np.int64((hi << _S32) | lo)), _PIO2_2M64))
        r = -f if neg ^ up else f
        if math.isinf(x):
            return _U0, x * f32(0.0)
        return q, r

    @djit
    def poly(i, r):
        # libdevice's quadrant step: the cos polynomial at odd i, the sin one else, negated at i & 2 as
        # z * -1 + 0 (0 - z: a zero comes out +0); sincosf of |r| <= pi/4 is those polynomials.
        if abs(r) >= TRIG_LARGE:  # never: lets NVVM drop sincosf's slow reduction
            return f32(0.0)
        s, c = sincosf(r)
        z = c if i & _U1 else s
        return f32(0.0) - z if i & _U2 else z

    @djit
    def sin(x):
        if abs(x) >= TRIG_LARGE:
            q, r = reduce(x)
            return poly(q, r)
        return math.sin(x)

    @djit
    def cos(x):
        if abs(x) >= TRIG_LARGE:
            q, r = reduce(x)
            return poly((q + _U1) & _U3, r)
        return math.cos(x)

    return sin, cos, reduce


def kernel(name: str) -> Callable:
    """``cuda.jit`` under the ABI's kernel name (``pk_cartpole_step``), as profilers and PTX show it."""

    def decorate(fn: Callable) -> Any:
        fn.__name__ = fn.__qualname__ = name
        return cuda.jit(fn)

    return decorate


# ---- the generic env kernels (kernels/README.md: reset, step and autoreset, fused rollouts) -----
@dataclass(frozen=True)
class EnvFunctions:
    """An env's device functions, over a local ``[D]`` state array ``s`` and its params ``p``."""

    reset: Callable  # (r, p, s): r = 4 syms in [-1, 1); writes s[0 .. D-1]
    physics: Callable  # (s, action, p) -> (reward, terminated): one step of s in place; action: a scalar,
    # or the env's [K] row of a K-wide Box action
    observe: Callable  # (s, out, row): writes out[row, 0 .. obs_dim-1]


def bounded_reset(k: Toolkit) -> Callable:
    """The reset of the envs whose four state variables each start uniform in ``+-p.reset_bound``
    (CartPole, Acrobot): one device function for both, as their references share one draw."""
    mul = k.mul

    @k.djit
    def reset(r, p, s):
        s[0] = mul(p.reset_bound, r[0])
        s[1] = mul(p.reset_bound, r[1])
        s[2] = mul(p.reset_bound, r[2])
        s[3] = mul(p.reset_bound, r[3])

    return reset


@dataclass(frozen=True)
class EnvKernels:
    """``pk_<env>_reset|step|rollout``, arguments in the ABI's order (kernels/README.md)."""

    reset: Any
    step: Any
    rollout: Any


def env_kernels(spec: EnvSpec, fns: EnvFunctions, act: Callable, k: Toolkit) -> EnvKernels:
    """The reset, step and rollout kernels of one env: one generic body each over the ``[D, N]`` state.

    ``D`` (the env's state size) and ``obs_dim`` are compile-time constants of the build, so the
    loops that move the state between the ``[D, N]`` array and the local ``[D]`` array unroll and
    the state lives in registers (the env functions are inlined).
    """
    D, obs_dim, T, zero, reset_draw, djit = spec.state_dim, spec.obs_dim, k.T, k.zero, k.reset_draw, k.djit
    env_reset, physics, observe = fns.reset, fns.physics, fns.observe
    stem = f"pk_{spec.kernel}"

    @djit
    def advance(s, t, ep, nr, action, o, o_row, fo, fo_row, p, seed, max_steps, autoreset_mode, i):
        # One step of state s (in place) and the counters held by the caller, with either autoreset:
        # the one code path of the step and rollout kernels. Writes the obs the env is at afterwards
        # to o[o_row] and the obs the step reached, before any autoreset, to fo[fo_row].
        r = zero
        term = False
        trunc = False
        if autoreset_mode != 0 and nr:
            # next_step: an env that finished on the previous call resets now instead of stepping.
            ep = np.uint32(ep + np.uint32(1))
            env_reset(reset_draw(seed, i, ep), p, s)
            t = 0
            nr = False
        else:
            r, term = physics(s, action, p)
            t += 1
            trunc = t >= max_steps  # both flags may be set, as Gymnasium's TimeLimit does
            if autoreset_mode == 0:
                # same_step: fo keeps the obs the step reached; o is the reset obs where it finished.
                observe(s, fo, fo_row)
                if term or trunc:
                    ep = np.uint32(ep + np.uint32(1))
                    env_reset(reset_draw(seed, i, ep), p, s)
                    t = 0
            else:
                nr = term or trunc
        observe(s, o, o_row)
        if autoreset_mode != 0:
            observe(s, fo, fo_row)
        return t, ep, nr, r, term, trunc

    @kernel(f"{stem}_reset")
    def reset(state, steps, episodes, needs_reset, obs, params, seed, fresh, n):
        i = cuda.grid(1)
        if i < n:
            ep = np.uint32(0) if fresh else np.uint32(episodes[i] + np.uint32(1))
            episodes[i] = ep
            s = cuda.local.array(D, T)
            env_reset(reset_draw(seed, i, ep), params, s)
            for j in range(D):
                state[j, i] = s[j]
            steps[i] = 0
            needs_reset[i] = False
            observe(s, obs, i)

    @kernel(f"{stem}_step")
    def step(state, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated, truncated, params, seed,
             max_steps, autoreset_mode, n):  # fmt: skip
        i = cuda.grid(1)
        if i < n:
            s = cuda.local.array(D, T)
            for j in range(D):
                s[j] = state[j, i]
            # the traffic of kernels/README.md's "Bytes per env-step": the episode counter written only where the
            # env reset, needs_reset read and written only in next_step mode
            ep0 = episodes[i]
            nr0 = needs_reset[i] if autoreset_mode != 0 else False
            t, ep, nr, r, term, trunc = advance(s, steps[i], ep0, nr0, actions[i], obs, i,
                                                final_obs, i, params, seed, max_steps, autoreset_mode, i)  # fmt: skip
            for j in range(D):
                state[j, i] = s[j]
            steps[i] = t
            if ep != ep0:
                episodes[i] = ep
            if autoreset_mode != 0:
                needs_reset[i] = nr
            reward[i] = r
            terminated[i] = term
            truncated[i] = trunc

    @kernel(f"{stem}_rollout")
    def rollout(state, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params, policy,
                policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated, out_truncated,
                out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, n):  # fmt: skip
        # Steps t0 .. t0 + t_count - 1 for env i; the out arrays are flattened to rows t * n + i. State
        # and counters stay in registers, the step buffers are stored at the end so env.step continues.
        # The obs acted on first is the env's obs buffer, as on the host path.
        i = cuda.grid(1)
        if i < n and t_count > 0:
            s = cuda.local.array(D, T)
            for j in range(D):
                s[j] = state[j, i]
            o = cuda.local.array((1, obs_dim), T)  # the obs the policy acts on, as a one-row obs array
            for c in range(obs_dim):
                o[0, c] = obs[i, c]
            t = steps[i]
            ep = episodes[i]
            nr = needs_reset[i]
            r = zero
            term = False
            trunc = False
            row = i
            for tt in range(t0, t0 + t_count):
                row = tt * n + i
                # The obs stored before the policy runs (pk_common.cuh's order): with an MLP, o need not stay
                # in registers beside it.
                for c in range(obs_dim):
                    out_obs[row, c] = o[0, c]
                # The policy writes its action to out_actions[row] and the step reads it there: a scalar, or
                # a K-wide Box's row (a device function cannot return a view; see policy.make_act).
                act(policy, policy_kind, hidden, o, seed, i, ep, t, out_actions, row)
                a = out_actions[row]
                t, ep, nr, r, term, trunc = advance(s, t, ep, nr, a, o, 0, out_final_obs, row, params, seed, max_steps,
                                                    autoreset_mode, i)  # fmt: skip
                out_rewards[row] = r
                out_terminated[row] = term
                out_truncated[row] = trunc
            for j in range(D):
                state[j, i] = s[j]
            steps[i] = t
            episodes[i] = ep
            needs_reset[i] = nr
            for c in range(obs_dim):
                obs[i, c] = o[0, c]
                final_obs[i, c] = out_final_obs[row, c]
            reward[i] = r
            terminated[i] = term
            truncated[i] = trunc

    return EnvKernels(reset=reset, step=step, rollout=rollout)
