"""The jax PPO stack on a Box of several components (Chain-v0: ``[N, K]`` actions): its Gaussian head is the torch
agent's, and single-seed, K-seed and refilling runs train it with finite losses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")
pytest.importorskip("jax", reason="the jax stack needs JAX: pip install 'portkern[jax]'")

from portkern import envs  # noqa: E402
from portkern.cli import main  # noqa: E402
from portkern.train import config, jax_batch, jax_ppo  # noqa: E402
from portkern.train.ppo import Agent  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "portkern" / "data" / "train_configs.json"
#: Small enough to compile and run in seconds past XLA's compile of the chain (~20 s a program on 2 cores); 100
#: steps a rollout, so that every env finishes its 200-step episode in the second update.
SMALL = {"num_envs": 4, "num_steps": 100, "num_minibatches": 4, "update_epochs": 2}
#: One Gaussian's entropy at log-std 0.
GAUSS_ENTROPY = 0.5 + 0.5 * math.log(2 * math.pi)


@pytest.fixture(autouse=True)
def _one_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--parallel-seeds` would start JAX with one CPU device per core if it were the first to start it, changing
    JAX for every later test of the process (as in tests/test_train_parallel.py)."""
    monkeypatch.setattr(jax_batch, "spread_cpu_devices", lambda n: False)


def _jax_params(agent: Agent) -> dict:
    """The torch agent's weights in the jax stack's layout (``[in, out]`` weights)."""
    import jax.numpy as jnp

    def layers(seq: torch.nn.Sequential) -> list:
        return [(jnp.asarray(m.weight.detach().numpy().T), jnp.asarray(m.bias.detach().numpy()))
                for m in seq if isinstance(m, torch.nn.Linear)]  # fmt: skip

    return {"actor": layers(agent.actor), "critic": layers(agent.critic),
            "log_std": jnp.asarray(agent.log_std.detach().numpy())}  # fmt: skip


def _agent(spec: Any) -> Agent:
    torch.manual_seed(0)
    agent = Agent(spec.obs_dim, None, 64, spec.action_dim)
    with torch.no_grad():
        for p in agent.actor.parameters():
            p.add_(0.3 * torch.randn_like(p))  # orthogonal init's last layer is tiny: make the means matter
        agent.log_std.fill_(-0.7)
    return agent


# ---- the Gaussian head ---------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id, links", [("Chain-v0", 2), ("Chain-v0", 3), ("Pendulum-v1", None)])
def test_gaussian_log_prob_and_entropy_are_the_torch_agents(env_id: str, links: int | None) -> None:
    """Same weights, same obs and actions: the jax head's log-probs and entropies are the torch agent's (an
    ``Independent`` Normal over the K components, one shared log-std) and the formula's, summed over K."""
    spec = envs.get(env_id, links=links) if links else envs.get(env_id)
    agent = _agent(spec)
    g = np.random.default_rng(1)
    n, k = 256, spec.action_dim
    obs = g.normal(size=(n, spec.obs_dim)).astype(np.float32)
    actions = g.normal(size=(n, k) if k > 1 else (n,)).astype(np.float32)
    with torch.no_grad():
        _, want_lp, want_ent, _ = agent.act(torch.from_numpy(obs), torch.from_numpy(actions))
        mean = agent.actor(torch.from_numpy(obs)).double().numpy()
    logp, ent = jax_ppo.log_prob_entropy(_jax_params(agent), obs, actions, False)
    assert logp.shape == ent.shape == (n,)
    np.testing.assert_allclose(np.asarray(logp), want_lp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), want_ent.numpy(), rtol=1e-5)
    # The reference formula, in float64: independent components with sigma = exp(-0.7), log-probs added.
    a = actions.reshape(n, k).astype(np.float64)
    ref = (-((a - mean) ** 2) / (2 * math.exp(-1.4)) + 0.7 - 0.5 * math.log(2 * math.pi)).sum(-1)
    np.testing.assert_allclose(np.asarray(logp), ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ent), k * (GAUSS_ENTROPY - 0.7), rtol=1e-5)


def test_gaussian_samples_have_the_heads_means_and_spread() -> None:
    """Every env from one obs: the sampled ``[N, K]`` actions are K independent draws around the actor's K means
    with the shared std."""
    import jax

    spec = envs.get("Chain-v0")
    agent = _agent(spec)
    n, k = 20000, spec.action_dim
    obs = np.tile(np.random.default_rng(2).normal(size=(1, spec.obs_dim)).astype(np.float32), (n, 1))
    acts = np.asarray(jax_ppo.sample(_jax_params(agent), obs, jax.random.PRNGKey(3), False), np.float64)
    assert acts.shape == (n, k)
    with torch.no_grad():
        mean = agent.actor(torch.from_numpy(obs[:1])).double().numpy()[0]
    sigma = math.exp(-0.7)
    assert np.ptp(mean) > 10 * sigma / math.sqrt(n)  # distinct means: a swapped component would show
    np.testing.assert_allclose(acts.mean(0), mean, atol=5 * sigma / math.sqrt(n))
    np.testing.assert_allclose(acts.std(0), sigma, rtol=0.03)
    corr = np.corrcoef(acts.T)[np.triu_indices(k, 1)]
    assert np.all(np.abs(corr) < 5 / math.sqrt(n)), corr  # independent components


