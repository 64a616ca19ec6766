"""The Numba backend: the CUDA kernels written with Numba-CUDA, on a GPU or in Numba's CUDA simulator."""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import envs as _envs
from ..envs.base import EnvSpec
from ..policy import MAX_WIDTH
from .base import AUTORESET_MODES, Backend, BackendUnavailable, EnvBuffers, Probe
from .registry import register

try:
    import numba
    from numba import cuda
except ImportError:
    numba = cuda = None
    _IMPORT_ERROR = "numba-cuda is not installed: pip install 'portkern[cuda]'"
except Exception as exc:  # e.g. numba.cuda against a NumPy it does not support (np.row_stack is gone)
    numba = cuda = None
    _IMPORT_ERROR = " ".join(f"numba.cuda failed to import: {type(exc).__name__}: {exc}".split())
else:
    _IMPORT_ERROR = ""

_MAX_PARTIALS = 1024  # normalize's per-block partials; the scratch is allocated once at this size
_OBS_MAX = 8  # widest observation of any env: the rollout keeps the current obs in a local array this wide


def _simulator() -> bool:
    return bool(numba is not None and numba.config.ENABLE_CUDASIM)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split()).rstrip(" :")


def _gpu_names() -> list[str]:
    names = []
    for dev in cuda.list_devices():
        name = dev.name
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


# ---- kernels ---------------------------------------------------------------------------------
# Built per (dtype, reduction block size) by _build. Every constant is a NumPy scalar of the build's
# dtype (Numba types an untyped float literal as float64), and every multiply goes through mul():
# on a GPU that is __nv_fmul_rn / __nv_dmul_rn, which NVVM never fuses into an FMA (Numba-CUDA has
# no --fmad=false), so each operation rounds exactly as the NumPy reference does. In the simulator
# the kernels run as Python on NumPy scalars, which round the same way.
# Philox words are held in uint64 and masked to 32 bits: Numba widens uint32 arithmetic to 64 bits,
# and the simulator's NumPy uint32 scalars would warn on the wrap-around Philox relies on.


def _plain_mul(a, b):
    return a * b


_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_MASK32, _S32, _S8, _S24 = np.uint64(0xFFFFFFFF), np.uint64(32), np.uint64(8), np.uint64(24)


