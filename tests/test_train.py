"""portkern train: the pinned configs, a smoke run per stack, the fused stack's recomputed log-probs, interrupts."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")

from portkern import buffer, envs, step  # noqa: E402
from portkern.cli import main  # noqa: E402
from portkern.train import config  # noqa: E402
from portkern.train import runner  # noqa: E402
from portkern.train.ppo import PHASES, UPDATE_PARTS, Agent, PhaseTimer, torch_gae  # noqa: E402
from portkern.train.stacks import parse_stack  # noqa: E402

from .test_train_resume import stop_on_second_run  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "portkern" / "data" / "train_configs.json"
#: Every stack kind this machine runs: the host simulator, one launch per step on two OpenCL drivers,
#: fused collection, the torch backends (resident), and the whole-loop-compiled jax stack (resident).
SMOKE_STACKS = ["gymnasium", "numpy", "opencl@pocl", "opencl@intel", "opencl+fused@pocl", "torch", "torch_compile",
                "jax", "torch+compiled-update"]


def eager(stack: str) -> str:
    """``stack`` with the eager PPO update (its label stays ``stack``): smoke runs about the stacks, not the
    update, skip compiling it (tests/test_train_compiled_update.py runs the compiled one)."""
    if "update" in stack or stack == "jax":
        return stack
    name, at, device = stack.partition("@")
    return f"{name}+eager-update{at}{device}"


# ---- the config file ---------------------------------------------------------------------------------
def test_shipped_config_pins_the_issue_tasks_and_targets() -> None:
    tasks = config.load()
    assert {k for k, t in tasks.items() if t.default} >= {"CartPole-v1", "Acrobot-v1"}
    assert tasks["CartPole-v1"].target == 475.0 and tasks["Acrobot-v1"].target == -100.0
    for t in tasks.values():
        assert t.version >= 1 and t.ppo.batch_size % t.ppo.num_minibatches == 0
        assert t.env_id in envs.ENVS and t.num_updates >= 1


def _doc() -> dict:
    return json.loads(SHIPPED.read_text())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema="other/1"), "expected a training config of schema"),
        (lambda d: d.update(version=0), "'version' must be an integer >= 1"),
        (lambda d: d["tasks"].update({"Pong-v5": {"target": 1, "total_timesteps": 10}}), "tasks.Pong-v5: not a portkern env"),
        (lambda d: d["tasks"]["CartPole-v1"].update(target="high"), "tasks.CartPole-v1.target: expected a finite number"),
        (lambda d: d["tasks"]["CartPole-v1"].update(total_timesteps=-5), "total_timesteps: expected an integer >= 1"),
        (lambda d: d["tasks"]["CartPole-v1"].update(speed=3), "unknown settings ['speed']"),
        (lambda d: d["ppo_defaults"].update(num_minibatches=3), "must divide into num_minibatches = 3"),
        (lambda d: d["ppo_defaults"].update(gamma=1.5), "gamma: expected a number in [0, 1]"),
        (lambda d: d["ppo_defaults"].update(hidden=128), "hidden: expected at most 64"),
        (lambda d: d["ppo_defaults"].pop("lr"), "missing PPO settings ['lr']"),
        (lambda d: d["ppo_defaults"].update(norm_adv=1), "norm_adv: expected true or false"),
    ],
)
def test_bad_configs_are_rejected_naming_the_field(tmp_path: Path, mutate, message: str) -> None:
    d = copy.deepcopy(_doc())
    mutate(d)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(d))
    with pytest.raises(config.ConfigError, match=None) as exc:
        config.load(path)
    assert message in str(exc.value) and str(path) in str(exc.value)


def test_config_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="cannot read it"):
        config.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(config.ConfigError, match="not valid JSON"):
        config.load(bad)


def test_overrides_are_checked() -> None:
    t = config.task("CartPole-v1", num_envs=8, total_timesteps=1024)
    assert t.ppo.num_envs == 8 and t.num_updates == 2
    with pytest.raises(config.ConfigError, match=r"unknown settings \['warp'\]"):
        config.task("CartPole-v1", warp=9)
    with pytest.raises(config.ConfigError, match="has no pinned config"):
        config.task("MountainCar-v0")


@pytest.mark.parametrize(
    "text, message",
    [("opencl+turbo", "unknown mode 'turbo'"), ("cuda9", "unknown backend 'cuda9'"), ("gymnasium@gpu", "takes no @DEVICE"),
     ("torch+fused", "no fused kernels")],
)
def test_bad_stack_specs(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_stack(text)


def test_compiled_update_suffix_keeps_the_stack_and_names_it() -> None:
    s = parse_stack("opencl+fused+compiled-update@pocl")
    assert (s.backend, s.mode, s.device, s.compiled_update) == ("opencl", "fused", "pocl", True)
    assert s.label == "opencl+fused+compiled-update@pocl"
    assert not parse_stack("torch+eager-update").compiled_update
    with pytest.raises(ValueError, match="applies to the torch-agent stacks"):
        parse_stack("jax+compiled-update")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_compiled_loss_gradient_equals_the_eager_one(env_id: str) -> None:
    """The functional gradient the compiled minibatch step traces is the eager path's (same loss), to float32
    rounding (tests/test_train_compiled_update.py checks the compiled step itself)."""
    from portkern.train.update import CompiledUpdate

    spec = envs.get(env_id)
    cfg = config.task(env_id).ppo
    torch.manual_seed(1)
    agent = Agent(spec.obs_dim, spec.discrete_actions if spec.is_discrete else None)
    g = torch.Generator().manual_seed(2)
    b = 64
    obs = torch.randn(b, spec.obs_dim, generator=g)
    with torch.no_grad():
        actions, old_logp, _, old_v = agent.act(obs)
    old_logp = old_logp + 0.1 * torch.randn(b, generator=g)  # ratios away from 1: the clips matter
    adv, ret = torch.randn(b, generator=g), torch.randn(b, generator=g)
    compiled = CompiledUpdate(agent, cfg)
    named = dict(agent.named_parameters())
    grads, stats = compiled.grad({n: named[n].detach() for n in compiled.names}, obs, actions, old_logp, old_v, adv, ret)
    _, newlogp, entropy, newv = agent.act(obs, actions)
    ratio = (newlogp - old_logp).exp()
    pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
    vc = old_v + torch.clamp(newv - old_v, -cfg.clip_coef, cfg.clip_coef)
    v_loss = 0.5 * torch.max((newv - ret) ** 2, (vc - ret) ** 2).mean()
    loss = pg - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
    loss.backward()
    for n in compiled.names:
        torch.testing.assert_close(grads[n], named[n].grad, rtol=1e-4, atol=1e-6, msg=n)
    torch.testing.assert_close(stats[0], pg.detach(), rtol=1e-5, atol=1e-6)


# ---- GAE of the host-simulator stack -------------------------------------------------------------------
def test_torch_gae_matches_portkern_gae() -> None:
    g = np.random.default_rng(3)
    T, N = 40, 16
    r, v, nv = (g.normal(size=(T, N)).astype(np.float32) for _ in range(3))
    term, trunc = g.random((T, N)) < 0.1, g.random((T, N)) < 0.05
    want = buffer.gae(r, v, nv, term, trunc, gamma=0.99, lam=0.95, backend="numpy")
    got = torch_gae(*(torch.from_numpy(a) for a in (r, v, nv, term, trunc)), 0.99, 0.95)
    for w, x in zip(want, got):
        np.testing.assert_allclose(x.numpy(), w, rtol=1e-5, atol=1e-5)


# ---- smoke runs per stack through the CLI --------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("train") / "smoke.json"
    argv = ["train", "--task", "CartPole-v1", "--updates", "3", "--seeds", "1", "--no-progress", "--out", str(out)]
    for s in SMOKE_STACKS:
        argv += ["--stack", eager(s)]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_smoke_json_is_a_valid_training_run(smoke: dict) -> None:
    assert smoke["schema"] == runner.TRAIN_SCHEMA
    assert [r["stack"] for r in smoke["runs"]] == SMOKE_STACKS
    assert smoke["phases"] == PHASES and smoke["update_parts"] == UPDATE_PARTS
    assert set(smoke["prime_s"]["CartPole-v1"]) == set(SMOKE_STACKS)
    for r in smoke["runs"]:
        assert r["device_key"] in smoke["devices"], r["device_key"]
        assert r["updates"] == 3 and r["env_steps"] == 3 * 32 * 64 and r["stop_reason"] == "step budget"
        assert r["converged"] is False and r["device_hours"] is None and r["steps_to_converge"] is None
    keys = {r["stack"]: smoke["devices"][r["device_key"]]["device_label"] for r in smoke["runs"]}
    assert "Portable Computing Language" in keys["opencl@pocl"] and "Intel" in keys["opencl@intel"], keys


@pytest.mark.parametrize("stack", SMOKE_STACKS)
def test_smoke_run_losses_finite_and_phases_cover_the_wall_time(smoke: dict, stack: str) -> None:
    r = next(r for r in smoke["runs"] if r["stack"] == stack)
    assert r["losses_finite"] and all(math.isfinite(x) for x in r["losses"].values()), r["losses"]
    assert set(r["phases"]) == set(PHASES)
    timed = sum(r["phases"].values())
    # Every phase is timed on its own: what no phase covers is the interpreter between them.
    assert abs(r["wall_s"] - timed - r["untimed_s"]) < 1e-5
    assert 0 <= r["untimed_s"] <= runner.UNTIMED_TOLERANCE * r["wall_s"], (r["untimed_s"], r["wall_s"])
    assert sum(r["update_parts"].values()) <= r["phases"]["update"]
    for phase in ("act", "env", "adv", "update"):
        assert r["phases"][phase] > 0, (phase, r["phases"])
    if r["mode"] == "resident":
        assert r["phases"]["move"] == 0.0  # zero-copy
    else:
        assert r["phases"]["move"] > 0


def test_same_seed_same_physics_same_first_updates(smoke: dict) -> None:
    """numpy, torch and OpenCL step bit-identical physics from the same Philox resets and the same torch
    policy draws: their first update's episodes match exactly."""
    first = {r["stack"]: r["curve"][0][4] for r in smoke["runs"]}
    assert first["numpy"] == first["torch"] == first["opencl@pocl"], first


