"""Structural make() keywords (an env's sizes fixed at make, e.g. a chain's ``links``) and Box actions
wider than one component, on a test-only env: K independent double integrators, each pushed by its own
action component. It runs through make / reset / step / rollout on the reference and torch backends,
and through the checks every kernel backend makes before it builds anything."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from portkern import envs, rng, step
from portkern.backends import EnvKernelMissing, get_backend, probe
from portkern.envs.base import EnvSpec, Param, Structural, namespace
from portkern.policy import MLPPolicy, RandomPolicy, _policy_bits, sample_actions

# ---- the test-only env: K double integrators -------------------------------------------------------


def _reset(sym, p, links):
    # 2K state arrays from one [N, 4] draw: positions from the draw's words (cycled), velocities at rest.
    # K comes bound by specialise (a reset cannot read it from its draws).
    xp = namespace(sym)
    k = links
    x = tuple(p.x_init * sym[:, j % 4] for j in range(k))
    return x + tuple(xp.zeros_like(sym[:, 0]) for _ in range(k))


def _step(state, action, p):
    xp = namespace(*state)
    k = len(state) // 2
    x, v = state[:k], state[k:]
    dtype = x[0].dtype
    u = xp.clip(xp.astype(action, dtype), -1.0, 1.0)  # the env clips, as every Box env does
    nv = tuple(v[j] + p.dt * (p.gain * u[:, j]) for j in range(k))
    nx = tuple(x[j] + p.dt * nv[j] for j in range(k))
    cost = nx[0] * nx[0]
    for j in range(1, k):
        cost = cost + nx[j] * nx[j]
    out = xp.abs(nx[0]) > 2.0
    for j in range(1, k):
        out = out | (xp.abs(nx[j]) > 2.0)
    return nx + nv, -cost, out


def _observe(state):
    return namespace(*state).stack(state, axis=1)


def _shape(values):
    k = values["links"]
    return dict(
        reset=functools.partial(_reset, links=k),
        state_names=tuple(f"x{j}" for j in range(k)) + tuple(f"v{j}" for j in range(k)),
        obs_dim=2 * k,
        obs_low=(-math.inf,) * (2 * k),
        obs_high=(math.inf,) * (2 * k),
        action_dim=k,
        test_state_box=((-1.0,) * (2 * k), (1.0,) * (2 * k)),
    )


LINKS = Structural("links", 3, 2, 8, "number of integrators")
TOY = EnvSpec(
    id="ToyIntegrators-v0", kernel="toy_integrators", discrete_actions=None, action_high=1.0, state_limit=None,
    max_episode_steps=20,
    params=(Param("dt", 0.1, "positive"), Param("gain", 1.0, "positive"), Param("x_init", 0.5, "nonnegative")),
    step=_step, observe=_observe, parity_states=lambda g, n: g.uniform(-1, 1, (n, 6)),
    parity_tolerance={"float32": 1e-6, "float64": 1e-12}, structure=(LINKS,), specialise=_shape,
    **_shape({"links": 3}),
)  # fmt: skip


@pytest.fixture
def toy(monkeypatch):
    """The toy env in the registry for one test (make() looks envs up by id)."""
    monkeypatch.setitem(envs.ENVS, TOY.id, TOY)
    return TOY


def _make(k: int, n: int, backend: str = "numpy", **kw):
    return step.make(TOY.id, n, backend=backend, links=k, **kw)


# ---- declaration and validation ---------------------------------------------------------------------


def test_concrete_specs_are_cached_and_carry_their_defines():
    assert TOY.structure_values == {"links": 3} and TOY.defines == {"PK_LINKS": 3}
    assert TOY.define_options == ("-DPK_LINKS=3",) and TOY.kernel_key == "toy_integrators__PK_LINKS_3"
    five = TOY.with_structure(links=5)
    assert (five.state_dim, five.obs_dim, five.action_dim) == (10, 10, 5)
    assert five.defines == {"PK_LINKS": 5} and five.kernel_key != TOY.kernel_key
    assert TOY.with_structure(links=5) is five and five.with_structure(links=3) is TOY
    assert TOY.with_structure() is TOY


def test_envs_without_structure_have_no_defines():
    for spec in envs.ENVS.values():
        if not spec.structure:
            assert spec.defines == {} and spec.define_options == () and spec.kernel_key == spec.kernel
        assert spec.action_dim >= 1 and (spec.action_dim == 1 or not spec.is_discrete)


@pytest.mark.parametrize("value", [17, 1, 2.5, True, "3", None])
def test_structural_values_out_of_range_or_not_ints_name_the_keyword_and_range(value):
    with pytest.raises(ValueError, match=r"^links: must be an int from 2 to 8, got "):
        TOY.with_structure(links=value)


def test_unknown_structural_keywords_are_named(toy):
    with pytest.raises(ValueError, match=r"^link: ToyIntegrators-v0 has no structural keyword 'link'; "
                                         r"its structural keywords: links \(make's own options: backend, "):  # fmt: skip
        step.make(TOY.id, 4, link=3)
    with pytest.raises(ValueError, match=r"^links: Pendulum-v1 has no structural keywords \(it takes no links=; make's own options: backend, "):
        step.make("Pendulum-v1", 4, links=3)
    with pytest.raises(ValueError, match=r"^links: Pendulum-v1 has no structural keywords"):
        envs.get("Pendulum-v1", links=3)
    with pytest.raises(ValueError, match=r"^links: must be an int from 2 to 8, got 9$"):
        envs.get(TOY.id, links=9)
    assert envs.get(TOY.id, links=4) is TOY.with_structure(links=4)


def test_structural_declarations_are_checked():
    with pytest.raises(ValueError, match="default 1 outside"):
        Structural("links", 1, 2, 8)
    with pytest.raises(ValueError, match="not a C identifier"):
        Structural("links", 3, 2, 8, define="PK-LINKS")
    with pytest.raises(TypeError, match="low must be an int"):
        Structural("links", 3, 2.0, 8)
    assert Structural("links", 3, 2, 8).define == "PK_LINKS"
    from dataclasses import replace

    with pytest.raises(ValueError, match="one of make\\(\\)'s own keywords"):
        replace(TOY, structure=(Structural("seed", 3, 2, 8),))
    with pytest.raises(ValueError, match=r"obs_dim is 7 but specialise\(\{'links': 3\}\) gives 6"):
        replace(TOY, obs_dim=7)
    with pytest.raises(ValueError, match="may not change kernel"):
        replace(TOY, specialise=lambda v: {**_shape(v), "kernel": "other"})
    with pytest.raises(ValueError, match="needs specialise"):
        replace(TOY, specialise=None)
    with pytest.raises(ValueError, match="action_dim must be an int >= 1"):
        replace(envs.get("Pendulum-v1"), action_dim=0)
    with pytest.raises(ValueError, match="one action index per env"):
        replace(envs.get("CartPole-v1"), action_dim=2)


# ---- make / reset / step / rollout with [N, K] actions -----------------------------------------------


@pytest.fixture(params=["numpy", "torch"])
def array_backend(request):
    if not probe(request.param).available:
        pytest.skip(f"{request.param}: {probe(request.param).reason}")
    return request.param


@pytest.mark.parametrize("k", [2, 5])
def test_steps_with_n_by_k_actions(toy, array_backend, k):
    n = 7
    env = _make(k, n, array_backend, dtype="float64")
    b = env.backend
    assert env.spec.structure_values == {"links": k} and env.spec.action_dim == k
    assert f"num_envs={n}, links={k}," in repr(env)
    obs = b.to_host(env.reset(seed=3))
    assert obs.shape == (n, 2 * k)
    assert env.get_state()["state"].shape == (n, 2 * k)
    actions = np.linspace(-1.5, 1.5, n * k, dtype=np.float32).reshape(n, k)
    obs, reward, terminated, truncated = (b.to_host(a) for a in env.step(actions))
    assert obs.shape == (n, 2 * k) and reward.shape == (n,) and terminated.shape == (n,)
    # One step of the reference by hand: the env clips each component, then integrates.
    x0 = np.asarray(_make(k, n, "numpy", dtype="float64").reset(seed=3))[:, :k]
    v1 = 0.1 * np.clip(actions.astype(np.float64), -1, 1)
    np.testing.assert_allclose(obs[:, k:], v1, rtol=1e-12)
    np.testing.assert_allclose(obs[:, :k], x0 + 0.1 * v1, rtol=1e-12)
    np.testing.assert_allclose(reward, -((x0 + 0.1 * v1) ** 2).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("policy", ["random", "mlp"])
def test_rollout_records_n_by_k_actions_and_agrees_across_backends_and_paths(toy, array_backend, policy):
    k, n, t = 5, 6, 9
    pol = RandomPolicy() if policy == "random" else MLPPolicy.init(TOY.with_structure(links=k), hidden=8, seed=1)
    runs = {}
    for name, path in ((array_backend, "fused"), ("numpy", "host")):
        env = _make(k, n, name, seed=11)
        env.reset()
        buf = env.rollout(t, pol, path=path)
        b = env.backend if path != "host" else get_backend("numpy")
        runs[(name, path)] = {f: b.to_host(getattr(buf, f)) if path != "host" else np.asarray(getattr(buf, f))
                              for f in ("obs", "actions", "rewards")}  # fmt: skip
    a = runs[(array_backend, "fused")]
    assert a["actions"].shape == (t, n, k) and a["actions"].dtype == np.float32
    assert a["obs"].shape == (t, n, 2 * k) and a["rewards"].shape == (t, n)
    if policy == "random":
        assert np.abs(a["actions"]).max() <= 1.0 and a["actions"].std() > 0.3
        # Every component is its own draw: no two columns equal.
        assert len({a["actions"][:, :, j].tobytes() for j in range(k)}) == k
    host = runs[("numpy", "host")]
    for f in ("obs", "actions", "rewards"):
        np.testing.assert_allclose(a[f], host[f], rtol=1e-5, atol=1e-6)


def test_first_component_is_the_one_wide_draw():
    """Component 0 of a wide Box takes exactly the draw a 1-wide action takes (block 0 of the Philox
    counter's last word), so a kernel's one-wide path and its wide path share their first draw."""
    n = 16
    episodes, steps = np.arange(n, dtype=np.uint32) % 3, np.arange(n, dtype=np.int32) * 7
    wide = _policy_bits(5, n, episodes, steps, 0)
    np.testing.assert_array_equal(wide, rng.draw(5, np.arange(n, dtype=np.uint32), episodes, rng.STREAM_POLICY,
                                                 steps.astype(np.uint32)))  # fmt: skip
    assert not np.array_equal(_policy_bits(5, n, episodes, steps, 1), wide)
    pend = envs.get("Pendulum-v1")
    one = sample_actions(RandomPolicy(), pend, np.zeros((n, 3), np.float32), 5, episodes, steps)
    toy = sample_actions(RandomPolicy(), TOY.with_structure(links=6), np.zeros((n, 12), np.float32), 5, episodes,
                         steps)  # fmt: skip
    assert toy.shape == (n, 6)
    np.testing.assert_array_equal(toy[:, 0], one / np.float32(pend.action_high))


def test_action_shape_errors_name_the_expected_shape(toy):
    env = _make(3, 4)
    env.reset()
    expected = r"actions: expected float array \(float32 or float64\) of shape \(4, 3\) with finite values, got "
    for bad in (np.zeros(4, np.float32), np.zeros((4, 1), np.float32), np.zeros((4, 2), np.float32)):
        with pytest.raises(ValueError, match=expected):
            env.step(bad)
    with pytest.raises(TypeError, match=expected):
        env.step(np.zeros((4, 3), np.int32))
    with pytest.raises(ValueError, match=expected + "NaN or inf"):
        env.step(np.full((4, 3), np.nan, np.float32))
    # A 1-wide Box still takes [N] and [N, 1], and names both.
    pend = step.make("Pendulum-v1", 4)
    pend.reset()
    with pytest.raises(ValueError, match=r"of shape \(4, 1\) or \(4,\) with finite values"):
        pend.step(np.zeros((4, 3), np.float32))


def test_mlp_policy_has_one_output_per_component(toy):
    spec = TOY.with_structure(links=4)
    pol = MLPPolicy.init(spec, hidden=8)
    assert pol.w3.shape == (8, 4) and pol.log_std.shape == (1,)
    with pytest.raises(ValueError, match=r"needs an MLP from 6 observations to 3 outputs, got 8 -> 4"):
        pol.check(TOY)


def test_gymnasium_adapter_spaces(toy):
    gym = pytest.importorskip("portkern.gym")
    env = step.make(TOY.id, 3, links=4)
    assert env.single_action_space.shape == (4,) and env.action_space.shape == (3, 4)
    vec = gym.make_vec(TOY.id, 3, links=4, seed=0)
    assert vec.single_action_space.shape == (4,) and vec.single_observation_space.shape == (8,)
    vec.reset(seed=1)
    obs, reward, *_ = vec.step(vec.action_space.sample())
    assert obs.shape == (3, 8) and reward.shape == (3,)
    one = gym.PortkernEnv(TOY.id, links=4)
    assert one.action_space.shape == (4,)
    one.reset(seed=0)
    obs, *_ = one.step(one.action_space.sample())
    assert obs.shape == (8,)
    with pytest.raises(ValueError, match=r"action: expected a finite float array of shape \(4,\)"):
        one.step(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"^links: must be an int from 2 to 8, got 1$"):
        gym.make_vec(TOY.id, 3, links=1)


# ---- kernel backends: the missing-source error and the defines in the builds --------------------------


def test_kernel_backends_name_the_missing_source():
    from portkern.backends._cuda_kernels import CudaKernels
    from portkern.backends.numpy import NumpyBackend

    assert NumpyBackend.missing_env_kernel(TOY) is None
    assert CudaKernels.missing_env_kernel(TOY) == (
        "ToyIntegrators-v0 has no CUDA C kernel yet (kernels/cuda/toy_integrators.cu)")
    assert CudaKernels.missing_env_kernel(envs.get("Pendulum-v1")) is None
    if probe("opencl").available:
        from portkern.backends.opencl import OpenCLBackend

        assert OpenCLBackend.missing_env_kernel(TOY) == (
            "ToyIntegrators-v0 has no OpenCL kernel yet (kernels/opencl/toy_integrators.cl)")
        assert OpenCLBackend.missing_env_kernel(envs.get("Pendulum-v1")) is None
    if probe("numba").available:
        from portkern.backends.numba import NumbaBackend

        assert NumbaBackend.missing_env_kernel(TOY) == (
            "ToyIntegrators-v0 has no Numba kernel yet (portkern/backends/_numba/toy_integrators.py)")
        assert NumbaBackend.missing_env_kernel(envs.get("Pendulum-v1")) is None


def test_make_refuses_a_kernel_backend_without_the_env_source(toy):
    name = "opencl" if probe("opencl").available else "cuda_host"
    if not probe(name).available:
        pytest.skip("no kernel backend here")
    with pytest.raises(EnvKernelMissing, match=r"^ToyIntegrators-v0 has no (OpenCL|CUDA C) kernel yet \(kernels/"):
        _make(3, 4, name)


class _Built(Exception):
    """Stops a launch once the kernel's build options are known (no compiler run)."""


def _pendulum_with_define(define: str, value: int) -> EnvSpec:
    """Pendulum with a structural keyword that changes nothing but its define: its real kernel source
    builds with the extra -D (which it ignores), so the options are those of a real structural build."""
    from dataclasses import replace

    spec = replace(envs.get("Pendulum-v1"), id="PendulumDefines-v0", gymnasium_id=None,
                   structure=(Structural("links", 3, 2, 16, define=define),), specialise=lambda v: {})  # fmt: skip
    return spec.with_structure(links=value)


@pytest.mark.parametrize("backend_name", ["opencl", "cuda_host"])
def test_defines_reach_the_kernel_build_options(monkeypatch, backend_name):
    if not probe(backend_name).available:
        pytest.skip(f"{backend_name}: {probe(backend_name).reason}")
    b = get_backend(backend_name)
    seen = []

    def record(self, filename, kernel, *options):
        seen.append((filename, kernel, options))
        raise _Built

    monkeypatch.setattr(type(b), "_kernel", record)
    for links in (3, 5):
        spec = _pendulum_with_define("PK_LINKS", links)
        monkeypatch.setitem(envs.ENVS, spec.id, spec)
        env = step.make(spec.id, 4, backend=b, links=links)
        with pytest.raises(_Built):
            env.reset()
    (f3, k3, o3), (f5, k5, o5) = seen
    assert f3 == f5 == "pendulum.cl" if backend_name == "opencl" else f3 == f5 == "pendulum.cu"
    flat3, flat5 = str(o3), str(o5)
    assert "-DPK_LINKS=3" in flat3 and "-DPK_LINKS=5" in flat5 and o3 != o5  # so the program caches differ


# ---- PPO's Gaussian head with several components -------------------------------------------------------


def test_ppo_gaussian_head_has_one_mean_per_component_and_adds_their_log_probs():
    torch = pytest.importorskip("torch")
    from portkern.train.config import load
    from portkern.train.ppo import Agent, functional_loss

    cfg = next(iter(load().values())).ppo
    agent = Agent(6, None, 16, action_dim=3)
    assert agent.actor[-1].out_features == 3 and agent.log_std.shape == (1,)
    assert agent.in_kernel_policy().w3.shape == (16, 3)  # what a fused rollout acts with
    obs = torch.randn(10, 6)
    action, logp, entropy, value = agent.act(obs)
    assert action.shape == (10, 3) and logp.shape == entropy.shape == value.shape == (10,)
    one = torch.distributions.Normal(agent.actor(obs), agent.log_std.exp())
    torch.testing.assert_close(logp, one.log_prob(action).sum(-1))
    # The functional loss (the compiled update's) agrees with the eager distribution: same log-probs (so
    # the ratio is 1 and the approximate KL 0) and the same entropy, summed over the components.
    params = dict(agent.named_parameters())
    loss = functional_loss(agent, cfg)
    _, stats = loss(params, obs, action, logp.detach(), value.detach(), torch.ones(10), torch.zeros(10))
    assert abs(float(stats[3])) < 1e-6
    torch.testing.assert_close(stats[2], entropy.mean().detach())
