"""The compiled PPO update (update.CompiledUpdate), every torch-agent stack's default: the same steps as the eager
update (gather, normalisation, loss, clip_grad_norm_, torch.optim.Adam) to float32 rounding, the stack names
that say which update ran, and one compiled smoke run through the CLI.

Every test here but the grouping one compiles one graph, the pinned CartPole-v1 config's (one call per epoch of four
minibatches), cached per process: the first one pays it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")

from portkern.cli import main  # noqa: E402
from portkern.portability.training.files import load_train  # noqa: E402
from portkern.train import config  # noqa: E402
from portkern.train.ppo import COMPILED_PARTS_NOTE, Agent, PhaseTimer, make_optimizer, ppo_update  # noqa: E402
from portkern.train.stacks import parse_stack  # noqa: E402
from portkern.train.update import CompiledUpdate  # noqa: E402

TASK = config.task("CartPole-v1")


def _rollout(agent: Agent, seed: int) -> tuple[torch.Tensor, ...]:
    """A flattened rollout of the pinned batch: obs, actions, log-probs and values from ``agent``, the log-probs
    moved off (ratios away from 1: the PPO clip matters), returns large (the grad-norm clip matters)."""
    g = torch.Generator().manual_seed(seed)
    n = TASK.ppo.batch_size
    obs = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        actions, logp, _, values = agent.act(obs)
    return (obs, actions, logp + 0.2 * torch.randn(n, generator=g), values, torch.randn(n, generator=g),
            10 * torch.randn(n, generator=g))  # fmt: skip


def _agent() -> tuple[Agent, torch.optim.Adam]:
    torch.manual_seed(3)
    agent = Agent(4, 2, TASK.ppo.hidden)
    return agent, make_optimizer(agent, TASK.ppo)


def test_compiled_minibatch_steps_equal_the_eager_ones() -> None:
    """Two compiled calls of the pinned config's whole update each (4 epochs x 4 minibatches of 512 rows, a
    compiled loop on a CPU), the lr changed before the second (annealing): parameters, Adam moments and step
    counts as 32 eager gathers, normalisations, backwards, clip_grad_norm_ and torch.optim.Adam steps leave them,
    and each call's loss stats its last minibatch's."""
    cfg = TASK.ppo
    mb = cfg.batch_size // cfg.num_minibatches
    eager_agent, eager_opt = _agent()
    agent, opt = _agent()
    rollout = _rollout(agent, 4)
    g = torch.Generator().manual_seed(5)
    compiled = CompiledUpdate(agent, cfg)
    assert compiled.loop and compiled.per_call == cfg.update_epochs * cfg.num_minibatches == 16
    perms = [torch.cat([torch.randperm(cfg.batch_size, generator=g) for _ in range(cfg.update_epochs)])
             for _ in range(2)]  # fmt: skip
    compiled.warm_up(opt, cfg.batch_size)  # as the runner does: the same graph its runs compile
    assert not opt.state and all(p.grad is None for p in agent.parameters())  # warm-up leaves both untouched
    norms = []
    for call, perm in enumerate(perms):
        if call == 1:
            for o in (eager_opt, opt):
                o.param_groups[0]["lr"] = 0.25 * cfg.lr
        for i in range(compiled.per_call):
            idx = perm[i * mb : (i + 1) * mb]
            obs, actions, old_logp, old_v, adv, ret = (t[idx] for t in rollout)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            _, newlogp, entropy, newv = eager_agent.act(obs, actions)
            ratio = (newlogp - old_logp).exp()
            pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            vc = old_v + torch.clamp(newv - old_v, -cfg.clip_coef, cfg.clip_coef)
            v_loss = 0.5 * torch.max((newv - ret) ** 2, (vc - ret) ** 2).mean()
            eager_opt.zero_grad()
            (pg - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss).backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(eager_agent.parameters(), cfg.max_grad_norm)))
            eager_opt.step()
        stats = compiled.step(opt, *rollout, perm)
        torch.testing.assert_close(stats[0], pg.detach(), rtol=1e-5, atol=1e-6)
    assert max(norms) > cfg.max_grad_norm, norms  # the clip scaled at least one step
    want = dict(eager_agent.named_parameters())
    for name, p in agent.named_parameters():
        # 32 Adam steps of gradients summed in another order: near-zero biases ~2e-7 apart (the lr is 1e-3).
        torch.testing.assert_close(p.detach(), want[name].detach(), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, name=name: f"{name}: {m}")  # fmt: skip
        if p.requires_grad:
            got, ref = opt.state[p], eager_opt.state[want[name]]
            assert float(got["step"]) == float(ref["step"]) == 32.0
            # A gradient is a sum over 512 rows, in another order than the eager backward's: ~1e-8 apart after
            # 32 steps where the moment is near zero.
            torch.testing.assert_close(got["exp_avg"], ref["exp_avg"], rtol=1e-5, atol=1e-7,
                                       msg=lambda m, name=name: f"{name}: {m}")  # fmt: skip
            torch.testing.assert_close(got["exp_avg_sq"], ref["exp_avg_sq"], rtol=1e-5, atol=1e-10, msg=name)
        else:
            assert p not in opt.state  # CartPole's unused log-std: no state, as the eager Adam keeps none


def test_compiled_ppo_update_equals_the_eager_one() -> None:
    """One whole update (4 epochs x 4 minibatches, the same permutations drawn): the same parameters and losses."""
    eager_agent, eager_opt = _agent()
    agent, opt = _agent()
    rollout = _rollout(agent, 6)
    torch.manual_seed(7)
    want = ppo_update(eager_agent, eager_opt, TASK.ppo, PhaseTimer(), *rollout)
    torch.manual_seed(7)
    got = ppo_update(agent, opt, TASK.ppo, PhaseTimer(), *rollout, compiled=CompiledUpdate(agent, TASK.ppo))
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
    for (name, p), q in zip(agent.named_parameters(), eager_agent.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6, msg=name)


def test_a_replaced_optimizer_or_state_is_the_one_stepped() -> None:
    """CompiledUpdate.step reuses its last lookup (the compiled step, the Adam state's tensors) from call to call:
    after ``load_state_dict`` (every parameter's state replaced) or with another optimizer it must look again and
    step the state the optimizer now holds, as an uninterrupted run steps its own."""
    cfg = TASK.ppo
    ref_agent, ref_opt = _agent()
    agent, opt = _agent()
    rollout = _rollout(agent, 8)
    ref, compiled = CompiledUpdate(ref_agent, cfg), CompiledUpdate(agent, cfg)
    k = compiled.per_call  # Adam steps per call
    rows = k * (cfg.batch_size // cfg.num_minibatches)
    first = torch.arange(rows).remainder(cfg.batch_size)
    second = first.flip(0).contiguous()
    for c, o in ((ref, ref_opt), (compiled, opt)):
        c.step(o, *rollout, first)
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # the same values in new tensors (a checkpoint's)
    with compiled.calls(opt):  # as ppo_update calls it
        compiled.step(opt, *rollout, second)
    ref.step(ref_opt, *rollout, second)
    want = dict(ref_agent.named_parameters())
    for name, p in agent.named_parameters():
        torch.testing.assert_close(p.detach(), want[name].detach(), msg=name)
        if p.requires_grad:
            assert float(opt.state[p]["step"]) == 2.0 * k, name
            torch.testing.assert_close(opt.state[p]["exp_avg_sq"], ref_opt.state[want[name]]["exp_avg_sq"], msg=name)
    other = make_optimizer(agent, cfg)  # a fresh optimizer for the same agent: its own state, from step 1
    compiled.step(other, *rollout, first)
    assert {float(other.state[p]["step"]) for p in other.state} == {float(k)}
    assert {float(opt.state[p]["step"]) for p in opt.state} == {2.0 * k}  # the first optimizer's state untouched


def test_small_minibatches_share_a_call_and_give_one_call_eachs_update() -> None:
    """Unrolled (CUDA's default, ``loop=False``): minibatches of 256 rows two to a compiled call
    (update.minibatches_per_call would group four: the rule has its own test, and two keep this graph's compile
    short), run one after the other inside it: one whole update (2 epochs x 8 minibatches, the same permutations
    drawn) leaves the parameters, Adam state and losses that one call per minibatch leaves (itself the eager
    update's to float32 rounding: the tests above); a per_call that does not divide the update's minibatches is
    refused."""
    import dataclasses

    cfg = dataclasses.replace(TASK.ppo, num_minibatches=8, update_epochs=2)
    one_agent, one_opt = _agent()
    agent, opt = _agent()
    rollout = _rollout(agent, 9)
    one = CompiledUpdate(one_agent, cfg, per_call=1, loop=False)
    grouped = CompiledUpdate(agent, cfg, per_call=2, loop=False)
    torch.manual_seed(7)
    want = ppo_update(one_agent, one_opt, cfg, PhaseTimer(), *rollout, compiled=one)
    torch.manual_seed(7)
    got = ppo_update(agent, opt, cfg, PhaseTimer(), *rollout, compiled=grouped)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7)
    for (name, p), q in zip(agent.named_parameters(), one_agent.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7, msg=name)
    assert {float(opt.state[p]["step"]) for p in opt.state} == {16.0}  # every minibatch stepped Adam
    with pytest.raises(ValueError, match=r"per_call: expected a divisor of the update's minibatches "
                       r"\(update_epochs x num_minibatches = 16\), got 3"):  # fmt: skip
        CompiledUpdate(agent, cfg, per_call=3)


@pytest.mark.parametrize("minibatches, rows, per_call", [
    (4, 512, 4),  # the pinned CartPole-v1 and Acrobot-v1 configs: one call per epoch
    (32, 128, 4),  # Pendulum-v1's: at most four minibatches a call, however small
    (4, 1024, 2),  # 2,048 rows a call at most
    (3, 512, 3),  # a divisor of the minibatches
    (6, 512, 3),
    (1, 2048, 1),
    (2, 4096, 1),  # one minibatch past the rows: a call each
])  # fmt: skip
def test_minibatches_per_call_groups_small_minibatches(minibatches: int, rows: int, per_call: int) -> None:
    import dataclasses

    from portkern.train.update import minibatches_per_call

    cfg = dataclasses.replace(TASK.ppo, num_minibatches=minibatches)
    assert minibatches_per_call(cfg, minibatches * rows) == per_call


def test_compiled_update_takes_only_the_eager_optimizer() -> None:
    agent, _ = _agent()
    with pytest.raises(ValueError, match="optimizer: the compiled update takes the eager path's torch.optim.Adam"):
        CompiledUpdate(agent, TASK.ppo).step(torch.optim.SGD(agent.parameters(), lr=0.1))


@pytest.mark.parametrize("text, label, compiled", [
    ("torch", "torch+compiled-update", True),
    ("gymnasium", "gymnasium+compiled-update", True),
    ("opencl+fused@pocl", "opencl+fused+compiled-update@pocl", True),
    ("opencl+fused+compiled-update@pocl", "opencl+fused+compiled-update@pocl", True),  # the old opt-in: an alias
    ("opencl+fused+eager-update@pocl", "opencl+fused@pocl", False),  # eager: the name every older file has
    ("numpy+eager-update", "numpy", False),
    ("jax", "jax", False),  # its own compiled loop, no torch update
])  # fmt: skip
def test_stack_names_say_which_update_ran(text: str, label: str, compiled: bool) -> None:
    spec = parse_stack(text)
    assert (spec.label, spec.compiled_update) == (label, compiled)


@pytest.mark.parametrize("text, message", [
    ("jax+eager-update", "+eager-update applies to the torch-agent stacks, not 'jax'"),
    ("+compiled-update", "+compiled-update applies to the torch-agent stacks, not ''"),
    ("opencl+eager-update+fused", "unknown mode 'eager-update+fused'"),
])  # fmt: skip
def test_bad_update_suffixes(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as exc:
        parse_stack(text)
    assert message in str(exc.value)


def test_compiled_smoke_run_on_a_fused_stack(tmp_path: Path) -> None:
    """The default (compiled) update on a fused OpenCL stack through the CLI: named, noted, finite, readable."""
    out = tmp_path / "smoke.json"
    # 8 updates (~0.15 s on a fast 2-core VM): with 3 (~0.06 s) one scheduler slice lost to the other pytest
    # worker between two timers (6.5 ms in one CI run, against 1.5 ms alone) broke the 5 % untimed bound.
    argv = ["train", "--task", "CartPole-v1", "--stack", "opencl+fused@pocl", "--updates", "8", "--seeds", "1",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = load_train(out)  # the report's reader takes the new fields
    (r,) = doc["runs"]
    assert r["stack"] == "opencl+fused+compiled-update@pocl" and r["update"] == "compiled"
    assert r["update_parts_note"] == COMPILED_PARTS_NOTE and set(r["update_parts"].values()) == {0.0}
    assert r["updates"] == 8 and r["losses_finite"] and all(math.isfinite(x) for x in r["losses"].values())
    assert r["phases"]["update"] > 0 and 0 <= r["untimed_s"] <= 0.05 * r["wall_s"]
    assert set(doc["prime_s"]["CartPole-v1"]) == {"opencl+fused+compiled-update@pocl"}
    assert json.loads(out.read_text())["runs"][0]["update"] == "compiled"


def test_compiled_loop_update_equals_the_eager_one_for_box_actions() -> None:
    """Pendulum-v1's whole update as one compiled loop (10 epochs x 32 minibatches of 128 rows, Gaussian actions,
    the log-std learnt): the eager update's parameters and losses, the same permutations drawn."""
    task = config.task("Pendulum-v1")
    cfg = task.ppo
    agents = []
    for _ in range(2):
        torch.manual_seed(3)
        agent = Agent(3, None, cfg.hidden)
        agents.append((agent, make_optimizer(agent, cfg)))
    (eager_agent, eager_opt), (agent, opt) = agents
    g = torch.Generator().manual_seed(6)
    n = cfg.batch_size
    obs = torch.randn(n, 3, generator=g)
    with torch.no_grad():
        actions, logp, _, values = agent.act(obs)
    rollout = (obs, actions, logp + 0.2 * torch.randn(n, generator=g), values, torch.randn(n, generator=g),
               10 * torch.randn(n, generator=g))  # fmt: skip
    compiled = CompiledUpdate(agent, cfg)
    assert compiled.loop and compiled.per_call == cfg.update_epochs * cfg.num_minibatches
    torch.manual_seed(7)
    want = ppo_update(eager_agent, eager_opt, cfg, PhaseTimer(), *rollout)
    torch.manual_seed(7)
    got = ppo_update(agent, opt, cfg, PhaseTimer(), *rollout, compiled=compiled)
    assert got == pytest.approx(want, rel=1e-3, abs=1e-5)
    assert float(opt.state[agent.log_std]["step"]) == cfg.update_epochs * cfg.num_minibatches
    for (name, p), q in zip(agent.named_parameters(), eager_agent.parameters()):
        # 320 Adam steps of gradients summed in another order than the eager backward's.
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")  # fmt: skip
