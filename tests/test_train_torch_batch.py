"""portkern train --parallel-seeds K on the torch stacks (portkern.train.torch_batch): K seeds' agents stacked
and trained by one vmapped, compiled minibatch step that equals K single-seed steps, each slot's env and agent
those of its seed's own run, and the records of a K = 2 batch through the CLI.

Every test here shares one K = 2 collection graph and one K = 2 update graph (the pinned CartPole-v1 config's,
cached per process); the first test to build them pays their compile (about a minute on the 2-core dev VM)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")

from portkern import step  # noqa: E402
from portkern.cli import main  # noqa: E402
from portkern.train import config, jax_batch, runner, torch_batch  # noqa: E402
from portkern.train.ppo import PHASES, Agent, _grad_fn  # noqa: E402
from portkern.train.update import AdamState, Minibatch, UpdateRule, _minibatch_step  # noqa: E402
from portkern.train.stacks import parse_stack  # noqa: E402

from . import train_docs as td  # noqa: E402
TASK = config.task("CartPole-v1")
GRID = ["train", "--task", "CartPole-v1", "--stack", "torch", "--parallel-seeds", "2", "--no-progress"]


@pytest.fixture(autouse=True)
def _one_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """`portkern train --parallel-seeds` would start JAX with one CPU device per core (for the jax stack): keep
    JAX as it is for the other tests of the process."""
    monkeypatch.setattr(jax_batch, "spread_cpu_devices", lambda n: False)


@pytest.fixture(scope="module")
def batch() -> torch_batch._Batch:
    """A K = 2 batch of seeds 1 and 2 on the torch stack, built (not trained) as train_batch builds it."""
    torch.set_num_threads(TASK.ppo.torch_threads)  # the runs' thread count: the same compiled graphs
    return torch_batch._Batch(TASK, parse_stack("torch"), [1, 2])


def test_each_slot_starts_as_its_seeds_own_run(batch: torch_batch._Batch) -> None:
    """Slot k's agent is seed k's single-seed init, and its N envs reset to the states seed k's env resets to."""
    n = TASK.ppo.num_envs
    for k, seed in enumerate((1, 2)):
        torch.manual_seed(seed)
        agent = Agent(4, 2, TASK.ppo.hidden)
        for name, p in agent.named_parameters():
            assert torch.equal(batch.params[batch.names.index(name)][k], p.detach()), name
        single = step.make("CartPole-v1", n, backend="torch", seed=seed).reset()
        assert torch.equal(batch.next_obs[k * n : (k + 1) * n], single)
    assert not torch.equal(batch.next_obs[:n], batch.next_obs[n:])


def test_compiled_k2_minibatch_step_equals_two_single_seed_steps(batch: torch_batch._Batch) -> None:
    """Two compiled calls (the lr changed between them) on K = 2 stacked agents: each seed's parameters, Adam
    moments and loss stats as update._minibatch_step leaves its own, on the same rows; each seed's gradient clipped by
    its own norm (the large returns make the clip bind, at different scales per seed)."""
    cfg = TASK.ppo
    B, mb, k = cfg.batch_size, cfg.batch_size // cfg.num_minibatches, 2
    g = torch.Generator().manual_seed(7)
    obs = torch.randn(k, B, 4, generator=g)
    actions = torch.randint(0, 2, (k, B), generator=g)
    scale = torch.tensor([[1.0], [5.0]])  # per seed: the clip binds at another norm for each
    rollout = (obs, actions, -0.7 + 0.2 * torch.randn(k, B, generator=g), torch.randn(k, B, generator=g),
               torch.randn(k, B, generator=g), 10 * torch.randn(k, B, generator=g) * scale)  # fmt: skip
    perms = [torch.argsort(torch.rand(k, B, generator=g), dim=1)[:, :mb].contiguous() for _ in range(2)]
    params = [p.clone() for p in batch.train_params]
    m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    steps, lr = [torch.zeros(()) for _ in params], torch.zeros(())
    grad_fn = _grad_fn(Agent(4, 2, cfg.hidden), cfg)
    singles = [([p[i].clone() for p in params], [torch.zeros_like(p[i]) for p in params],
                [torch.zeros_like(p[i]) for p in params], [torch.zeros(()) for _ in params])
               for i in range(k)]  # fmt: skip
    for call, rate in enumerate((cfg.lr, 0.5 * cfg.lr)):
        lr.fill_(rate)
        with torch.no_grad():
            stats = batch.update_fn(params, m, v, steps, lr, *rollout, perms[call])
        for i, (p1, m1, v1, s1) in enumerate(singles):
            with torch.no_grad():
                want = _minibatch_step(UpdateRule(grad_fn, batch.trained, cfg, (0.9, 0.999), 1e-5),
                                       AdamState(p1, m1, v1, s1, lr),
                                       Minibatch(*(x[i] for x in rollout), perms[call][i]))  # fmt: skip
            torch.testing.assert_close(stats[i], want, rtol=1e-5, atol=1e-5)
            for got, ref in zip((params, m, v), (p1, m1, v1)):
                for a, b in zip(got, ref):
                    torch.testing.assert_close(a[i], b, rtol=1e-5, atol=1e-6)
    assert int(steps[0]) == 2
    # The two seeds moved differently: one update each, not one shared.
    assert not torch.allclose(params[0][0] - batch.train_params[0][0], params[0][1] - batch.train_params[0][1])


