"""CartPole-v1 (portkern/envs/cartpole.py) in Numba-CUDA: state (x, x_dot, theta, theta_dot)."""

from __future__ import annotations


from .common import EnvFunctions, Toolkit, bounded_reset


def build(k: Toolkit) -> EnvFunctions:
    T, mul, one, djit = k.T, k.mul, k.one, k.djit
    sin, cos = k.sin, k.cos
    four_thirds = T(4.0 / 3.0)

    reset = bounded_reset(k)

    @djit
    def physics(s, action, p):
        # Gymnasium's CartPoleEnv.step, operation for operation (Euler integration).
        total_mass, polemass_length, tau = p.total_mass, p.polemass_length, p.tau
        x, x_dot, theta, theta_dot = s[0], s[1], s[2], s[3]
        force = p.force_mag if action == 1 else -p.force_mag
        costheta = T(cos(theta))
        sintheta = T(sin(theta))
        temp = (force + mul(mul(polemass_length, mul(theta_dot, theta_dot)), sintheta)) / total_mass
        thetaacc = (mul(p.gravity, sintheta) - mul(costheta, temp)) / mul(
            p.length, four_thirds - mul(p.masspole, mul(costheta, costheta)) / total_mass
        )
        xacc = temp - mul(mul(polemass_length, thetaacc), costheta) / total_mass
        x = x + mul(tau, x_dot)
        x_dot = x_dot + mul(tau, xacc)
        theta = theta + mul(tau, theta_dot)
        theta_dot = theta_dot + mul(tau, thetaacc)
        s[0], s[1], s[2], s[3] = x, x_dot, theta, theta_dot
        x_thr, th_thr = p.x_threshold, p.theta_threshold_radians
        term = x < -x_thr or x > x_thr or theta < -th_thr or theta > th_thr
        return one, term

    @djit
    def observe(s, out, row):
        for c in range(4):
            out[row, c] = s[c]

    return EnvFunctions(reset=reset, physics=physics, observe=observe)
