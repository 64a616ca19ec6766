"""PyTorch backend specifics: devices, tensors in and out, zero-copy, Philox in tensor ops, bad input,
torch.compile parity, and PPO on the torch backend.

The shared suites (parity, step, rollout, validation, buffer, perturbation) run over ``torch``
through the registry fixtures; this file holds what only a framework stack has. The compiled
backend compiles each function once per session on small inputs: compiling is the slow part.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs PyTorch: pip install 'portkern[torch]'")

import portkern
from portkern import buffer, envs, rng, step
from portkern.backends import _torch_ops as ops
from portkern.backends import backend_of, get_backend, probe
from portkern.backends.numpy import reset_states
from portkern.policy import MLPPolicy, RandomPolicy

FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")
#: Inductor imports torch's own mkldnn helpers, which use the deprecated torch.jit.script_method.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def np_(x):
    return portkern.to_numpy(x)


@pytest.fixture(scope="module")
def tb():
    return get_backend("torch")


@pytest.fixture(scope="module")
def compiled():
    p = probe("torch_compile")
    if not p.available:  # torch is installed, so torch.compile must work here (it needs a host g++)
        pytest.fail(f"torch_compile is unavailable with torch installed: {p.reason}")
    return get_backend("torch_compile")


# ---- devices ------------------------------------------------------------------------------------
def test_probe_lists_the_cpu_and_every_accelerator():
    p = probe("torch", refresh=True)
    assert p.available and p.devices[0].startswith("host CPU")
    assert p.versions["torch"] == torch.__version__
    if torch.cuda.is_available():
        assert len(p.devices) >= 1 + torch.cuda.device_count()


def test_portkern_devices_lists_torch_with_its_devices(capsys):
    from portkern import cli

    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "torch_compile" in out and "host CPU" in out


@pytest.mark.parametrize("device", ["cpu", "host", "host CPU", "CPU"])
def test_device_strings_and_names_select_the_cpu(device):
    b = get_backend("torch", device)
    assert b.device == torch.device("cpu") and b.device_name == probe("torch").devices[0]


def test_unknown_device_names_the_devices_here():
    with pytest.raises(ValueError, match=r"device: no torch device 'vulkan' here; devices: cpu \(host CPU"):
        get_backend("torch", "vulkan")


def test_every_listed_device_runs_an_env():
    for label in probe("torch").devices:
        b = get_backend("torch", label)
        assert b.device_name == label  # the benchmark opens targets by name and checks this
        env = step.make("CartPole-v1", 16, backend=b, seed=3)
        obs = env.reset()
        assert obs.device == b.device


def test_extras_name_the_torch_extra():
    from portkern.backends import KNOWN

    assert KNOWN["torch"] == KNOWN["torch_compile"] == "torch"


# ---- tensors in, tensors out ----------------------------------------------------------------------
def test_env_arrays_are_tensors_on_the_env_device(tb):
    env = step.make("Pendulum-v1", 33, backend="torch", dtype="float64")
    obs = env.reset()
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float64 and obs.device == tb.device
    obs2, reward, term, trunc = env.step(torch.zeros(33, 1, dtype=torch.float32))
    assert obs2 is obs  # the env's own buffer, reused
    assert reward.dtype == torch.float64 and term.dtype == trunc.dtype == torch.bool
    buf = env.rollout(4, RandomPolicy())
    assert all(isinstance(getattr(buf, f), torch.Tensor) for f in FIELDS)
    assert buf.actions.dtype == torch.float32 and buf.obs.shape == (4, 33, 3)


def test_buffer_ops_take_and_return_tensors(tb):
    r = torch.ones(5, 3)
    f = torch.zeros(5, 3, dtype=torch.bool)
    adv, ret = buffer.gae(r, r, r, f, f, gamma=0.9, lam=0.8)
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor) and adv.dtype == torch.float32
    assert backend_of(adv) is tb
    out = buffer.gather(torch.arange(12.0).reshape(6, 2), torch.tensor([5, 0], dtype=torch.int32))
    assert torch.equal(out, torch.tensor([[10.0, 11.0], [0.0, 1.0]]))
    assert isinstance(buffer.normalize(torch.arange(4.0)), torch.Tensor)


def test_native_actions_and_buffers_never_go_through_the_host(tb, monkeypatch):
    env = step.make("CartPole-v1", 64, backend="torch", seed=1)
    env.reset()
    policy = MLPPolicy.init(env.spec, hidden=8)
    env.rollout(3, policy)  # uploads the policy's weights (once per policy) and the env's params

    def no_host(*_args, **_kw):
        raise AssertionError("a host transfer on the zero-copy path")

    for name in ("to_host", "write", "from_host"):
        monkeypatch.setattr(tb, name, no_host)
    actions = torch.ones(64, dtype=torch.int32)
    env.step(actions)
    env.step(torch.zeros(64, 1, dtype=torch.int32).view(64))
    r = torch.rand(8, 64)
    buffer.gae(r, r, r, r > 2, r > 2, gamma=0.99, lam=0.95)
    buffer.discounted_returns(r, r > 2, r > 2, r[-1], gamma=0.99)
    buffer.gather(r, torch.arange(8))
    buffer.normalize(r)
    env.rollout(3, policy)


# ---- Philox in tensor ops ------------------------------------------------------------------------
@pytest.mark.parametrize("rounds", [7, 10])
def test_philox_in_int64_tensor_ops_is_bit_identical_to_the_reference(rounds):
    g = np.random.default_rng(0)
    ctr = g.integers(0, 2**32, (4096, 4), dtype=np.uint64).astype(np.uint32)
    key = g.integers(0, 2**32, (4096, 2), dtype=np.uint64).astype(np.uint32)
    ctr[:4] = [[0] * 4, [2**32 - 1] * 4, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0] * 4]
    key[:4] = [[0, 0], [2**32 - 1] * 2, [0xA4093822, 0x299F31D0], [0, 0]]
    want = rng.philox4x32(ctr, key, rounds=rounds)
    t = torch.from_numpy(ctr.astype(np.int64))
    k = torch.from_numpy(key.astype(np.int64))
    got = ops.philox4x32(tuple(t[:, i] for i in range(4)), k[:, 0], k[:, 1], rounds=rounds)
    np.testing.assert_array_equal(torch.stack(got, dim=1).numpy().astype(np.uint32), want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reset_after_many_episodes_matches_the_reference_at_the_uint32_wrap(dtype):
    # Episode counters are uint32, updated through int64 arithmetic modulo 2**32.
    n = 40
    env = step.make("MountainCar-v0", n, backend="torch", seed=8, dtype=dtype)
    env.reset()
    near = np.arange(n, dtype=np.uint32) + np.uint32(2**32 - 20)
    env._bufs.episodes.copy_(torch.from_numpy(near))
    env.reset()  # no seed: every env starts its next episode, some wrap to 0
    spec, kp = env.spec, env.spec.param_vector(env.spec.defaults, np.dtype(dtype))
    want = reset_states(spec, kp, 8, np.arange(n, dtype=np.uint32), near + np.uint32(1))
    np.testing.assert_array_equal(env.get_state()["state"], np.stack(want, axis=1))
    assert np_(env._bufs.episodes).dtype == np.uint32 and np_(env._bufs.episodes)[19] == 0


# ---- bad input -----------------------------------------------------------------------------------
def _snapshot(env):
    s = env.get_state()
    return s["state"].copy(), s["steps"].copy(), np_(env.final_obs).copy(), np_(env._bufs.episodes).copy()


@pytest.mark.parametrize(
    "make_actions,exc,match",
    [
        pytest.param(lambda: torch.ones(16, dtype=torch.int32)[::2].clone().repeat(2)[::2], ValueError,
                     r"actions: expected a C-contiguous array", id="non-contiguous"),
        pytest.param(lambda: torch.full((8,), 3, dtype=torch.int32), ValueError, r"got values in \[3, 3\]", id="range"),
        pytest.param(lambda: torch.ones(8, dtype=torch.bfloat16), TypeError, "actions", id="bfloat16"),
        pytest.param(lambda: torch.ones(7, dtype=torch.int32), ValueError, r"shape \(8,\)", id="short"),
    ],
)
def test_bad_tensor_actions_are_rejected_without_mutation(make_actions, exc, match):
    env = step.make("CartPole-v1", 8, backend="torch", seed=3)
    env.reset()
    env.step(torch.ones(8, dtype=torch.int32))
    snap = _snapshot(env)
    with pytest.raises(exc, match=match):
        env.step(make_actions())
    for a, b in zip(snap, _snapshot(env)):
        np.testing.assert_array_equal(a, b)


def test_nan_tensor_actions_are_rejected_without_mutation():
    env = step.make("Pendulum-v1", 8, backend="torch", seed=3)
    env.reset()
    snap = _snapshot(env)
    bad = torch.zeros(8, 1)
    bad[5] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(bad)
    for a, b in zip(snap, _snapshot(env)):
        np.testing.assert_array_equal(a, b)


def test_buffer_ops_reject_bad_tensors_naming_the_argument():
    r = torch.zeros(4, 3)
    f = torch.zeros(4, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match="terminated: expected a bool array"):
        buffer.gae(r, r, r, r, f, gamma=0.9, lam=0.9)
    with pytest.raises(TypeError, match="next_values: expected dtype float32"):
        buffer.gae(r, r, r.double(), f, f, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match=r"indices: expected values in \[0, 3\]"):
        buffer.gather(r, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="x: expected a C-contiguous array"):
        buffer.normalize(r.t())


@pytest.mark.parametrize(("device_type", "finished", "resets"), [("cpu", [], 1), ("cuda", [], 0), ("cuda", [3], 1)])
def test_compiled_autoreset_skips_an_empty_reset_on_a_gpu(compiled, monkeypatch, device_type, finished, resets):
    """Inductor's Triton launcher divides by zero on an empty unbacked size (PyTorch 2.11, the first
    H200 run): on a GPU, no env finished means no reset call; the CPU keeps the empty call, which
    compiles the reset on the first step."""
    calls = []
    monkeypatch.setattr(compiled, "_reset_some", lambda *a: calls.append(a[4].tolist()))
    monkeypatch.setattr(compiled, "device", torch.device(device_type))
    flags = torch.zeros(6, dtype=torch.bool)
    flags[finished] = True
    compiled._autoreset(None, None, flags, None, 0, False)
    assert len(calls) == resets and all(c == finished for c in calls)


def test_rollout_rejects_an_mlp_of_the_wrong_size(tb):
    env = step.make("CartPole-v1", 8, backend="torch")
    env.reset()
    buf = env.rollout_buffer(2)
    policy = MLPPolicy.init(env.spec, hidden=8)
    with pytest.raises(ValueError, match="policy_params: expected 131 floats"):
        tb.env_rollout(env.spec, env._bufs, policy, torch.zeros(7), buf, env._param_vector, 0, 500, "same_step", 2)


# ---- torch.compile: parity against the reference and eager ----------------------------------------
# Compiled code differs from eager PyTorch by float rounding only: Inductor vectorises sin, cos, exp
# and tanh its own way (a few ulp), computes remainder as a - b * floor(a / b) and sums reductions
# in another order. Steps are therefore held to the env's own kernel tolerance (spec.parity_tolerance,
# as every kernel backend is), buffer ops to float32 rounding (1e-6, 1e-5 for normalize's
# reductions); resets, flags and step counters use exact operations only and must agree bit for bit.
N_COMPILE = 257


@pytest.mark.parametrize(("env_id", "autoreset"), [("CartPole-v1", "same_step"), ("Pendulum-v1", "next_step")])
def test_compiled_step_matches_the_reference(compiled, env_id, autoreset):
    spec = envs.get(env_id)
    g = np.random.default_rng(5)
    lo, hi = spec.test_state_box
    ref = step.make(env_id, N_COMPILE, backend="numpy", seed=4, autoreset=autoreset)
    dev = step.make(env_id, N_COMPILE, backend=compiled, seed=4, autoreset=autoreset)
    for env in (ref, dev):
        env.reset()
    np.testing.assert_array_equal(dev.get_state()["state"], ref.get_state()["state"])
    states = g.uniform(lo, hi, (N_COMPILE, spec.state_dim))
    limit = spec.max_episode_steps
    for env in (ref, dev):
        env.set_state(state=states, steps=np.where(np.arange(N_COMPILE) % 3 == 0, limit - 2, 0))
    tol = spec.parity_tolerance["float32"]
    for t in range(4):  # crosses the time limit: truncation, then (next_step) the reset step
        actions = spec.random_actions(g, N_COMPILE)
        r_out, d_out = ref.step(actions), dev.step(actions)
        np.testing.assert_array_equal(np_(d_out[2]), r_out[2], err_msg=f"terminated, step {t}")
        np.testing.assert_array_equal(np_(d_out[3]), r_out[3], err_msg=f"truncated, step {t}")
        np.testing.assert_allclose(np_(d_out[1]), r_out[1], rtol=tol, atol=tol, err_msg=f"reward, step {t}")
        np.testing.assert_allclose(np_(d_out[0]), r_out[0], rtol=tol, atol=tol, err_msg=f"obs, step {t}")
        np.testing.assert_allclose(np_(dev.final_obs), ref.final_obs, rtol=tol, atol=tol)
        ds, rs = dev.get_state(), ref.get_state()
        np.testing.assert_array_equal(ds["steps"], rs["steps"])
        reset = ds["steps"] == 0
        np.testing.assert_array_equal(ds["state"][reset], rs["state"][reset])  # reset draws: exact
    assert f"pk_{spec.kernel}_step_{autoreset}" in compiled.compile_seconds  # compile time, kept apart


def test_compiled_fused_rollout_equals_the_host_path(compiled):
    env_f = step.make("CartPole-v1", N_COMPILE, backend=compiled, seed=21)
    env_h = step.make("CartPole-v1", N_COMPILE, backend="numpy", seed=21)
    for env in (env_f, env_h):
        env.reset()
        env.set_state(steps=np.full(N_COMPILE, env.spec.max_episode_steps - 3))
    fused = env_f.rollout(6, RandomPolicy())
    host = env_h.rollout(6, RandomPolicy(), path="host")
    tol = env_f.spec.parity_tolerance["float32"]
    for name in FIELDS:
        got, want = np_(getattr(fused, name)), getattr(host, name)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
        else:  # actions from Philox, flags: exact
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_compiled_buffer_ops_match_the_reference(compiled):
    g = np.random.default_rng(7)
    shape = (5, 37)
    r, v, nv = (g.normal(size=shape).astype(np.float32) for _ in range(3))
    term, trunc = g.random(shape) < 0.2, g.random(shape) < 0.1
    up = [compiled.from_host(a) for a in (r, v, nv, term, trunc)]
    adv, ret = buffer.gae(*up, gamma=0.99, lam=0.95, backend=compiled)
    want_adv, want_ret = buffer.gae(r, v, nv, term, trunc, gamma=0.99, lam=0.95)
    np.testing.assert_allclose(np_(adv), want_adv, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np_(ret), want_ret, rtol=1e-6, atol=1e-6)
    for boot in (nv, nv[-1].copy()):
        got = buffer.discounted_returns(up[0], up[3], up[4], compiled.from_host(boot), gamma=0.97, backend=compiled)
        want = buffer.discounted_returns(r, term, trunc, boot, gamma=0.97)
        np.testing.assert_allclose(np_(got), want, rtol=1e-6, atol=1e-6)
    x = (g.normal(size=4099) * 3 + 5).astype(np.float32)
    got = buffer.normalize(compiled.from_host(x), backend=compiled)
    np.testing.assert_allclose(np_(got), buffer.normalize(x), rtol=1e-5, atol=1e-5)
    rows = g.normal(size=(300, 4)).astype(np.float32)
    for idx_dtype in (np.int32, np.int64):
        idx = g.permutation(300)[:77].astype(idx_dtype)
        got = buffer.gather(compiled.from_host(rows), compiled.from_host(idx), backend=compiled)
        np.testing.assert_array_equal(np_(got), rows[idx])
    # normalize and gather on CPU are the eager ATen ops by design (Inductor's float64-cast sum is slower there;
    # a gather is one indexed copy that index_select also range-checks).
    on_cpu = compiled.device.type == "cpu"
    compiled_ops = {"pk_gae", "pk_discounted_returns"} | (set() if on_cpu else {"pk_normalize", "pk_gather"})
    assert compiled_ops <= set(compiled.compile_seconds), compiled.compile_seconds
    assert ("pk_normalize" in compiled.compile_seconds) != on_cpu, compiled.compile_seconds
    assert ("pk_gather" in compiled.compile_seconds) != on_cpu, compiled.compile_seconds


# ---- the reference on tensors -----------------------------------------------------------------------
@pytest.mark.parametrize("env_id", list(envs.ENVS))
def test_the_reference_runs_on_tensors(env_id):
    # One source of physics: the NumPy reference itself, called with torch tensors and params on
    # the device, agrees with its NumPy run to the env's tolerance (libm ulps) and exactly on flags.
    from portkern.envs.base import ParamView

    spec = envs.get(env_id)
    g = np.random.default_rng(1)
    states = spec.parity_states(g, 600)
    actions = spec.random_actions(g, 600)[..., 0] if spec.action_dim == 1 and not spec.is_discrete else spec.random_actions(g, 600)
    kp = spec.param_vector(spec.defaults, np.float64)
    want = spec.step(tuple(states.T), actions, kp)
    p = ParamView(spec.field_names, torch.from_numpy(kp.as_array()), kp.dtype)
    got = spec.step(tuple(torch.from_numpy(s.copy()) for s in states.T), torch.from_numpy(actions), p)
    tol = spec.parity_tolerance["float64"]
    for g_s, w_s in zip(got[0], want[0]):
        np.testing.assert_allclose(g_s.numpy(), w_s, rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1].numpy(), want[1], rtol=tol, atol=tol)
    np.testing.assert_array_equal(got[2].numpy(), want[2])


# ---- PPO on the torch backend -----------------------------------------------------------------------
PPO_PATH = Path(__file__).resolve().parents[1] / "examples" / "ppo.py"


@pytest.fixture(scope="module")
def ppo():
    spec = importlib.util.spec_from_file_location("portkern_example_ppo_torch", PPO_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_ppo_on_the_torch_backend_learns_and_moves_no_data(ppo):
    args = ppo.parse_args(["--backend", "torch", "--num-envs", "8", "--num-steps", "64",
                           "--total-timesteps", str(12 * 8 * 64), "--log-every", "0", "--seed", "1"])  # fmt: skip
    result = ppo.train(args)
    assert result.updates == 12 and result.agent_device == "cpu" and result.mode == "resident"
    per_update = [np.nan if row[4] is None else row[4] for row in result.curve]  # this update's episodes
    late = np.nanmean(per_update[-3:])
    assert late >= 2 * per_update[0], per_update
    # Zero-copy: the env's tensors feed the agent, and the agent's actions the env, as they are.
    assert result.phases["move"] == 0.0, result.phases


@pytest.mark.parametrize("name", ["torch", "torch_compile"])
def test_cpu_gather_checks_indices_in_its_one_pass(name, monkeypatch):
    """On a CPU, index_select checks every index as it copies, so buffer.gather runs no range reduction on good
    indices (a second pass over them), and words a bad one's error from the range only once the copy refused."""
    b = get_backend(name)
    assert b.gather_checks_indices()
    x = torch.arange(20, dtype=torch.float32).reshape(10, 2)
    calls = []
    real = type(b).index_range
    monkeypatch.setattr(type(b), "index_range", lambda self, idx: calls.append(1) or real(self, idx))
    got = buffer.gather(x, torch.tensor([9, 0, 3]), backend=b)
    assert got.tolist() == [[18.0, 19.0], [0.0, 1.0], [6.0, 7.0]] and not calls
    for bad, rng_ in (([0, 10], r"\[0, 10\]"), ([-1, 2], r"\[-1, 2\]")):
        with pytest.raises(ValueError, match=r"indices: expected values in \[0, 9\] \(rows of x\), got values in " + rng_):
            buffer.gather(x, torch.tensor(bad), backend=b)
    assert len(calls) == 2
    assert x.tolist() == torch.arange(20, dtype=torch.float32).reshape(10, 2).tolist()  # x untouched