def _run(tmp_path: Path, *argv: str) -> dict:
    out = tmp_path / "k2.json"
    assert main([*GRID, "--out", str(out), *argv]) == 0
    return json.loads(out.read_text())


def test_k2_cli_run_writes_a_record_per_seed(tmp_path: Path) -> None:
    doc = _run(tmp_path, "--seeds", "1,2", "--updates", "3")
    assert [(r["stack"], r["seed"]) for r in doc["runs"]] == [("torch+compiled-update/2", 1),
                                                               ("torch+compiled-update/2", 2)]  # fmt: skip
    assert set(doc["prime_s"]["CartPole-v1"]) == {"torch+compiled-update/2"}
    for r in doc["runs"]:
        assert r["parallel_seeds"] == 2 and r["batch_seeds"] == [1, 2] and r["batch_updates"] == 3
        assert r["updates"] == 3 and r["env_steps"] == 3 * 32 * 64 and r["stop_reason"] == "step budget"
        assert r["losses_finite"] and all(math.isfinite(x) for x in r["losses"].values())
        conv = [x for x in doc["runs"] if x["converged"]]
        assert r["device_seconds_per_policy"] is None if not r["converged"] else \
            r["device_seconds_per_policy"] == pytest.approx(r["wall_s"] / len(conv), abs=1e-5)  # fmt: skip
        assert r["update"] == "compiled" and r["collect"] == "compiled" and "batched ensemble" in r["phase_note"]
        assert set(r["phases"]) == set(PHASES) and r["phases"]["env"] > 0 and r["phases"]["update"] > 0
        assert abs(r["wall_s"] - sum(r["phases"].values()) - r["untimed_s"]) < 1e-5
        assert 0 <= r["untimed_s"] <= runner.UNTIMED_TOLERANCE * r["wall_s"]
    a, b = doc["runs"]
    assert a["wall_s"] == b["wall_s"] and a["curve"] != b["curve"]  # one batch, two different policies


def test_converged_k2_batch_splits_its_wall_time(tmp_path: Path) -> None:
    """With a target a random policy meets, both seeds converge at update 1 and share the batch's wall time."""
    doc = _run(tmp_path, "--seeds", "3,4", "--updates", "3", "--config", str(td.easy_config(tmp_path)))
    td.check_batch_converged_at_update_1(doc, k=2)


@pytest.mark.parametrize("stacks, refill, message", [
    (["torch"], True, "--refill: only the jax stack refills its slots; not torch+compiled-update"),
    (["torch_compile"], True, "not torch_compile+compiled-update"),
    (["numpy"], False, "--parallel-seeds 2: only the jax stack and the torch stacks (torch, torch_compile) train"),
    (["torch", "numpy"], False, "; not numpy+compiled-update:"),
    (["torch+eager-update"], False, "not torch: drop +eager-update"),
])  # fmt: skip
def test_check_parallel_refusals(stacks: list[str], refill: bool, message: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        runner.check_parallel([parse_stack(s) for s in stacks], [1, 2], 2, refill)
    assert message in str(err.value)
    runner.check_parallel([parse_stack("torch"), parse_stack("torch_compile@cpu")], [1, 2], 2)  # accepted


def test_train_batch_refuses_bad_arguments(batch: torch_batch._Batch) -> None:
    with pytest.raises(ValueError, match="seeds: expected distinct integer seeds"):
        torch_batch.train_batch(TASK, parse_stack("torch"), [1, 1], result_class=runner.RunResult)
    with pytest.raises(ValueError, match="slots: the torch batch trains all its seeds at once"):
        torch_batch.train_batch(TASK, parse_stack("torch"), [1, 2, 3], result_class=runner.RunResult, slots=2)
    with pytest.raises(ValueError, match="resident torch stacks"):
        torch_batch.train_batch(TASK, parse_stack("numpy"), [1, 2], result_class=runner.RunResult)