def _build(dtype: np.dtype, wg: int) -> types.SimpleNamespace:
    T = np.dtype(dtype).type
    F = np.float32
    djit = cuda.jit(device=True)
    if _simulator():
        mul = mulf = dmul = _plain_mul
    else:
        from numba.cuda import libdevice

        mul = libdevice.fmul_rn if T is np.float32 else libdevice.dmul_rn
        mulf = libdevice.fmul_rn
        dmul = libdevice.dmul_rn
    zero, one, two, three = T(0), T(1), T(2), T(3)
    two24 = T(2.0**-24)

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

    # ---- envs: reset(sym, p) -> state, step(state, action, p) -> (state, reward, term), observe --
    @djit
    def cartpole_reset(r, p):
        return mul(p[10], r[0]), mul(p[10], r[1]), mul(p[10], r[2]), mul(p[10], r[3])

    four_thirds = T(4.0 / 3.0)

    @djit
    def cartpole_step(s, action, p):
        gravity, masspole, total_mass, length = p[0], p[2], p[3], p[4]
        polemass_length, force_mag, tau, th_thr, x_thr = p[5], p[6], p[7], p[8], p[9]
        x, x_dot, theta, theta_dot = s
        force = force_mag if action == 1 else -force_mag
        costheta = T(math.cos(theta))
        sintheta = T(math.sin(theta))
        temp = (force + mul(mul(polemass_length, mul(theta_dot, theta_dot)), sintheta)) / total_mass
        thetaacc = (mul(gravity, sintheta) - mul(costheta, temp)) / mul(
            length, four_thirds - mul(masspole, mul(costheta, costheta)) / total_mass
        )
        xacc = temp - mul(mul(polemass_length, thetaacc), costheta) / total_mass
        x = x + mul(tau, x_dot)
        x_dot = x_dot + mul(tau, xacc)
        theta = theta + mul(tau, theta_dot)
        theta_dot = theta_dot + mul(tau, thetaacc)
        term = x < -x_thr or x > x_thr or theta < -th_thr or theta > th_thr
        return (x, x_dot, theta, theta_dot), one, term

    @djit
    def cartpole_observe(s, out, i):
        for k in range(4):
            out[i, k] = s[k]

    tenth, f_milli = T(0.1), F(0.001)

    @djit
    def pendulum_reset(r, p):
        return mul(p[3], r[0]), mul(p[4], r[1])

    @djit
    def angle_normalize(x, pi, two_pi):
        # np.remainder(x + pi, 2 pi) - pi: fmod is exact; NumPy's fix-up gives Python's modulo sign.
        m = T(math.fmod(x + pi, two_pi))
        if m != zero:
            if (two_pi < zero) != (m < zero):
                m = m + two_pi
        else:
            m = T(math.copysign(0.0, two_pi))
        return m - pi

    @djit
    def pendulum_step(s, action, p):
        max_speed, dt, grav_coef, pi, two_pi = p[0], p[2], p[5], p[7], p[8]
        th, thdot = s
        # Gymnasium's torque terms stay in float32 (the action's dtype) in every build.
        max_torque = F(p[1])
        u = clip(F(action), -max_torque, max_torque)
        u_cost = T(mulf(f_milli, mulf(u, u)))
        u_acc = T(mulf(F(p[6]), u))
        an = angle_normalize(th, pi, two_pi)
        costs = mul(an, an) + mul(tenth, mul(thdot, thdot)) + u_cost
        newthdot = thdot + mul(mul(grav_coef, T(math.sin(th))) + u_acc, dt)
        newthdot = clip(newthdot, -max_speed, max_speed)
        return (th + mul(newthdot, dt), newthdot), -costs, False

    @djit
    def pendulum_observe(s, out, i):
        out[i, 0] = T(math.cos(s[0]))
        out[i, 1] = T(math.sin(s[0]))
        out[i, 2] = s[1]

    @djit
    def mountain_car_reset(r, p):
        return p[7] + mul(p[8], r[0]), zero

    @djit
    def mountain_car_step(s, action, p):
        min_pos, max_pos, max_speed, goal_pos, goal_vel, force, gravity = (
            p[0],
            p[1],
            p[2],
            p[3],
            p[4],
            p[5],
            p[6],
        )
        position, velocity = s
        push = mul(T(action - 1), force)
        velocity = velocity + (push + mul(T(math.cos(mul(three, position))), -gravity))
        velocity = clip(velocity, -max_speed, max_speed)
        position = position + velocity
        position = clip(position, min_pos, max_pos)
        if position == min_pos and velocity < zero:
            velocity = zero
        term = position >= goal_pos and velocity >= goal_vel
        return (position, velocity), -one, term

    @djit
    def two_observe(s, out, i):
        out[i, 0] = s[0]
        out[i, 1] = s[1]

    hundred = T(100)

    @djit
    def mountain_car_continuous_reset(r, p):
        return p[9] + mul(p[10], r[0]), zero

    @djit
    def mountain_car_continuous_step(s, action, p):
        min_a, max_a, min_pos, max_pos, max_speed = p[0], p[1], p[2], p[3], p[4]
        goal_pos, goal_vel, power, gravity = p[5], p[6], p[7], p[8]
        position, velocity = s
        a = T(action)
        force = vmin(vmax(a, min_a), max_a)
        velocity = velocity + (mul(force, power) - mul(gravity, T(math.cos(mul(three, position)))))
        velocity = vmin(velocity, max_speed)
        velocity = vmax(velocity, -max_speed)
        position = position + velocity
        position = vmin(position, max_pos)
        position = vmax(position, min_pos)
        if position == min_pos and velocity < zero:
            velocity = zero
        term = position >= goal_pos and velocity >= goal_vel
        # The action cost uses the unclipped action, as Gymnasium's does.
        reward = (hundred if term else zero) - mul(mul(a, a), tenth)
        return (position, velocity), reward, term

    @djit
    def acrobot_reset(r, p):
        return mul(p[22], r[0]), mul(p[22], r[1]), mul(p[22], r[2]), mul(p[22], r[3])

    @djit
    def dsdt(p, a, theta1, theta2, dtheta1, dtheta2):
        c_a, m2, c_b, c_c, i1, c_d, c_e = p[3], p[4], p[5], p[6], p[7], p[8], p[9]
        i2, c_f, c_g, c_h, c_j, c_k, c_l, half_pi = p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17]
        cos2 = T(math.cos(theta2))
        sin2 = T(math.sin(theta2))
        d1 = c_a + mul(m2, c_b + mul(c_c, cos2)) + i1 + i2
        d2 = mul(m2, c_d + mul(c_e, cos2)) + i2
        phi2 = mul(c_f, T(math.cos(theta1 + theta2 - half_pi)))
        phi1 = (
            mul(mul(c_g, mul(dtheta2, dtheta2)), sin2)
            - mul(mul(mul(c_h, dtheta2), dtheta1), sin2)
            + mul(c_j, T(math.cos(theta1 - half_pi)))
            + phi2
        )
        ddtheta2 = (a + mul(d2 / d1, phi1) - mul(mul(c_k, mul(dtheta1, dtheta1)), sin2) - phi2) / (
            c_l + i2 - mul(d2, d2) / d1
        )
        ddtheta1 = -(mul(d2, ddtheta2) + phi1) / d1
        return dtheta1, dtheta2, ddtheta1, ddtheta2

    @djit
    def wrap(x, lo, hi, span):
        # Gymnasium's wrap(): one span at a time; non-finite values are left alone instead of hanging.
        if not math.isfinite(x):
            return x
        while x > hi:
            x = x - span
        while x < lo:
            x = x + span
        return x

    @djit
    def acrobot_step(s, action, p):
        dt, dt2, dt6, pi, two_pi, max_vel_1, max_vel_2 = p[0], p[1], p[2], p[18], p[19], p[20], p[21]
        y0, y1, y2, y3 = s
        a = T(action - 1)
        k1 = dsdt(p, a, y0, y1, y2, y3)
        k2 = dsdt(
            p, a, y0 + mul(dt2, k1[0]), y1 + mul(dt2, k1[1]), y2 + mul(dt2, k1[2]), y3 + mul(dt2, k1[3])
        )
        k3 = dsdt(
            p, a, y0 + mul(dt2, k2[0]), y1 + mul(dt2, k2[1]), y2 + mul(dt2, k2[2]), y3 + mul(dt2, k2[3])
        )
        k4 = dsdt(p, a, y0 + mul(dt, k3[0]), y1 + mul(dt, k3[1]), y2 + mul(dt, k3[2]), y3 + mul(dt, k3[3]))
        n0 = y0 + mul(dt6, k1[0] + mul(two, k2[0]) + mul(two, k3[0]) + k4[0])
        n1 = y1 + mul(dt6, k1[1] + mul(two, k2[1]) + mul(two, k3[1]) + k4[1])
        n2 = y2 + mul(dt6, k1[2] + mul(two, k2[2]) + mul(two, k3[2]) + k4[2])
        n3 = y3 + mul(dt6, k1[3] + mul(two, k2[3]) + mul(two, k3[3]) + k4[3])
        n0 = wrap(n0, -pi, pi, two_pi)
        n1 = wrap(n1, -pi, pi, two_pi)
        n2 = vmin(vmax(n2, -max_vel_1), max_vel_1)
        n3 = vmin(vmax(n3, -max_vel_2), max_vel_2)
        term = -T(math.cos(n0)) - T(math.cos(n1 + n0)) > one
        return (n0, n1, n2, n3), (zero if term else -one), term

    @djit
    def acrobot_observe(s, out, i):
        out[i, 0] = T(math.cos(s[0]))
        out[i, 1] = T(math.sin(s[0]))
        out[i, 2] = T(math.cos(s[1]))
        out[i, 3] = T(math.sin(s[1]))
        out[i, 4] = s[2]
        out[i, 5] = s[3]

    envs = {
        "cartpole": (4, cartpole_reset, cartpole_step, cartpole_observe),
        "pendulum": (2, pendulum_reset, pendulum_step, pendulum_observe),
        "mountain_car": (2, mountain_car_reset, mountain_car_step, two_observe),
        "mountain_car_continuous": (
            2,
            mountain_car_continuous_reset,
            mountain_car_continuous_step,
            two_observe,
        ),
        "acrobot": (4, acrobot_reset, acrobot_step, acrobot_observe),
    }
    # ---- policies (kernels/README.md, "Fused rollouts"): float32 whatever the env dtype ----------
    f_zero, f_one, f_two, f_neg_two = F(0), F(1), F(2), F(-2)
    f_two24, f_two_pi = F(2.0**-24), F(2.0 * np.pi)

    @djit
    def uniformf(b):  # rng.uniform: the top 24 bits times 2^-24, exact in float32
        return mulf(F(b >> _S8), f_two24)

    @djit
    def mlp_layer(policy, w, b, x, n_in, n_out, use_tanh, y):
        # y = x @ W + b, W [n_in, n_out] row-major at policy[w:]: each dot product starts at 0 and adds
        # x[k] * W[k, j] in index order (policy._dot), then the bias.
        for j in range(n_out):
            acc = f_zero
            for k in range(n_in):
                acc = acc + mulf(x[k], policy[w + k * n_out + j])
            acc = acc + policy[b + j]
            if use_tanh:
                acc = F(math.tanh(acc))
            y[j] = acc

    @djit
    def mlp(policy, hidden, n_in, n_out, x, y):
        # policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std (MLPPolicy.flat)
        h1 = cuda.local.array(MAX_WIDTH, np.float32)
        h2 = cuda.local.array(MAX_WIDTH, np.float32)
        b1 = n_in * hidden
        w2 = b1 + hidden
        b2 = w2 + hidden * hidden
        w3 = b2 + hidden
        b3 = w3 + hidden * n_out
        mlp_layer(policy, 0, b1, x, n_in, hidden, True, h1)
        mlp_layer(policy, w2, b2, h1, hidden, hidden, True, h2)
        mlp_layer(policy, w3, b3, h2, hidden, n_out, False, y)

    def make_act(obs_dim: int, n_actions: int, high: Any) -> Callable:
        """The env's action at obs o[0, :obs_dim]: Philox key (seed, env), counter (episode, steps, 1, 0)."""
        if n_actions:

            @djit
            def act(policy, kind, hidden, o, seed, i, ep, t):
                c0, _, _, _ = philox(np.uint64(ep), np.uint64(t), np.uint64(1), np.uint64(0),
                                        np.uint64(seed), np.uint64(i))  # fmt: skip
                if kind == 0:
                    return np.int32(((c0 >> _S8) * np.uint64(n_actions)) >> _S24)
                x = cuda.local.array(MAX_WIDTH, np.float32)
                e = cuda.local.array(MAX_WIDTH, np.float32)
                for k in range(obs_dim):
                    x[k] = F(o[0, k])
                mlp(policy, hidden, obs_dim, n_actions, x, e)
                m = e[0]
                for k in range(1, n_actions):
                    m = vmax(m, e[k])
                total = f_zero
                for k in range(n_actions):
                    e[k] = F(math.exp(e[k] - m))
                    total = total + e[k]
                # Inverse CDF of the softmax: the first k whose partial sum exceeds u * total, else the last.
                threshold = mulf(uniformf(c0), total)
                acc = f_zero
                for k in range(n_actions - 1):
                    acc = acc + e[k]
                    if threshold < acc:
                        return np.int32(k)
                return np.int32(n_actions - 1)

            return act

        @djit
        def act_box(policy, kind, hidden, o, seed, i, ep, t):
            c0, c1, _, _ = philox(np.uint64(ep), np.uint64(t), np.uint64(1), np.uint64(0),
                                    np.uint64(seed), np.uint64(i))  # fmt: skip
            if kind == 0:
                return mulf(high, mulf(uniformf(c0), f_two) - f_one)
            x = cuda.local.array(MAX_WIDTH, np.float32)
            y = cuda.local.array(MAX_WIDTH, np.float32)
            for k in range(obs_dim):
                x[k] = F(o[0, k])
            mlp(policy, hidden, obs_dim, 1, x, y)
            log_std = policy[obs_dim * hidden + hidden + hidden * hidden + hidden + hidden + 1]
            # Box-Muller: 1 - u is in (0, 1], so the log is finite.
            u1 = f_one - uniformf(c0)
            u2 = uniformf(c1)
            z = mulf(F(math.sqrt(mulf(f_neg_two, F(math.log(u1))))), F(math.cos(mulf(f_two_pi, u2))))
            return y[0] + mulf(F(math.exp(log_std)), z)

        return act_box

    specs = {spec.kernel: spec for spec in _envs.ENVS.values()}
    acts = {
        name: make_act(specs[name].obs_dim, specs[name].discrete_actions or 0, F(specs[name].action_high))
        for name in envs
    }
    ns = types.SimpleNamespace(
        env={name: _env_kernels(*e, acts[name], reset_draw, zero) for name, e in envs.items()}
    )

    @cuda.jit
    def mlp_forward(policy, hidden, obs, out):
        i = cuda.grid(1)
        n, obs_dim = obs.shape
        if i < n:
            x = cuda.local.array(MAX_WIDTH, np.float32)
            y = cuda.local.array(MAX_WIDTH, np.float32)
            for k in range(obs_dim):
                x[k] = F(obs[i, k])
            n_out = out.shape[1]
            mlp(policy, hidden, obs_dim, n_out, x, y)
            for j in range(n_out):
                out[i, j] = y[j]

    ns.mlp_forward = mlp_forward

    # ---- buffer ops ---------------------------------------------------------------------------
    @cuda.jit
    def gae(rewards, values, next_values, terminated, truncated, advantages, returns, gamma, gamma_lam):
        i = cuda.grid(1)
        steps, n = rewards.shape
        if i < n:
            last = zero
            for t in range(steps - 1, -1, -1):
                # The flags multiply, as in the reference, so a non-finite value propagates the same way.
                nonterminal = zero if terminated[t, i] else one
                notdone = zero if (terminated[t, i] or truncated[t, i]) else one
                v = values[t, i]
                delta = rewards[t, i] + mul(mul(gamma, next_values[t, i]), nonterminal) - v
                last = delta + mul(mul(gamma_lam, notdone), last)
                advantages[t, i] = last
                returns[t, i] = last + v

    @cuda.jit
    def returns_n(rewards, terminated, truncated, bootstrap, out, gamma):
        i = cuda.grid(1)
        steps, n = rewards.shape
        if i < n:
            running = zero
            for t in range(steps - 1, -1, -1):
                if t == steps - 1:
                    nxt = bootstrap[i]
                else:
                    nxt = zero if truncated[t, i] else running
                running = rewards[t, i] + mul(mul(gamma, nxt), zero if terminated[t, i] else one)
                out[t, i] = running

    @cuda.jit
    def returns_tn(rewards, terminated, truncated, bootstrap, out, gamma):
        i = cuda.grid(1)
        steps, n = rewards.shape
        if i < n:
            running = zero
            for t in range(steps - 1, -1, -1):
                # Where an episode was truncated, bootstrap from the value of its final obs.
                nxt = bootstrap[t, i] if (t == steps - 1 or truncated[t, i]) else running
                running = rewards[t, i] + mul(mul(gamma, nxt), zero if terminated[t, i] else one)
                out[t, i] = running

    @djit
    def chan(na, ma, qa, nb, mb, qb):
        # Chan, Golub & LeVeque's pairwise update in float64; counts stay exact integers.
        if nb == 0:
            return na, ma, qa
        n = np.uint32(na + nb)
        delta = mb - ma
        fa, fb, fn = np.float64(na), np.float64(nb), np.float64(n)
        return n, ma + dmul(delta, fb / fn), qa + qb + dmul(dmul(delta, delta), fa * fb / fn)

    @djit
    def block_reduce(c, m, q):
        sc = cuda.shared.array(wg, np.uint32)
        sm = cuda.shared.array(wg, np.float64)
        sq = cuda.shared.array(wg, np.float64)
        tid = cuda.threadIdx.x
        sc[tid], sm[tid], sq[tid] = c, m, q
        stride = wg // 2
        while stride > 0:
            cuda.syncthreads()
            if tid < stride:
                sc[tid], sm[tid], sq[tid] = chan(sc[tid], sm[tid], sq[tid],
                                                 sc[tid + stride], sm[tid + stride], sq[tid + stride])  # fmt: skip
            stride //= 2
        cuda.syncthreads()
        return sc[0], sm[0], sq[0]

    @cuda.jit
    def norm_partial(x, pcount, pmean, pm2):
        # Welford over a grid-stride slice in float64 (the reference accumulates in float64).
        c, m, q = np.uint32(0), 0.0, 0.0
        k = cuda.grid(1)
        stride = cuda.gridsize(1)
        while k < x.size:
            v = np.float64(x[k])
            c = np.uint32(c + np.uint32(1))
            d = v - m
            m = m + d / np.float64(c)
            q = q + dmul(d, v - m)
            k += stride
        c, m, q = block_reduce(c, m, q)
        if cuda.threadIdx.x == 0:
            b = cuda.blockIdx.x
            pcount[b], pmean[b], pm2[b] = c, m, q

    @cuda.jit
    def norm_finalize(pcount, pmean, pm2, stats, groups):
        c, m, q = np.uint32(0), 0.0, 0.0
        g = cuda.threadIdx.x
        while g < groups:
            c, m, q = chan(c, m, q, pcount[g], pmean[g], pm2[g])
            g += wg
        c, m, q = block_reduce(c, m, q)
        if cuda.threadIdx.x == 0:
            stats[0] = T(m)
            stats[1] = T(math.sqrt(q / np.float64(c))) if c else zero

    @cuda.jit
    def norm_apply(x, out, stats, eps, n):
        # The reference's roundings: (x - T(mean)) / (T(std) + T(eps)).
        k = cuda.grid(1)
        if k < n:
            out[k] = (x[k] - stats[0]) / (stats[1] + eps)

    ns.gae, ns.returns_n, ns.returns_tn = gae, returns_n, returns_tn
    ns.norm_partial, ns.norm_finalize, ns.norm_apply = norm_partial, norm_finalize, norm_apply
    return ns