@pytest.mark.parametrize("name", ["torch", "torch_compile"])
@pytest.mark.parametrize("dtype,row", [(np.float32, (1,)), (np.float32, (2,)), (np.float32, (4,)), (np.float32, (2, 2)),
                                       (np.float32, (3,)), (np.float32, (8,)), (np.float64, (1,)), (np.float64, (2,))])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_cpu_gather_copies_rows_bit_for_bit_as_one_element_where_they_fit(name, dtype, row, index_dtype, monkeypatch):
    """Rows of 4, 8 or 16 bytes go through index_select over a 1-D integer/complex view (one element per row);
    others through the plain call. Either way every bit of every row arrives, signalling NaN payloads included."""
    b = get_backend(name)
    g = np.random.default_rng(5)
    x = g.standard_normal((50, *row)).astype(dtype)
    bits = x.view(np.uint32 if dtype == np.float32 else np.uint64)
    bits.reshape(50, -1)[::7, 0] = 0x7F800001 if dtype == np.float32 else 0x7FF0000000000001  # signalling NaNs
    sources = []
    real = torch.index_select
    monkeypatch.setattr(torch, "index_select", lambda src, *a, **k: sources.append(src) or real(src, *a, **k))
    row_bytes = int(np.prod(row)) * np.dtype(dtype).itemsize
    # From ops._ROW_AS_ELEMENT_FROM gathered rows (the views' cost paid back), and below it
    for n, as_one in ((ops._ROW_AS_ELEMENT_FROM, row_bytes in (4, 8, 16)), (ops._ROW_AS_ELEMENT_FROM - 1, False)):
        idx = g.integers(0, 50, n).astype(index_dtype)
        sources.clear()
        got = buffer.gather(torch.from_numpy(x), torch.from_numpy(idx), backend=b)
        assert got.shape == (n, *row) and got.dtype == torch.from_numpy(x).dtype
        np.testing.assert_array_equal(got.numpy().view(bits.dtype), bits[idx])
        (src,) = sources
        if as_one:
            assert src.dim() == 1 and src.element_size() == row_bytes and not src.is_floating_point()
        else:
            assert tuple(src.shape) == (50, *row)


