"""JAX backend specifics: devices, immutable arrays (rebinding instead of writing), Philox in uint32 arithmetic,
64-bit types, bad input, and the jax training stack's compiled stages.

The shared suites (parity, rollout, buffer) run over ``jax`` through the registry fixtures; this file
holds what only this backend has.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the jax backend needs JAX: pip install 'portkern[jax]'")

import portkern  # noqa: E402
from portkern import buffer, rng, step  # noqa: E402
from portkern.backends import _jax_ops as ops  # noqa: E402
from portkern.backends import backend_of, get_backend, probe  # noqa: E402
from portkern.policy import RandomPolicy  # noqa: E402
from portkern.identity import bench_class  # noqa: E402


@pytest.fixture(scope="module")
def jb():
    return get_backend("jax")


def test_probe_lists_the_cpu(jb):
    p = probe("jax", refresh=True)
    assert p.available and p.devices[0].startswith("host CPU")
    assert p.versions["jax"] == jax.__version__
    assert jb.describe()["jax_device"] == "cpu:0"
    assert bench_class(jb.name).stack_class == "framework compiled"


def test_unknown_device_names_the_devices():
    with pytest.raises(ValueError, match=r"device: no jax device 'quantum'.*cpu:0"):
        get_backend("jax", "quantum")


def test_x64_is_enabled_so_dtypes_survive(jb):
    for dt in (np.float64, np.int64, np.uint32, np.bool_):
        a = jb.from_host(np.arange(3).astype(dt))
        assert np.dtype(a.dtype) == np.dtype(dt)
    assert jb.supports_float64


def test_arrays_round_trip_and_belong_to_the_backend(jb):
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    a = jb.from_host(x)
    assert isinstance(a, jax.Array) and backend_of(a) is jb
    np.testing.assert_array_equal(jb.to_host(a), x)


def test_write_refuses_and_assign_returns_the_new_array(jb):
    dst = jb.zeros((4,), np.int32)
    with pytest.raises(TypeError, match="immutable.*assign"):
        jb.write(dst, np.ones(4, np.int32))
    got = jb.assign(dst, np.arange(4))
    assert np.dtype(got.dtype) == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.arange(4))
    np.testing.assert_array_equal(np.asarray(dst), np.zeros(4))  # the old array is untouched
    with pytest.raises(ValueError, match=r"src: expected shape \(4,\)"):
        jb.assign(dst, np.zeros(5))


@pytest.mark.parametrize("x64", [True, False], ids=["uint64-products", "uint32-only"])
def test_philox_in_uint32_words_matches_the_reference(jb, x64):
    """Both ways of forming a round's 64-bit products (one uint64 multiply with 64-bit types on, as the backend
    runs; 16-bit halves without them) give the reference's words, the extremes of uint32 included."""
    g = np.random.default_rng(7)
    ctr = g.integers(0, 2**32, (4, 500), dtype=np.uint64).astype(np.uint32)
    key = g.integers(0, 2**32, (2, 500), dtype=np.uint64).astype(np.uint32)
    ctr[:, :3], key[:, 3:6] = [0, 1, 2**32 - 1], [2**32 - 1, 0, 2**31]
    want = rng.philox4x32(ctr.T, key.T)
    with jax.enable_x64(x64):
        got = jax.jit(lambda c, k: ops.philox4x32(tuple(c), k[0], k[1]))(ctr, key)
        assert all(w.dtype == np.uint32 for w in got)
        np.testing.assert_array_equal(np.stack([np.asarray(w) for w in got], axis=1), want)
        # The words in pairs, as the slow build's callers kept them (the reset of a two-variable state, the
        # Box-Muller pair): each pair on its own, in one compiled program, as a scan body keeps it.
        for pair in ((0, 1), (2, 3)):
            two = jax.jit(lambda c, k, pair=pair: [ops.philox4x32(tuple(c), k[0], k[1])[i] for i in pair])(ctr, key)
            np.testing.assert_array_equal(np.stack([np.asarray(w) for w in two], axis=1), want[:, pair])
    assert jax.config.read("jax_enable_x64")  # the backend's setting is back