# ---- fused collection: the in-kernel policy is the torch actor -----------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "Pendulum-v1"])
def test_in_kernel_policy_is_the_torch_actor(env_id: str) -> None:
    spec = envs.get(env_id)
    torch.manual_seed(0)
    agent = Agent(spec.obs_dim, spec.discrete_actions if spec.is_discrete else None)
    with torch.no_grad():
        for p in agent.actor.parameters():
            p.add_(0.3 * torch.randn_like(p))  # orthogonal init's last layer is tiny: make the logits matter
        agent.log_std.fill_(-0.7)
    obs = np.random.default_rng(1).normal(size=(256, spec.obs_dim)).astype(np.float32)
    ref = agent.in_kernel_policy().forward(obs)  # the kernels' MLP (parity-tested against every backend)
    with torch.no_grad():
        out = agent.actor(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(ref, out, rtol=1e-4, atol=1e-5)
    assert agent.in_kernel_policy().log_std[0] == pytest.approx(-0.7)


def test_fused_sampling_matches_recomputed_log_probs() -> None:
    """Same weights, same obs: the actions the OpenCL kernel samples follow the distribution whose log-probs the
    fused stack recomputes in torch (every env starts from one state, so each action is a draw from one softmax)."""
    spec = envs.get("CartPole-v1")
    n = 20000
    torch.manual_seed(0)
    agent = Agent(spec.obs_dim, spec.discrete_actions)
    with torch.no_grad():
        agent.actor[4].weight.normal_(0, 0.5)  # a policy far from uniform
    env = step.make("CartPole-v1", n, backend="opencl", device="pocl", seed=5)
    env.reset()
    state = np.tile(np.array([[0.02, 0.1, -0.03, 0.05]], np.float32), (n, 1))
    env.set_state(state, np.zeros(n, np.int64))
    buf = env.rollout(1, agent.in_kernel_policy(), path="fused")
    obs = torch.from_numpy(env.backend.to_host(buf.obs)[0])
    actions = torch.from_numpy(env.backend.to_host(buf.actions)[0].astype(np.int64))
    assert torch.equal(obs, obs[:1].expand_as(obs))  # one obs: one distribution
    with torch.no_grad():
        _, logp, _, _ = agent.act(obs[:1], torch.tensor([1]))
    p1 = float(logp.exp())
    assert 0.15 < p1 < 0.85, p1  # the test needs a distribution that a wrong sampler would miss
    freq = float(actions.float().mean())
    sigma = math.sqrt(p1 * (1 - p1) / n)
    assert abs(freq - p1) < 5 * sigma, (freq, p1, sigma)
    # And the recomputation the stack does on the stored batch gives that same log-prob for every env.
    with torch.no_grad():
        _, logp_all, _, _ = agent.act(obs, actions)
    want = torch.where(actions == 1, logp, torch.log1p(-logp.exp()))
    torch.testing.assert_close(logp_all, want.expand_as(logp_all), rtol=1e-5, atol=1e-5)


# ---- bootstrap values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", ["gymnasium", "numpy", "opencl@pocl", "opencl+fused@pocl", "torch+eager-act",
                                   "torch"])  # fmt: skip
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_bootstrap_values_are_the_critic_on_every_obs_reached(stack: str, env_id: str) -> None:
    """ppo.bootstrap_values (the rollout's own values where a step did not end an episode, the critic elsewhere)
    gives what the critic gives on every final_obs GAE reads, and so the same advantages, on every stack's
    rollouts: each stack records final_obs[t] as obs[t + 1] where no episode ended. Two rollouts: Pendulum-v1's second one truncates every env (200 steps, at
    its step 72), CartPole-v1's terminate episodes."""
    from portkern.train.ppo import bootstrap_values
    from portkern.train.stacks import Storage, build

    task = config.task(env_id)
    cfg = task.ppo
    runner.pin_threads(task)
    st = build(parse_stack(stack), task, 3)
    try:
        next_obs = st.setup()
        torch.manual_seed(4)
        agent = Agent(st.obs_dim, st.n_actions, cfg.hidden, st.action_dim)
        store = Storage.zeros(cfg.num_steps, cfg.num_envs, st.obs_dim, st.discrete, torch.device("cpu"),
                              st.action_dim)  # fmt: skip
        timer = PhaseTimer()
        for _ in range(2):
            next_obs = st.collect(agent, store, timer, next_obs)
            with torch.no_grad():
                got = bootstrap_values(agent, store.values, store.final_obs, store.truncated)
                want = agent.value(store.final_obs.reshape(-1, st.obs_dim)).reshape(got.shape)
            keep = ~store.terminated  # where GAE reads it (it zeroes V where a step terminated)
            torch.testing.assert_close(got[keep], want[keep], rtol=1e-5, atol=1e-5)
            gae = [torch_gae(store.rewards, store.values, nv, store.terminated, store.truncated, cfg.gamma,
                             cfg.gae_lambda)[0] for nv in (got, want)]  # fmt: skip
            torch.testing.assert_close(gae[0], gae[1], rtol=1e-5, atol=1e-5)
    finally:
        st.close()
    ended = store.truncated if env_id == "Pendulum-v1" else store.terminated
    assert bool(ended[:-1].any())  # the rows the shortcut must not take