@pytest.mark.parametrize("name", ["torch", "torch_compile"])
def test_cpu_gather_of_rows_at_an_offset_that_splits_the_view_takes_the_plain_call(name):
    b = get_backend(name)
    flat = torch.arange(41, dtype=torch.float32)
    x = flat[1:].reshape(20, 2)  # storage offset 4 bytes: not a multiple of the 8-byte row
    n = ops._ROW_AS_ELEMENT_FROM
    out_flat = torch.full((2 * n + 1,), -1.0)
    out = out_flat[1:].reshape(n, 2)
    idx = torch.arange(n) % 20
    assert buffer.gather(x, idx, backend=b, out=out) is out
    assert out.tolist() == x[idx].tolist() and out_flat[0].item() == -1.0


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_acrobot_wrap_is_gymnasiums_loop_bit_for_bit_however_far_out(compiled: bool) -> None:
    # One test instead of one per loop iteration, and the loops themselves for what WRAP_UNROLL does not reach.
    from portkern.envs.acrobot import _wrap as reference

    g = np.random.default_rng(3)
    near = np.pi * np.array([1.0, -1.0, 1.0 + 1e-7, -1.0 - 1e-7, 3.0, -3.0, 2.999, 0.0], np.float32)
    cases = {"in range": g.uniform(-3.0, 3.0, 64), "one span out": g.uniform(-9.0, 9.0, 64),
             "many spans out": g.uniform(-100.0, 100.0, 64)}  # fmt: skip
    lo, hi, span = np.float32(-np.pi), np.float32(np.pi), np.float32(2 * np.pi)
    wrap = torch.compile(ops._wrap, dynamic=True) if compiled else ops._wrap
    for name, x in cases.items():
        x = np.concatenate([x.astype(np.float32), near])
        want = reference(x, lo, hi, span)
        got = wrap(torch.from_numpy(x), float(lo), float(hi), float(span)).numpy()
        assert np.array_equal(got, want), name