def _env_kernels(dim: int, env_reset: Callable, env_step: Callable, observe: Callable, act: Callable,
                 reset_draw: Callable, zero: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """(reset, step, rollout) kernels for one env: the autoreset semantics of kernels/README.md."""
    djit = cuda.jit(device=True)
    real = type(zero)

    @djit
    def reset_body(steps, episodes, needs_reset, obs, params, seed, fresh, i):
        ep = np.uint32(0) if fresh else np.uint32(episodes[i] + np.uint32(1))
        episodes[i] = ep
        st = env_reset(reset_draw(seed, i, ep), params)
        steps[i] = 0
        needs_reset[i] = False
        observe(st, obs, i)
        return st

    @djit
    def advance(st, t, ep, nr, action, o, o_row, fo, fo_row, params, seed, max_steps, autoreset_mode, i):
        # One step on state and counters held by the caller, with either autoreset: the one code path
        # of the step and rollout kernels. Writes the obs the env is at afterwards to o[o_row] and the
        # obs the step reached, before any autoreset, to fo[fo_row].
        r = zero
        term = False
        trunc = False
        if autoreset_mode != 0 and nr:
            # next_step: an env that finished on the previous call resets now instead of stepping.
            ep = np.uint32(ep + np.uint32(1))
            st = env_reset(reset_draw(seed, i, ep), params)
            t = 0
            nr = False
        else:
            st, r, term = env_step(st, action, params)
            t += 1
            trunc = t >= max_steps  # both flags may be set, as Gymnasium's TimeLimit does
            if autoreset_mode == 0:
                # same_step: fo keeps the obs the step reached; o is the reset obs where it finished.
                observe(st, fo, fo_row)
                if term or trunc:
                    ep = np.uint32(ep + np.uint32(1))
                    st = env_reset(reset_draw(seed, i, ep), params)
                    t = 0
            else:
                nr = term or trunc
        observe(st, o, o_row)
        if autoreset_mode != 0:
            observe(st, fo, fo_row)
        return st, t, ep, nr, r, term, trunc

    @djit
    def step_body(st, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated, truncated,
                  params, seed, max_steps, autoreset_mode, i):  # fmt: skip
        st, t, ep, nr, r, term, trunc = advance(st, steps[i], episodes[i], needs_reset[i], actions[i], obs, i,
                                                final_obs, i, params, seed, max_steps, autoreset_mode, i)  # fmt: skip
        steps[i] = t
        episodes[i] = ep
        needs_reset[i] = nr
        reward[i] = r
        terminated[i] = term
        truncated[i] = trunc
        return st

    @djit
    def rollout_body(st, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params,
                     policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated, out_truncated,
                     out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, i):  # fmt: skip
        # Steps t0 .. t0 + t_count - 1 for env i; the out arrays are flattened to rows t * n + i. State
        # and counters stay in registers, the step buffers are stored at the end so env.step continues.
        # The obs acted on first is the env's obs buffer, as on the host path.
        n = steps.size
        obs_dim = obs.shape[1]
        o = cuda.local.array((1, _OBS_MAX), real)
        for k in range(obs_dim):
            o[0, k] = obs[i, k]
        t = steps[i]
        ep = episodes[i]
        nr = needs_reset[i]
        r = zero
        term = False
        trunc = False
        row = i
        for tt in range(t0, t0 + t_count):
            row = tt * n + i
            a = act(policy, policy_kind, hidden, o, seed, i, ep, t)
            for k in range(obs_dim):
                out_obs[row, k] = o[0, k]
            out_actions[row] = a
            st, t, ep, nr, r, term, trunc = advance(st, t, ep, nr, a, o, 0, out_final_obs, row, params, seed,
                                                    max_steps, autoreset_mode, i)  # fmt: skip
            out_rewards[row] = r
            out_terminated[row] = term
            out_truncated[row] = trunc
        steps[i] = t
        episodes[i] = ep
        needs_reset[i] = nr
        for k in range(obs_dim):
            obs[i, k] = o[0, k]
            final_obs[i, k] = out_final_obs[row, k]
        reward[i] = r
        terminated[i] = term
        truncated[i] = trunc
        return st

    if dim == 2:

        @cuda.jit
        def reset2(s0, s1, steps, episodes, needs_reset, obs, params, seed, fresh):
            i = cuda.grid(1)
            if i < steps.size:
                s0[i], s1[i] = reset_body(steps, episodes, needs_reset, obs, params, seed, fresh, i)

        @cuda.jit
        def step2(s0, s1, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated, truncated,
                  params, seed, max_steps, autoreset_mode):  # fmt: skip
            i = cuda.grid(1)
            if i < steps.size:
                s0[i], s1[i] = step_body((s0[i], s1[i]), steps, episodes, needs_reset, actions, obs, final_obs,
                                         reward, terminated, truncated, params, seed, max_steps, autoreset_mode, i)  # fmt: skip

        @cuda.jit
        def rollout2(s0, s1, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params,
                     policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated, out_truncated,
                     out_final_obs, seed, max_steps, autoreset_mode, t0, t_count):  # fmt: skip
            i = cuda.grid(1)
            if i < steps.size and t_count > 0:
                s0[i], s1[i] = rollout_body(
                    (s0[i], s1[i]), steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated,
                    params, policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                    out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, i
                )  # fmt: skip

        return reset2, step2, rollout2

    @cuda.jit
    def reset4(s0, s1, s2, s3, steps, episodes, needs_reset, obs, params, seed, fresh):
        i = cuda.grid(1)
        if i < steps.size:
            s0[i], s1[i], s2[i], s3[i] = reset_body(steps, episodes, needs_reset, obs, params, seed, fresh, i)

    @cuda.jit
    def step4(s0, s1, s2, s3, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated, truncated,
              params, seed, max_steps, autoreset_mode):  # fmt: skip
        i = cuda.grid(1)
        if i < steps.size:
            s0[i], s1[i], s2[i], s3[i] = step_body(
                (s0[i], s1[i], s2[i], s3[i]), steps, episodes, needs_reset, actions, obs, final_obs, reward,
                terminated, truncated, params, seed, max_steps, autoreset_mode, i
            )  # fmt: skip

    @cuda.jit
    def rollout4(s0, s1, s2, s3, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated,
                 params, policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                 out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count):  # fmt: skip
        i = cuda.grid(1)
        if i < steps.size and t_count > 0:
            s0[i], s1[i], s2[i], s3[i] = rollout_body(
                (s0[i], s1[i], s2[i], s3[i]), steps, episodes, needs_reset, obs, final_obs, reward, terminated,
                truncated, params, policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, i
            )  # fmt: skip

    return reset4, step4, rollout4


_BUILDS: dict[tuple[str, int], types.SimpleNamespace] = {}


def kernels(dtype: np.dtype, wg: int = 256) -> types.SimpleNamespace:
    """The kernels for one dtype and reduction block size, defined once (Numba compiles on first launch)."""
    key = (np.dtype(dtype).str, wg)
    if key not in _BUILDS:
        _BUILDS[key] = _build(np.dtype(dtype), wg)
    return _BUILDS[key]


@register
class NumbaBackend(Backend):
    name = "numba"
    order = 30
    extra = "cuda"

    @classmethod
    def probe(cls) -> Probe:
        if cuda is None:
            return Probe(False, _IMPORT_ERROR)
        versions = {"numba": numba.__version__, "numba_cuda": _numba_cuda_version()}
        if _simulator():
            return Probe(True, devices=("CUDA simulator",), simulator=True, versions=versions)
        if cuda.is_available():
            return Probe(True, devices=tuple(_gpu_names()), versions=versions)
        try:
            cuda.current_context()
            why = "no CUDA GPU found"
        except Exception as exc:
            why = _one_line(exc)
        return Probe(False, f"numba-cuda found no CUDA GPU/driver ({why}); "
                            f"set NUMBA_ENABLE_CUDASIM=1 to run in Numba's CUDA simulator")  # fmt: skip

    def __init__(self, device: str | None = None) -> None:
        if cuda is None:
            raise BackendUnavailable(_IMPORT_ERROR)
        self.simulator = _simulator()
        if self.simulator:
            # One simulated device: any selector (PORTKERN_DEVICE may name an OpenCL platform) maps to it.
            self.device_id = 0
            self.device_name = "CUDA simulator"
            self.compute_capability = ""
        else:
            names = _gpu_names()
            self.device_id = _resolve_device(device, names)
            cuda.select_device(self.device_id)
            dev = cuda.get_current_device()
            self.device_name = names[self.device_id]
            self.compute_capability = "{}.{}".format(*dev.compute_capability)
        self.supports_float64 = True
        # The simulator runs one Python thread per CUDA thread, so it gets small blocks.
        #: threads per block for per-env and elementwise kernels; set it to re-tune.
        self.block_size: int = 32 if self.simulator else 256
        #: threads per block of normalize's reductions (a power of two).
        self.reduce_block_size: int = 32 if self.simulator else 256
        self._params: dict[tuple[bytes, str], Any] = {}
        self._actions: dict[tuple[int, str], Any] = {}
        self._scratch: dict[str, Any] = {}

    def describe(self) -> dict[str, str]:
        info = {"backend": self.name, "device": self.device_name, "vendor": "NVIDIA",
                "numba": numba.__version__, "numba_cuda": _numba_cuda_version(),
                "simulator": str(self.simulator)}  # fmt: skip
        if not self.simulator:
            info["compute_capability"] = self.compute_capability
            try:
                info["cuda_driver"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
                info["cuda_runtime"] = ".".join(map(str, cuda.runtime.get_version()))
            except Exception as exc:  # versions are metadata; never fail a benchmark over them
                info["cuda_versions"] = _one_line(exc)
        return info

    def synchronize(self) -> None:
        cuda.synchronize()

    def _grid(self, n: int, block: int | None = None) -> tuple[int, int]:
        block = block or self.block_size
        return max(1, (n + block - 1) // block), block

    def _device_params(self, params: np.ndarray) -> Any:
        key = (params.tobytes(), params.dtype.str)
        arr = self._params.get(key)
        if arr is None:
            if len(self._params) >= 64:  # param sweeps: keep the cache bounded
                self._params.clear()
            arr = self._params[key] = cuda.to_device(np.ascontiguousarray(params))
        return arr

    # ---- arrays -------------------------------------------------------------------------------
    def zeros(self, shape, dtype):
        return cuda.to_device(np.zeros(shape, dtype=dtype))

    def from_host(self, a):
        return cuda.to_device(np.ascontiguousarray(a))

    def to_host(self, a):
        return a.copy_to_host()

    def write(self, dst, src):
        dst.copy_to_device(np.ascontiguousarray(src, dtype=dst.dtype))

    @classmethod
    def owns(cls, a: Any) -> bool:
        return cuda is not None and isinstance(a, _array_types())

    # ---- environments ------------------------------------------------------------------------
    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        reset, _, _ = kernels(params.dtype, self.reduce_block_size).env[spec.kernel]
        n = bufs.steps.shape[0]
        reset[self._grid(n)](*bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs,
                             self._device_params(params), np.uint32(seed), np.int32(bool(fresh)))  # fmt: skip

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        _, step, _ = kernels(params.dtype, self.reduce_block_size).env[spec.kernel]
        n = bufs.steps.shape[0]
        act_dtype = np.dtype(np.int32 if spec.is_discrete else np.float32)
        if isinstance(actions, np.ndarray):  # host actions go through one reused device buffer
            buf = self._actions.get((n, act_dtype.str))
            if buf is None:
                buf = self._actions[(n, act_dtype.str)] = self.zeros((n,), act_dtype)
            self.write(buf, actions)
            actions = buf
        if actions.dtype != act_dtype or actions.shape != (n,):
            raise TypeError(
                f"actions: expected a [{n}] {act_dtype} array, got {actions.shape} {actions.dtype}"
            )
        step[self._grid(n)](*bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, actions, bufs.obs,
                            bufs.final_obs, bufs.reward, bufs.terminated, bufs.truncated,
                            self._device_params(params), np.uint32(seed), np.int32(max_steps),
                            np.int32(AUTORESET_MODES[autoreset]))  # fmt: skip

    def _check_array(self, a, what, dtype=None, shape=None):
        _check_native(a, what, dtype, shape)

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        n, steps, d, dt = bufs.steps.shape[0], out.steps, spec.obs_dim, params.dtype
        _, _, rollout = kernels(dt, self.reduce_block_size).env[spec.kernel]
        # Time-major [T, N(, d)] buffers as rows t * N + i, so the kernel indexes one flat row per step.
        rows = steps * n
        head = (*bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs, bufs.reward,
                bufs.terminated, bufs.truncated, self._device_params(params), policy_params,
                np.int32(policy.kind), np.int32(hidden), out.obs.reshape(rows, d), out.actions.reshape(rows),
                out.rewards.reshape(rows), out.terminated.reshape(rows), out.truncated.reshape(rows),
                out.final_obs.reshape(rows, d), np.uint32(seed), np.int32(max_steps),
                np.int32(AUTORESET_MODES[autoreset]))  # fmt: skip
        # ceil(T / steps_per_launch) launches; each moves the time window (t0, t_count) on.
        for t0 in range(0, steps, steps_per_launch):
            rollout[self._grid(n)](*head, np.int32(t0), np.int32(min(steps_per_launch, steps - t0)))

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, _ = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = cuda.device_array((n, out_dim), np.float32)
        if n:
            kernels(obs.dtype, self.reduce_block_size).mlp_forward[self._grid(n)](policy_params, np.int32(hidden),
                                                                                  obs, out)  # fmt: skip
        return out

    # ---- rollout buffer ops ------------------------------------------------------------------
    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        T = rewards.dtype.type
        k = kernels(rewards.dtype, self.reduce_block_size)
        k.gae[self._grid(rewards.shape[1])](rewards, values, next_values, terminated, truncated, advantages,
                                            returns, T(gamma), T(T(gamma) * T(lam)))  # fmt: skip

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        k = kernels(rewards.dtype, self.reduce_block_size)
        fn = k.returns_tn if len(bootstrap.shape) == 2 else k.returns_n
        fn[self._grid(rewards.shape[1])](
            rewards, terminated, truncated, bootstrap, out, rewards.dtype.type(gamma)
        )

    def normalize(self, x, out, eps):
        n = x.size
        if n == 0:
            return
        wg = self.reduce_block_size
        k = kernels(x.dtype, wg)
        flat, flat_out = x.reshape(n), out.reshape(n)
        if "pcount" not in self._scratch:  # partials, allocated once at the largest block count
            self._scratch["pcount"] = cuda.device_array(_MAX_PARTIALS, np.uint32)
            self._scratch["pmean"] = cuda.device_array(_MAX_PARTIALS, np.float64)
            self._scratch["pm2"] = cuda.device_array(_MAX_PARTIALS, np.float64)
        stats = self._scratch.get(x.dtype.str)
        if stats is None:
            stats = self._scratch[x.dtype.str] = cuda.device_array(2, x.dtype)
        pcount, pmean, pm2 = self._scratch["pcount"], self._scratch["pmean"], self._scratch["pm2"]
        sms = 1 if self.simulator else cuda.get_current_device().MULTIPROCESSOR_COUNT
        blocks = max(1, min((n + wg - 1) // wg, 8 * sms, _MAX_PARTIALS))
        k.norm_partial[blocks, wg](flat, pcount, pmean, pm2)
        k.norm_finalize[1, wg](pcount, pmean, pm2, stats, np.int32(blocks))
        k.norm_apply[self._grid(n)](flat, flat_out, stats, x.dtype.type(eps), np.int32(n))

    def gather(self, x, indices, out):
        if indices.dtype not in (np.int64, np.int32):
            raise TypeError(f"indices: expected int64 or int32, got {indices.dtype}")
        if indices.shape[0] == 0:
            return
        row_len = math.prod(x.shape[1:])
        fn = _gather_kernel()
        # Rows as flat element runs: one kernel serves every dtype and trailing shape.
        xf, of = x.reshape(x.shape[0], row_len), out.reshape(out.shape[0], row_len)
        fn[self._grid(indices.shape[0] * row_len)](xf, indices, of)

    def index_range(self, indices):
        # On the device (atomic min/max into two words): validating actions every step must not
        # copy the whole array to the host.
        n = indices.size
        if "range" not in self._scratch:
            self._scratch["range"] = cuda.device_array(2, np.int64)
        out = self._scratch["range"]
        out.copy_to_device(np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min], np.int64))
        _range_kernel()[self._grid(n)](indices.reshape(n), out)
        lo, hi = out.copy_to_host()
        return int(lo), int(hi)

    def all_finite(self, a):
        n = a.size
        if n == 0:
            return True
        if "flag" not in self._scratch:
            self._scratch["flag"] = cuda.device_array(1, np.int32)
        flag = self._scratch["flag"]
        flag.copy_to_device(np.zeros(1, np.int32))
        _finite_kernel()[self._grid(n)](a.reshape(n), flag)
        return not flag.copy_to_host()[0]


def _gather_kernel() -> Any:
    if "gather" not in _BUILDS:

        @cuda.jit
        def gather(x, indices, out):
            j = cuda.grid(1)
            row_len = x.shape[1]
            if j < out.shape[0] * row_len:
                b = j // row_len
                k = j - b * row_len
                out[b, k] = x[indices[b], k]

        _BUILDS["gather"] = gather
    return _BUILDS["gather"]


def _range_kernel() -> Any:
    if "range" not in _BUILDS:

        @cuda.jit
        def index_range(x, out):
            i = cuda.grid(1)
            if i < x.size:
                v = np.int64(x[i])
                cuda.atomic.min(out, 0, v)
                cuda.atomic.max(out, 1, v)

        _BUILDS["range"] = index_range
    return _BUILDS["range"]


def _finite_kernel() -> Any:
    if "finite" not in _BUILDS:

        @cuda.jit
        def finite(x, flag):
            i = cuda.grid(1)
            if i < x.size and not math.isfinite(x[i]):
                flag[0] = 1  # every writer stores the same value, so the race is benign

        _BUILDS["finite"] = finite
    return _BUILDS["finite"]


def _check_native(a: Any, what: str, dtype: Any = None, shape: tuple[int, ...] | None = None) -> None:
    if not isinstance(a, _array_types()):
        raise TypeError(f"{what}: expected a numba device array, got {type(a).__module__}.{type(a).__name__}")
    if dtype is not None and a.dtype != np.dtype(dtype):
        raise TypeError(f"{what}: expected dtype {np.dtype(dtype)}, got {a.dtype}")
    if shape is not None and tuple(a.shape) != shape:
        raise ValueError(f"{what}: expected shape {shape}, got {tuple(a.shape)}")
    if not a.is_c_contiguous():
        raise ValueError(f"{what}: expected a C-contiguous array")


def _array_types() -> tuple[type, ...]:
    mod = cuda.devicearray
    return tuple(getattr(mod, n) for n in ("DeviceNDArray", "FakeCUDAArray") if hasattr(mod, n))


def _numba_cuda_version() -> str:
    try:
        from importlib.metadata import version

        return version("numba-cuda")
    except Exception:
        return "unknown"


def _resolve_device(device: str | None, names: list[str]) -> int:
    """``None`` -> device 0; ``"cuda:1"`` or ``"1"`` -> that index; else a name substring."""
    if device is None:
        return 0
    key = device.strip().lower()
    key = key.removeprefix("cuda:")
    listing = ", ".join(f"{i}: {n}" for i, n in enumerate(names))
    if key.isdigit():
        if int(key) < len(names):
            return int(key)
        raise ValueError(f"device: no CUDA device {device!r}; devices here: {listing}")
    for i, n in enumerate(names):
        if key and key in n.lower():
            return i
    raise ValueError(f"device: no CUDA device matches {device!r}; devices here: {listing}")