def test_the_benchmarks_first_build_draws_the_same_words():
    """bench/cpu/jax_philox.py times the first ``_mulhilo`` against this one: it must be the same Philox (what
    differs is only how XLA compiles it), and swapping it in must not outlive the benchmark's context."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "cpu"))
    try:
        import jax_philox
    finally:
        sys.path.pop(0)
    g = np.random.default_rng(11)
    ctr = g.integers(0, 2**32, (4, 300), dtype=np.uint64).astype(np.uint32)
    key = g.integers(0, 2**32, (2, 300), dtype=np.uint64).astype(np.uint32)
    want = rng.philox4x32(ctr.T, key.T)
    current = ops._mulhilo
    with jax_philox.old_build():
        assert ops._mulhilo is jax_philox.old_mulhilo
        got = jax.jit(lambda c, k: ops.philox4x32(tuple(c), k[0], k[1]))(ctr, key)
    assert ops._mulhilo is current
    np.testing.assert_array_equal(np.stack([np.asarray(w) for w in got], axis=1), want)


def test_step_returns_jax_arrays_and_keeps_earlier_ones(jb):
    env = step.make("CartPole-v1", 8, backend="jax", seed=3)
    first = env.reset()
    obs, reward, term, trunc = env.step(np.ones(8, np.int32))
    assert all(isinstance(x, jax.Array) for x in (obs, reward, term, trunc))
    assert obs is not first  # a new array each step: the one held from reset keeps its values
    ref = step.make("CartPole-v1", 8, backend="numpy", seed=3)
    np.testing.assert_array_equal(np.asarray(first), ref.reset())
    # Native actions are used as they are (no host round trip).
    env.step(jb.from_host(np.zeros(8, np.int32)))
    with pytest.raises(ValueError, match=r"actions: expected int array of shape \(8,\) with values in \[0, 2\)"):
        env.step(jb.from_host(np.full(8, 5, np.int32)))


def test_rollout_is_one_scan_and_matches_the_host_path(jb):
    env = step.make("Acrobot-v1", 16, backend="jax", seed=9)
    env.reset()
    env.set_state(steps=np.full(16, env.spec.max_episode_steps - 3))
    buf = env.rollout(8, RandomPolicy())
    host_env = step.make("Acrobot-v1", 16, backend="jax", seed=9)
    host_env.reset()
    host_env.set_state(steps=np.full(16, env.spec.max_episode_steps - 3))
    host = host_env.rollout(8, RandomPolicy(), path="host")
    for name in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(portkern.to_numpy(getattr(buf, name)), getattr(host, name), err_msg=name)
    assert portkern.to_numpy(buf.truncated).any()


def test_buffer_ops_return_jax_arrays(jb):
    r = jb.from_host(np.ones((5, 3), np.float32))
    f = jb.from_host(np.zeros((5, 3), bool))
    adv, ret = buffer.gae(r, r, r, f, f, gamma=0.9, lam=0.8)
    assert isinstance(adv, jax.Array) and isinstance(ret, jax.Array)
    want = buffer.gae(*(np.asarray(x) for x in (r, r, r, f, f)), gamma=0.9, lam=0.8)
    np.testing.assert_allclose(np.asarray(adv), want[0], rtol=1e-6)


def test_arrays_on_another_backend_are_refused(jb):
    with pytest.raises(TypeError, match="rewards: expected a NumPy array or a jax array"):
        buffer.gae(object(), np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2), bool), np.zeros((2, 2), bool),
                   gamma=0.9, lam=0.9, backend="jax")  # fmt: skip


# ---- the jax training stack --------------------------------------------------------------------
def test_jax_stack_parses_and_refuses_fused():
    from portkern.train.stacks import parse_stack

    s = parse_stack("jax@cpu")
    assert (s.backend, s.mode, s.device) == ("jax", "resident", "cpu")
    with pytest.raises(ValueError, match="compiles the whole rollout already"):
        parse_stack("jax+fused")


def test_jax_ppo_ring_keeps_the_last_finished_returns_in_order():
    """The on-device window of finished returns is what the torch loop's deque holds after the same episodes."""
    from portkern.train import config, jax_ppo

    task = config.task("CartPole-v1", num_envs=8, num_steps=32, total_timesteps=8 * 32 * 2, solve_window=4)
    st = jax_ppo.Static.of(task)
    state = jax_ppo.init_state(st, 5)
    state, out = jax.jit(lambda s: jax_ppo.rollout(st, s))(state)
    store = jax.device_get(out["store"])
    done = store["terminated"] | store["truncated"]
    ep = np.zeros(8, np.float32)
    finished = []
    for t in range(32):
        ep += store["rewards"][t]
        finished += list(ep[done[t]])
        ep[done[t]] = 0
    total = int(state["finished"])
    assert total == len(finished) > st.window  # a random CartPole policy ends many episodes in 256 steps
    ring = np.asarray(state["ring"])
    got = [ring[i % st.window] for i in range(total - st.window, total)]
    np.testing.assert_array_equal(got, finished[-st.window:])
    assert int(out["episodes"]) == total
    np.testing.assert_allclose(float(out["return_sum"]), sum(finished), rtol=1e-6)


def test_the_suites_copy_case_runs_on_immutable_arrays() -> None:
    # The bandwidth ceiling's copy case: jax has no array to copy into, so the case makes a new one.
    from portkern.portability.suite import prepare_copy

    case = prepare_copy(get_backend("jax"), 1 << 16)
    case.run()
    assert case.check().status == "pass"


_CACHE_SCRIPT = """
import os, sys, jax, jax.numpy as jnp
from portkern.backends.jax import use_compilation_cache
if sys.argv[1] == "user":
    jax.config.update("jax_compilation_cache_dir", os.path.join(os.environ["XDG_CACHE_HOME"], "mine"))
print(use_compilation_cache())
jax.jit(lambda x: jnp.sin(x) * 3 + 1)(jnp.arange(7.0)).block_until_ready()
"""


@pytest.mark.parametrize("who", ["portkern", "user"])
def test_compilation_cache_goes_under_portkerns_cache_unless_the_user_chose_one(tmp_path, who):
    # Process-wide JAX config: in a process of its own. A second process compiles from the files the first wrote.
    import os
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    want = tmp_path / ("mine" if who == "user" else "portkern/jax")
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, who], env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[-1] == str(want)
    if who == "portkern":  # every program cached, however short its compile
        assert any(want.iterdir()), "no compiled program was written"
    else:  # the user's cache and its settings as they were (JAX writes only compiles over 1 s there)
        assert not (tmp_path / "portkern" / "jax").exists()


def test_compilation_cache_is_left_off_where_its_folder_cannot_be_made(tmp_path):
    # A home that cannot hold the folder (here: XDG_CACHE_HOME is a file): no cache, and JAX compiles as before.
    import os
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = {**os.environ, "XDG_CACHE_HOME": str(blocker)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, "portkern"], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "None"
