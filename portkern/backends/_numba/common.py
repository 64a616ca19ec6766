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

    return Toolkit(T=T, F=F, djit=djit, mul=mul, mulf=mulf, dmul=dmul, zero=zero, one=one, two=two,
                   philox=philox, sym=sym, uniformf=uniformf, reset_draw=reset_draw, clip=clip,
                   vmax=vmax, vmin=vmin)  # fmt: skip


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
