"""The NumPy reference is written against the Python array API standard: it runs unchanged on
array-api-strict (the standard and nothing more), bit for bit as on NumPy, so it runs on every
conforming library (PyTorch through array-api-compat, CuPy, JAX)."""

from __future__ import annotations

import numpy as np
import pytest

from portkern import envs, rng
from portkern.envs.base import ParamView

xs = pytest.importorskip("array_api_strict", reason="pip install array-api-strict (in the test extra)")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("env_id", list(envs.ENVS))
def test_reference_on_array_api_strict_is_bit_identical_to_numpy(env_id, dtype):
    spec = envs.get(env_id)
    g = np.random.default_rng(3)
    n = 500
    states = spec.parity_states(g, n).astype(dtype)
    actions = spec.random_actions(g, n, overshoot=1.3)
    if not spec.is_discrete and spec.action_dim == 1:  # the reference takes [N] for a one-wide Box
        actions = actions[:, 0]
    kp = spec.param_vector(spec.defaults, np.dtype(dtype))
    p = ParamView(spec.field_names, xs.asarray(kp.as_array()), kp.dtype)  # 0-d arrays of the env dtype
    host = tuple(states[:, i].copy() for i in range(spec.state_dim))
    strict = tuple(xs.asarray(s) for s in host)
    want, got = spec.step(host, actions, kp), spec.step(strict, xs.asarray(actions), p)
    for w, g_ in zip((*want[0], want[1], want[2]), (*got[0], got[1], got[2])):
        np.testing.assert_array_equal(np.asarray(g_), w)
    np.testing.assert_array_equal(np.asarray(spec.observe(strict)), spec.observe(host))
    sym = rng.symmetric(rng.draw(5, np.arange(n, dtype=np.uint32), np.zeros(n, np.uint32), rng.STREAM_RESET), dtype)
    for w, g_ in zip(spec.reset(sym, kp), spec.reset(xs.asarray(sym), p)):
        np.testing.assert_array_equal(np.asarray(g_), w)