@pytest.mark.parametrize("n", [1, 6, 257])
@pytest.mark.parametrize("block", ["int", "tensor"])
def test_cpu_eager_draw_is_the_reference_and_the_tensor_philox_bit_for_bit(n, block, monkeypatch):
    """Eager on a CPU, ops.draw takes the reference's rng.draw on NumPy views; the words equal the int64 tensor
    Philox the traced and non-CPU paths run, and the reference's, for uint32 values up to 2**32 - 1."""
    g = np.random.default_rng(n)
    seed = int(g.integers(0, 2**32))
    env = torch.from_numpy(g.integers(0, 2**32, n))
    episode = torch.from_numpy(g.integers(0, 2**32, n))
    blk = torch.from_numpy(g.integers(0, 2**32, n)) if block == "tensor" else int(g.integers(0, 2**32))
    calls = []
    real = rng.draw
    monkeypatch.setattr(rng, "draw", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = ops.draw(seed, env, episode, rng.STREAM_RESET, blk)
    assert calls, "the CPU eager draw did not take the reference's NumPy path"
    tensor_path = ops.philox4x32((episode, blk, rng.STREAM_RESET, 0), seed, env)
    want = real(seed, env.numpy(), episode.numpy(), rng.STREAM_RESET, blk.numpy() if block == "tensor" else blk)
    for w, (a, b) in enumerate(zip(got, tensor_path)):
        assert a.dtype == torch.int64 and a.shape == (n,)
        np.testing.assert_array_equal(a.numpy(), torch.as_tensor(b).expand(n).numpy())
        np.testing.assert_array_equal(a.numpy(), want[:, w].astype(np.int64))
