"""Rollout-buffer ops: the reference against per-env loops and hand-computed cases, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portkern
from portkern import buffer


def np_(x):
    return portkern.to_numpy(x)


def loop_gae(r, v, nv, term, trunc, gamma, lam):
    """The published recursion, one env and one step at a time, in float64."""
    T, N = r.shape
    adv = np.zeros((T, N))
    for i in range(N):
        a = 0.0
        for t in reversed(range(T)):
            delta = r[t, i] + gamma * nv[t, i] * (0.0 if term[t, i] else 1.0) - v[t, i]
            a = delta + gamma * lam * (0.0 if (term[t, i] or trunc[t, i]) else 1.0) * a
            adv[t, i] = a
    return adv, adv + v


def col(*xs, dtype=np.float64):
    return np.array(xs, dtype=dtype)[:, None]


def _hand_gae(backend, term=None, trunc=None):
    """GAE of the hand-computed case on ``backend``: 3 steps of 1 env, rewards 1, values 0, next values 2,
    gamma = lam = 0.5, no episode ending unless ``term``/``trunc`` ([3, 1] flags) say so."""
    r, v, nv = col(1, 1, 1), col(0, 0, 0), col(2, 2, 2)
    f = np.zeros((3, 1), bool)
    flags = (f if term is None else term, f if trunc is None else trunc)
    return buffer.gae(*(backend.from_host(a) for a in (r, v, nv, *flags)), gamma=0.5, lam=0.5)


def test_gae_hand_computed_no_done(backend):
    adv, ret = _hand_gae(backend)
    np.testing.assert_allclose(np_(adv)[:, 0], [2.625, 2.5, 2.0])
    np.testing.assert_allclose(np_(ret)[:, 0], [2.625, 2.5, 2.0])


def test_gae_termination_does_not_bootstrap(backend):
    term = np.array([[False], [True], [False]])
    adv, _ = _hand_gae(backend, term=term)
    np.testing.assert_allclose(np_(adv)[:, 0], [2.25, 1.0, 2.0])


def test_gae_truncation_bootstraps_and_cuts_the_trace(backend):
    trunc = np.array([[False], [True], [False]])
    adv, _ = _hand_gae(backend, trunc=trunc)
    np.testing.assert_allclose(np_(adv)[:, 0], [2.5, 2.0, 2.0])


@settings(max_examples=40, deadline=None)
@given(
    T=st.integers(1, 12), N=st.integers(1, 6), gamma=st.floats(0, 1), lam=st.floats(0, 1),
    seed=st.integers(0, 2**31),
)  # fmt: skip
def test_gae_reference_equals_the_per_env_loop(T, N, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    r, v, nv = (rng.normal(size=(T, N)) for _ in range(3))
    term, trunc = rng.random((T, N)) < 0.2, rng.random((T, N)) < 0.2
    adv, ret = buffer.gae(r, v, nv, term, trunc, gamma=gamma, lam=lam)
    exp_adv, exp_ret = loop_gae(r, v, nv, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv, exp_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret, exp_ret, rtol=1e-12, atol=1e-12)


def _hand_returns(backend, term=None, trunc=None, boot=None):
    """Discounted returns of the hand-computed case on ``backend``: 3 steps of 1 env, rewards 1, gamma 0.5,
    bootstrap value 4 after the last step (or the per-step values ``boot``), flags ``term``/``trunc``."""
    r = col(1, 1, 1)
    f = np.zeros((3, 1), bool)
    ins = (r, f if term is None else term, f if trunc is None else trunc, np.array([4.0]) if boot is None else boot)
    return buffer.discounted_returns(*(backend.from_host(a) for a in ins), gamma=0.5)


def test_discounted_returns_hand_computed(backend):
    out = _hand_returns(backend)
    np.testing.assert_allclose(np_(out)[:, 0], [2.25, 2.5, 3.0])


def test_discounted_returns_termination_cuts(backend):
    term = np.array([[False], [True], [False]])
    out = _hand_returns(backend, term=term)
    np.testing.assert_allclose(np_(out)[:, 0], [1.5, 1.0, 3.0])


def test_discounted_returns_truncation_bootstraps_from_per_step_values(backend):
    trunc = np.array([[False], [True], [False]])
    boot = col(5, 6, 4)
    out = _hand_returns(backend, trunc=trunc, boot=boot)
    np.testing.assert_allclose(np_(out)[:, 0], [3.0, 4.0, 3.0])


def test_discounted_returns_truncation_without_per_step_values_ends_the_return(backend):
    trunc = np.array([[False], [True], [False]])
    out = _hand_returns(backend, trunc=trunc)
    np.testing.assert_allclose(np_(out)[:, 0], [1.5, 1.0, 3.0])


def test_normalize_gives_zero_mean_unit_std(backend, rng):
    x = (rng.normal(size=(64, 33)) * 4 - 7).astype(np.float32)
    out = np_(buffer.normalize(backend.from_host(x)))
    assert out.shape == x.shape and out.dtype == np.float32
    assert abs(out.mean()) < 1e-5 and abs(out.std() - 1) < 1e-4


def test_normalize_constant_input_is_zero_not_nan(backend):
    out = np_(buffer.normalize(backend.from_host(np.full(100, 3.5, np.float32))))
    np.testing.assert_array_equal(out, 0.0)


def test_gather_rows_by_permutation(backend, rng):
    x = rng.normal(size=(12, 3, 2))
    idx = rng.permutation(12)
    out = np_(buffer.gather(backend.from_host(x), backend.from_host(idx)))
    np.testing.assert_array_equal(out, x[idx])


def test_explicit_backend_uploads_numpy_inputs(backend):
    x = np.arange(6, dtype=np.float32)
    out = buffer.normalize(x, backend=backend.name)
    assert backend.owns(out)
