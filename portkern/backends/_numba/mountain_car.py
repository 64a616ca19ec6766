"""MountainCar-v0 (portkern/envs/mountain_car.py) in Numba-CUDA: state (position, velocity)."""

from __future__ import annotations

from collections.abc import Callable

from .common import EnvFunctions, Toolkit


def reset_and_observe(k: Toolkit) -> tuple[Callable, Callable]:
    """The reset and observe of the (position, velocity) state, shared with MountainCarContinuous, whose
    state, start distribution and observation are MountainCar's."""
    mul, zero = k.mul, k.zero

    @k.djit
    def reset(r, p, s):
        s[0] = p.reset_center + mul(p.reset_half, r[0])
        s[1] = zero

    @k.djit
    def observe(s, out, row):
        out[row, 0] = s[0]
        out[row, 1] = s[1]

    return reset, observe


def build(k: Toolkit) -> EnvFunctions:
    T, mul, zero, one, djit, clip = k.T, k.mul, k.zero, k.one, k.djit, k.clip
    cos = k.cos
    three = T(3)

    reset, observe = reset_and_observe(k)

    @djit
    def physics(s, action, p):
        min_pos, max_speed = p.min_position, p.max_speed
        position, velocity = s[0], s[1]
        push = mul(T(action - 1), p.force)
        velocity = velocity + (push + mul(T(cos(mul(three, position))), -p.gravity))
        velocity = clip(velocity, -max_speed, max_speed)
        position = position + velocity
        position = clip(position, min_pos, p.max_position)
        if position == min_pos and velocity < zero:
            velocity = zero
        s[0], s[1] = position, velocity
        term = position >= p.goal_position and velocity >= p.goal_velocity
        return -one, term

    return EnvFunctions(reset=reset, physics=physics, observe=observe)
