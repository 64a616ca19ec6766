"""Acrobot-v1 (portkern/envs/acrobot.py) in Numba-CUDA: state (theta1, theta2, dtheta1, dtheta2), RK4."""

from __future__ import annotations

import math

from .common import EnvFunctions, Toolkit, bounded_reset


def build(k: Toolkit) -> EnvFunctions:
    T, mul, zero, one, two, djit, vmin, vmax = k.T, k.mul, k.zero, k.one, k.two, k.djit, k.vmin, k.vmax
    sin, cos = k.sin, k.cos

    reset = bounded_reset(k)

    @djit
    def dsdt(p, a, theta1, theta2, dtheta1, dtheta2):
        # Gymnasium's AcrobotEnv._dsdt ("book" variant), operation for operation.
        m2, i1, i2 = p.m2, p.i1, p.i2
        cos2 = T(cos(theta2))
        sin2 = T(sin(theta2))
        d1 = p.c_a + mul(m2, p.c_b + mul(p.c_c, cos2)) + i1 + i2
        d2 = mul(m2, p.c_d + mul(p.c_e, cos2)) + i2
        phi2 = mul(p.c_f, T(cos(theta1 + theta2 - p.half_pi)))
        phi1 = (
            mul(mul(p.c_g, mul(dtheta2, dtheta2)), sin2)
            - mul(mul(mul(p.c_h, dtheta2), dtheta1), sin2)
            + mul(p.c_j, T(cos(theta1 - p.half_pi)))
            + phi2
        )
        ddtheta2 = (a + mul(d2 / d1, phi1) - mul(mul(p.c_k, mul(dtheta1, dtheta1)), sin2) - phi2) / (
            p.c_l + i2 - mul(d2, d2) / d1
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
    def physics(s, action, p):
        dt, dt2, dt6, pi, two_pi = p.dt, p.dt2, p.dt6, p.pi, p.two_pi
        y0, y1, y2, y3 = s[0], s[1], s[2], s[3]
        a = T(action - 1)  # AVAIL_TORQUE = [-1, 0, +1]
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
        n2 = vmin(vmax(n2, -p.max_vel_1), p.max_vel_1)
        n3 = vmin(vmax(n3, -p.max_vel_2), p.max_vel_2)
        s[0], s[1], s[2], s[3] = n0, n1, n2, n3
        term = -T(cos(n0)) - T(cos(n1 + n0)) > one
        return (zero if term else -one), term

    @djit
    def observe(s, out, row):
        out[row, 0] = T(cos(s[0]))
        out[row, 1] = T(sin(s[0]))
        out[row, 2] = T(cos(s[1]))
        out[row, 3] = T(sin(s[1]))
        out[row, 4] = s[2]
        out[row, 5] = s[3]

    return EnvFunctions(reset=reset, physics=physics, observe=observe)
