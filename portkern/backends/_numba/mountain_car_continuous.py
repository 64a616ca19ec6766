"""MountainCarContinuous-v0 (portkern/envs/mountain_car_continuous.py) in Numba-CUDA.

State (position, velocity).
"""

from __future__ import annotations


from .common import EnvFunctions, Toolkit
from .mountain_car import reset_and_observe


def build(k: Toolkit) -> EnvFunctions:
    T, mul, zero, djit, vmin, vmax = k.T, k.mul, k.zero, k.djit, k.vmin, k.vmax
    cos = k.cos
    three, tenth, hundred = T(3), T(0.1), T(100)

    reset, observe = reset_and_observe(k)

    @djit
    def physics(s, action, p):
        max_speed, min_pos = p.max_speed, p.min_position
        position, velocity = s[0], s[1]
        a = T(action)
        force = vmin(vmax(a, p.min_action), p.max_action)
        velocity = velocity + (mul(force, p.power) - mul(p.gravity, T(cos(mul(three, position)))))
        velocity = vmin(velocity, max_speed)
        velocity = vmax(velocity, -max_speed)
        position = position + velocity
        position = vmin(position, p.max_position)
        position = vmax(position, min_pos)
        if position == min_pos and velocity < zero:
            velocity = zero
        s[0], s[1] = position, velocity
        term = position >= p.goal_position and velocity >= p.goal_velocity
        # The action cost uses the unclipped action, as Gymnasium's does.
        reward = (hundred if term else zero) - mul(mul(a, a), tenth)
        return reward, term

    return EnvFunctions(reset=reset, physics=physics, observe=observe)