# ---- training runs -------------------------------------------------------------------------------------
def _small_task() -> config.TaskConfig:
    return config.task("Chain-v0", **SMALL)


@pytest.fixture(scope="module")
def small_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    doc = json.loads(SHIPPED.read_text())
    doc["tasks"]["Chain-v0"]["ppo"] = {**doc["tasks"]["Chain-v0"].get("ppo", {}), **SMALL}
    path = tmp_path_factory.mktemp("chain") / "small.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def single(small_config: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("chain") / "single.json"
    assert main(["train", "--task", "Chain-v0", "--stack", "jax", "--updates", "2", "--seeds", "1", "--no-progress",
                 "--config", str(small_config), "--out", str(out)]) == 0  # fmt: skip
    return json.loads(out.read_text())["runs"][0]


def test_rollout_and_update_shapes_on_k_wide_actions() -> None:
    """One update's programs on Chain-v0: [T, N, K] actions stored, [T, N] log-probs, a K-output actor, finite
    losses; the entropy is K Gaussians'."""
    task = _small_task()
    st = jax_ppo.Static.of(task)
    spec = envs.get("Chain-v0")
    k, (t, n) = spec.action_dim, (task.ppo.num_steps, task.ppo.num_envs)
    p = jax_ppo.programs(st)  # the ones the CLI run below reuses (same shapes and settings)
    state = jax_ppo.init_state(st, 1)
    assert state["params"]["actor"][-1][0].shape == (task.ppo.hidden, k)
    state, out = p["rollout"](state)
    store = out["store"]
    assert store["actions"].shape == (t, n, k) and store["actions"].dtype == np.float32
    assert store["obs"].shape == (t, n, spec.obs_dim)
    for name in ("logprobs", "values", "rewards"):
        assert store[name].shape == (t, n), name
    adv, ret = p["advantages"](store, p["bootstrap"](state["params"], store["final_obs"]))
    new, losses = p["update"](state, store, adv, ret, np.float32(task.ppo.lr))
    losses = np.asarray(losses)
    assert losses.shape == (4,) and np.all(np.isfinite(losses)), losses
    assert losses[2] == pytest.approx(k * GAUSS_ENTROPY, abs=0.05)  # log-std 0 at init, moved by a few Adam steps
    assert not np.array_equal(np.asarray(new["params"]["log_std"]), np.asarray(state["params"]["log_std"]))


def test_single_seed_cli_run_trains_chain(single: dict) -> None:
    r = single
    assert (r["task"], r["stack"], r["updates"], r["stop_reason"]) == ("Chain-v0", "jax", 2, "step budget")
    assert r["env_steps"] == 2 * SMALL["num_envs"] * SMALL["num_steps"]
    assert r["losses_finite"] and all(math.isfinite(x) for x in r["losses"].values()), r["losses"]
    assert r["losses"]["entropy"] == pytest.approx(envs.get("Chain-v0").action_dim * GAUSS_ENTROPY, abs=0.15)
    # Every env ended its 200-step episode in the second update: returns booked, in the chain's [-2, 0] a step.
    assert r["episodes"] == SMALL["num_envs"]
    assert -400 <= r["final_return"] <= 0 and r["curve"][1][4] == pytest.approx(r["final_return"], abs=1e-3)


def test_parallel_refill_run_trains_chain_as_single_seed_runs(small_config: Path, single: dict, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Three seeds through two slots (--refill; kept at two slots to the end, as the shrunk tail would compile a
    program more): a record per seed on its own budget, finite losses, and seed 1's returns its single-seed run's
    (up to the rounding a vmapped program may differ in, which the chain's chaotic swing grows within a rollout:
    a 2-ulp nudge of the weights moves its observations by ~1e-2 after 80 steps)."""
    monkeypatch.setattr(jax_batch, "program_sizes", lambda k, n_seeds, spread=1: [k])
    out = tmp_path / "k2.json"
    assert main(["train", "--task", "Chain-v0", "--stack", "jax", "--updates", "2", "--parallel-seeds", "2",
                 "--refill", "--seeds", "1,2,3", "--no-progress", "--config", str(small_config),
                 "--out", str(out)]) == 0  # fmt: skip
    runs = {r["seed"]: r for r in json.loads(out.read_text())["runs"]}
    assert sorted(runs) == [1, 2, 3]
    for r in runs.values():
        assert r["stack"] == "jax/2" and r["refill"] and r["updates"] == 2 and r["stop_reason"] == "step budget"
        assert r["losses_finite"] and all(math.isfinite(x) for x in r["losses"].values()), r["losses"]
        assert r["episodes"] == SMALL["num_envs"] and math.isfinite(r["final_return"])
    assert runs[3]["slot"] in (0, 1) and runs[3]["started_at_s"] > 0  # the refilled seed
    assert runs[1]["final_return"] == pytest.approx(single["final_return"], rel=1e-3)
    assert runs[1]["losses"]["entropy"] == pytest.approx(single["losses"]["entropy"], rel=1e-4)
    assert runs[2]["final_return"] != runs[1]["final_return"]
