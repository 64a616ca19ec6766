"""Every param, changed alone, on every kernel backend against the reference.

At Gymnasium's defaults several params are equal (Pendulum's ``x_init`` is pi; in Acrobot
``c_a`` = ``c_d`` and ``c_c`` = ``m2`` = ``i1`` = ``i2``), so a kernel that read the wrong one
would pass every parity test run at the defaults. Here each param in turn moves to a value that
changes the reference's dynamics (checked first, so the test cannot pass vacuously) and every
backend must follow; the last test proves the check catches two params whose roles are swapped.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from portkern import _kernels, envs, step
from portkern.backends import get_backend, probe
from portkern.envs.base import Param

from .conftest import small_n
from .envstates import random_actions

CASES = [
    pytest.param(env_id, p.name, id=f"{env_id}-{p.name}")
    for env_id, spec in envs.ENVS.items()
    for p in spec.params
    if isinstance(p, Param)
]


def _states(spec, n: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` of the env's parity states (packed near its thresholds and clips) with actions, leaving
    out knife edges: states whose one-step termination flips when the state moves by ~10 x the
    tolerance, where a kernel's rounding alone could flip it. Deterministic, so made once per env and
    size (five reference steps of 8n states: 0.3 s for Chain-v0 at n = 1,037, called 4 times a case);
    each call gets its own copies."""
    states, actions = _states_once(spec.id, n, tol)
    return states.copy(), actions.copy()


@functools.lru_cache(maxsize=None)
def _states_once(env_id: str, n: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    spec = envs.get(env_id)
    rng = np.random.default_rng(99)
    cand = spec.parity_states(rng, 8 * n)
    acts = random_actions(spec.id, 8 * n, rng)
    p = spec.param_vector(spec.defaults, np.float64)
    # The reference takes [N] for a one-wide action and [N, action_dim] for a wider one (EnvSpec's docstring).
    ref_acts = np.asarray(acts).reshape(len(cand), -1)[:, 0] if spec.action_dim == 1 else np.asarray(acts)
    term = lambda s: spec.step(tuple(s.T), ref_acts, p)[2]  # noqa: E731
    base = term(cand)
    stable = np.ones(len(cand), bool)
    for k in range(4):
        jitter = rng.uniform(-1, 1, cand.shape) * 10 * tol * np.maximum(1.0, np.abs(cand))
        stable &= term(cand + jitter) == base
    keep = np.sort(rng.permutation(np.nonzero(stable)[0])[:n])  # a sample of every packed region
    assert len(keep) == n, f"{spec.id}: too few parity states away from knife edges"
    return cand[keep], acts[keep]


def _outcome(backend, env_id: str, params: dict, dtype: str, n: int, seed: int = 7):
    """Reset draws and one step from the env's parity states, as host arrays."""
    spec = envs.get(env_id)
    states, actions = _states(spec, n, spec.parity_tolerance["float32"])
    env = step.make(env_id, n, backend=backend, dtype=dtype, params=params, seed=seed)
    host = env.backend.to_host  # the env's own backend: a fresh instance is not in the registry
    env.reset()
    out = {"reset": env.get_state()["state"]}
    env.set_state(state=states, steps=np.zeros(n, np.int64))
    obs, reward, term, trunc = env.step(actions)
    out.update(reward=host(reward), terminated=host(term), final_obs=host(env.final_obs))
    done = out["terminated"] | host(trunc)
    out["state"] = np.where(done[:, None], np.nan, env.get_state()["state"])  # finished envs were reset
    return out


def _differences(got: dict, want: dict, tol: float) -> list[str]:
    bad = []
    for key, w in want.items():
        g = got[key]
        if w.dtype == bool:
            if not np.array_equal(g, w):
                bad.append(f"{key}: {int((g != w).sum())} of {w.size} differ")
        elif not np.allclose(g, w, rtol=tol, atol=tol, equal_nan=True):
            err = np.nanmax(np.abs(g.astype(np.float64) - w))
            bad.append(f"{key}: max error {err:.3g} > {tol:g}")
    return bad


def _moved(spec, name: str, n: int) -> dict:
    value = next(p for p in spec.user_params if p.name == name).perturbed()
    perturbed = {name: value}
    spec.resolve_params(perturbed)  # the perturbation is inside the param's domain
    ref = _outcome("numpy", spec.id, perturbed, "float64", n)
    base = _outcome("numpy", spec.id, {}, "float64", n)
    assert _differences(ref, base, 0.0), (
        f"{spec.id}: changing {name} to {value!r} does not move the reference's reset or step on "
        f"these states; give Param({name!r}) a perturb value that does"
    )
    return perturbed


@pytest.mark.parametrize(("env_id", "name"), CASES)
def test_each_param_alone_moves_every_backend_like_the_reference(kernel_backend, env_id, name):
    spec = envs.get(env_id)
    missing = kernel_backend.missing_env_kernel(spec)
    if missing is not None:  # skip before the reference's work below, not at make() after it
        pytest.skip(missing)
    n = small_n(kernel_backend)
    perturbed = _moved(spec, name, n)
    dtype = "float64" if kernel_backend.supports_float64 else "float32"
    want = _outcome("numpy", env_id, perturbed, dtype, n)
    got = _outcome(kernel_backend.name, env_id, perturbed, dtype, n)
    bad = _differences(got, want, spec.parity_tolerance[dtype])
    assert not bad, f"{kernel_backend.name}, {env_id} with {perturbed}: " + "; ".join(bad)


def test_a_swapped_pair_of_params_is_caught(monkeypatch):
    # Exchange two fields' names in the generated struct (as a kernel reading the wrong field
    # would) and rebuild: c_a and c_d are equal at Acrobot's defaults, so only a perturbation of
    # a param feeding one of them, here link_mass_1 (c_a = m1 * lc1**2), can tell them apart.
    if not probe("opencl").available:
        pytest.fail(f"the swapped-params proof runs on OpenCL, which is unavailable: {probe('opencl').reason}")
    spec = envs.get("Acrobot-v1")
    real = _kernels.params_header()
    swapped = real.replace("REAL c_a;", "REAL @tmp;").replace("REAL c_d;", "REAL c_a;").replace("REAL @tmp;", "REAL c_d;")
    assert swapped != real
    b = type(get_backend("opencl"))()  # a fresh instance: nothing cached from the real sources
    n = small_n(b)
    defaults = {}
    perturbed = {"link_mass_1": next(p for p in spec.user_params if p.name == "link_mass_1").perturbed()}
    try:
        _kernels.load_source.cache_clear()
        monkeypatch.setattr(_kernels, "params_header", lambda: swapped)
        want_default = _outcome("numpy", spec.id, defaults, "float32", n)
        got_default = _outcome(b, spec.id, defaults, "float32", n)
        want = _outcome("numpy", spec.id, perturbed, "float32", n)
        got = _outcome(b, spec.id, perturbed, "float32", n)
    finally:
        monkeypatch.undo()
        _kernels.load_source.cache_clear()
    tol = spec.parity_tolerance["float32"]
    assert not _differences(got_default, want_default, tol), "at the defaults the swap is invisible"
    assert _differences(got, want, tol), "the perturbation did not expose the swapped params"
