"""Pendulum-v1 (portkern/envs/pendulum.py) in Numba-CUDA: state (theta, theta_dot)."""

from __future__ import annotations

import math

from .common import EnvFunctions, Toolkit


def build(k: Toolkit) -> EnvFunctions:
    T, F, mul, mulf, zero, djit, clip = k.T, k.F, k.mul, k.mulf, k.zero, k.djit, k.clip
    sin, cos = k.sin, k.cos
    tenth, f_milli = T(0.1), F(0.001)

    @djit
    def reset(r, p, s):
        s[0] = mul(p.x_init, r[0])
        s[1] = mul(p.y_init, r[1])

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
    def physics(s, action, p):
        max_speed, dt = p.max_speed, p.dt
        th, thdot = s[0], s[1]
        # Gymnasium's torque terms stay in float32 (the action's dtype) in every build.
        max_torque = F(p.max_torque)
        u = clip(F(action), -max_torque, max_torque)
        u_cost = T(mulf(f_milli, mulf(u, u)))
        u_acc = T(mulf(F(p.torque_coef), u))
        an = angle_normalize(th, p.pi, p.two_pi)
        costs = mul(an, an) + mul(tenth, mul(thdot, thdot)) + u_cost
        newthdot = thdot + mul(mul(p.grav_coef, T(sin(th))) + u_acc, dt)
        newthdot = clip(newthdot, -max_speed, max_speed)
        s[0] = th + mul(newthdot, dt)
        s[1] = newthdot
        return -costs, False

    @djit
    def observe(s, out, row):
        out[row, 0] = T(cos(s[0]))
        out[row, 1] = T(sin(s[0]))
        out[row, 2] = s[1]

    return EnvFunctions(reset=reset, physics=physics, observe=observe)