# ---- interrupts ----------------------------------------------------------------------------------------
def test_interrupted_run_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = stop_on_second_run(monkeypatch)
    out = tmp_path / "run.json"
    argv = ["train", "--task", "CartPole-v1", "--stack", "numpy+eager-update", "--updates", "1", "--seeds", "1,2",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 130
    assert calls["n"] == 2
    # Neither the JSON nor a partial file: only the journal, which keeps the finished run.
    assert list(tmp_path.iterdir()) == [tmp_path / "run.json.journal"]
    assert "interrupted after 1 of 2 runs: nothing written" in capsys.readouterr().err


def test_unavailable_stack_fails_before_any_run(tmp_path: Path, capsys) -> None:
    out = tmp_path / "x.json"
    assert main(["train", "--stack", "cupy", "--updates", "1", "--out", str(out)]) == 2
    assert "--stack cupy: cupy unavailable here" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "1,x"], "--seeds '1,x': expected comma-separated integers"),
    (["--seeds", "1,1"], "expected distinct integers"),
    (["--updates", "0"], "--updates: expected an integer >= 1"),
    (["--task", "Pong"], "--task Pong: no pinned config"),
])  # fmt: skip
def test_bad_arguments(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    assert main(["train", "--stack", "numpy", "--out", str(tmp_path / "o.json"), *argv]) == 2
    assert message in capsys.readouterr().err
