"""The torch stacks' compiled collection (collect.CompiledCollect, their default): the same rollouts as the eager
loop (``+eager-act``) from the same seed, its branch-free autoreset against the backends' own, the stack names,
and the phases a run records.

The compiled tests share one graph, the pinned CartPole-v1 config's, cached per process: the first one pays it
(tests/test_train.py's smoke runs compile the same one)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")

from portkern import envs, step  # noqa: E402
from portkern.train import config, runner  # noqa: E402
from portkern.train.ppo import Agent, PhaseTimer  # noqa: E402
from portkern.train.collect import _step  # noqa: E402
from portkern.train.stacks import Storage, build, parse_stack  # noqa: E402

TASK = config.task("CartPole-v1")
BUFS = ("state", "steps", "episodes", "needs_reset", "obs", "final_obs", "reward", "terminated", "truncated")


@pytest.fixture(autouse=True)
def _pinned_threads():
    """The pinned thread count, as every run sets it: the compiled step's graph is per thread count, so the tests
    share the smoke runs' one (tests/test_train.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(TASK.ppo.torch_threads)
    yield
    torch.set_num_threads(before)


def _collect(stack_name: str, task: config.TaskConfig, seed: int, rollouts: int) -> tuple[list[dict], dict, bytes, str]:
    """``rollouts`` consecutive rollouts of one stack from a fresh agent (torch seed ``seed``): each rollout's
    storage, the env's buffers after the last, the global generator's state after it, and how it collected."""
    cfg = task.ppo
    torch.manual_seed(seed)
    stack = build(parse_stack(stack_name), task, seed)
    obs = stack.setup()
    agent = Agent(stack.obs_dim, stack.n_actions, cfg.hidden)
    with torch.no_grad():
        for p in agent.actor[-1].parameters():  # orthogonal init's last layer is tiny: make the policy matter
            p.add_(0.5 * torch.randn_like(p))
    stack.warm_up(agent)
    store = Storage.zeros(cfg.num_steps, cfg.num_envs, stack.obs_dim, stack.discrete, stack.agent_device)
    out = []
    for _ in range(rollouts):
        obs = stack.collect(agent, store, PhaseTimer(), obs)
        out.append({k: v.clone() for k, v in vars(store).items()} | {"next_obs": obs.clone()})
    bufs = {k: getattr(stack.env._bufs, k).clone() for k in BUFS}
    return out, bufs, torch.get_rng_state().numpy().tobytes(), stack.collect_kind


# One graph serves both backends (the step runs their shared ops): torch_compile's case only adds its eager loop's
# own compiles, so it is the slow one.
@pytest.mark.parametrize("backend", ["torch", pytest.param("torch_compile", marks=pytest.mark.slow)])
def test_compiled_collect_gives_the_eager_rollouts(backend: str) -> None:
    """Two rollouts (64 steps of 32 envs, a few dozen autoresets) from one seed: every sampled action, reward,
    termination and truncation, every env's episode and step counter, and the generator's state after them are
    bitwise the eager loop's: the compiled step draws the same numbers from the same generator (ATen's random ops,
    ``fallback_random``), so the discrete outcomes agree unless a draw lands within float32 rounding of a category
    boundary or a threshold (none does for this seed). The floats (obs, log-probs, values) agree to float32
    rounding only: Inductor's fused tanh, sin and cos differ from ATen's by a few ulp."""
    eager, eager_bufs, eager_rng, eager_kind = _collect(f"{backend}+eager-act", TASK, 7, 2)
    compiled, bufs, rng, kind = _collect(backend, TASK, 7, 2)
    assert (kind, eager_kind) == ("compiled", "eager")
    assert rng == eager_rng  # as many draws, in the same order
    ends = 0
    for e, c in zip(eager, compiled):
        for k in ("actions", "rewards", "terminated", "truncated"):
            assert torch.equal(e[k], c[k]), k
        for k in ("obs", "final_obs", "logprobs", "values", "next_obs"):
            torch.testing.assert_close(c[k], e[k], rtol=1e-5, atol=1e-5, msg=k)
        ends += int((e["terminated"] | e["truncated"]).sum())
    assert ends >= 10, ends  # the autoreset ran, many times
    for k in ("steps", "episodes", "needs_reset", "terminated", "truncated"):
        assert torch.equal(bufs[k], eager_bufs[k]), k
    torch.testing.assert_close(bufs["state"], eager_bufs["state"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_branch_free_step_equals_the_backend_step(env_id: str, autoreset: str) -> None:
    """The compiled step's body run eagerly (no compile: cheap) against the torch backend's own ``env.step``
    (``nonzero``, then resets of the finished envs only) on twin envs fed the same actions through episode ends
    (CartPole's terminations; Pendulum's truncations, its envs started 1 to 16 steps short of the limit): every
    env buffer and recorded row bitwise equal, in both autoreset modes."""
    n, steps = 16, 80
    twin, env = (step.make(env_id, n, backend="torch", seed=3, autoreset=autoreset) for _ in range(2))
    spec, b = env.spec, env._bufs
    for e in (twin, env):
        e.reset()
        if not spec.is_discrete:  # Pendulum never terminates: bring every env close to its truncation
            e._bufs.steps.copy_(torch.arange(n, dtype=torch.int32) + spec.max_episode_steps - n)
    values = env.backend._params_view(spec, env._param_vector)._values
    seed, index = torch.tensor(env.seed, dtype=torch.int64), torch.arange(n, dtype=torch.int64)
    g = torch.Generator().manual_seed(4)
    rows = [torch.zeros((steps, n)), *(torch.zeros((steps, n), dtype=torch.bool) for _ in range(2)),
            torch.zeros((steps, n, spec.obs_dim))]  # fmt: skip
    for t in range(steps):
        if spec.is_discrete:
            actions = torch.randint(0, spec.discrete_actions, (n,), generator=g, dtype=torch.int32)
        else:
            actions = 4 * torch.rand(n, generator=g) - 2
        twin.step(actions.clone())
        with torch.no_grad():
            _step(spec, autoreset == "next_step", spec.max_episode_steps, actions, *(getattr(b, k) for k in BUFS),
                  values, seed, index, *rows, torch.tensor([t]))  # fmt: skip
        for k in BUFS:
            assert torch.equal(getattr(b, k), getattr(twin._bufs, k)), (t, k)
        for row, k in zip(rows, ("reward", "terminated", "truncated", "final_obs")):
            assert torch.equal(row[t], getattr(b, k)), (t, k)
    ended = (rows[1] | rows[2]).any(0)
    assert bool(ended.all()), ended  # every env's episode ended at least once: each was reset
    assert bool((b.episodes.to(torch.int64) >= 1).all())


@pytest.mark.parametrize("text, label, act, update", [
    ("torch", "torch+compiled-update", True, True),
    ("torch_compile+eager-act", "torch_compile+eager-act+compiled-update", False, True),
    ("torch+eager-act+eager-update", "torch+eager-act", False, False),
    ("torch+eager-update+eager-act@cpu", "torch+eager-act@cpu", False, False),
    ("torch+compiled-act", "torch+compiled-update", True, True),  # the default said explicitly
])  # fmt: skip
def test_eager_act_suffix_names_the_stack(text: str, label: str, act: bool, update: bool) -> None:
    spec = parse_stack(text)
    assert (spec.label, spec.compiled_act, spec.compiled_update) == (label, act, update)
    # A label parses back to its acting (an eager update's label is the plain name: it reads as compiled, the
    # convention of every file written before the compiled update became the default).
    assert parse_stack(spec.label).compiled_act == act


@pytest.mark.parametrize("text", ["numpy+eager-act", "opencl+fused+eager-act@pocl", "jax+eager-act", "+eager-act",
                                  "gymnasium+compiled-act"])
def test_eager_act_suffix_only_on_the_torch_stacks(text: str) -> None:
    with pytest.raises(ValueError, match=r"applies to the torch and torch_compile stacks"):
        parse_stack(text)


def test_compiled_collect_run_records_its_phases() -> None:
    """Three updates on ``torch`` (the eager update: this is about the collection): the compiled step is timed as
    "env", the bootstrap values as "act", no data moves, the phases cover the wall time, and the run says which
    collection ran."""
    task = config.task("CartPole-v1", total_timesteps=3 * TASK.ppo.batch_size)
    spec = parse_stack("torch+eager-update")
    runner.prime(task, spec)
    r, _ = runner.train_one(task, spec, 1)
    assert r.collect == "compiled" and r.updates == 3 and r.losses_finite
    assert r.phases["env"] > 0 and r.phases["act"] > 0 and r.phases["move"] == 0.0
    assert 0 <= r.untimed_s <= runner.UNTIMED_TOLERANCE * r.wall_s, (r.untimed_s, r.wall_s)
    eager, _ = runner.train_one(task, parse_stack("torch+eager-act+eager-update"), 1)
    assert eager.collect == "eager" and eager.stack == "torch+eager-act"
    assert eager.curve[0][4] == r.curve[0][4]  # the same episodes in the first update


def test_a_step_that_breaks_the_graph_runs_nothing_and_says_so() -> None:
    """A step Dynamo cannot take whole (a host read inside, as Acrobot's wrap loop had) is refused while tracing,
    before any of it ran: the caller then collects eagerly."""
    from portkern.train.collect import _CollectGraph

    @torch.compiler.disable
    def host_read(x: torch.Tensor) -> bool:
        return bool(x.any())

    def broken(x: torch.Tensor) -> None:
        x.add_(1)
        if host_read(x > 5):
            x.zero_()

    x = torch.zeros(3)
    g = _CollectGraph(broken, x.device)
    assert g(x) is False and g.whole is False and torch.equal(x, torch.zeros(3))  # nothing ran
    assert g(x) is False and torch.equal(x, torch.zeros(3))  # and never will: refused without tracing again
    # (A step that compiles whole: every CartPole test above.)


def test_acrobot_collects_in_one_graph_as_the_eager_loop_does() -> None:
    """Acrobot-v1's step has a data-dependent loop (its angle wrap), which under torch.compile runs as torch's
    ``while_loop`` inside the graph (``_torch_ops._wrap``): the step compiles whole, its runs record
    ``collect: "compiled"``, and it collects the eager loop's rollout as CartPole's does above: the discrete
    outcomes and the generator bitwise, the floats to float32 rounding (Inductor's sin and cos, a few ulp)."""
    task = config.task("Acrobot-v1")
    eager, eager_bufs, eager_rng, _ = _collect("torch+eager-act", task, 2, 1)
    compiled, bufs, rng, kind = _collect("torch", task, 2, 1)
    assert kind == "compiled" and parse_stack("torch").compiled_act
    assert rng == eager_rng
    for k in ("actions", "rewards", "terminated", "truncated"):
        assert torch.equal(compiled[0][k], eager[0][k]), k
    for k in ("obs", "final_obs", "logprobs", "values", "next_obs"):
        torch.testing.assert_close(compiled[0][k], eager[0][k], rtol=1e-5, atol=1e-5, msg=k)
    for k in ("steps", "episodes", "needs_reset", "terminated", "truncated"):
        assert torch.equal(bufs[k], eager_bufs[k]), k
    torch.testing.assert_close(bufs["state"], eager_bufs["state"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_actions, rows", [(2, 1), (2, 32), (3, 4), (5, 1000)])
def test_unchecked_sampling_draws_what_categorical_draws(n_actions: int, rows: int) -> None:
    """The compiled graphs' sampling (ppo.sample_categorical: multinomial's one-sample path without its checks)
    draws the very actions Categorical.sample() draws from the same generator state, and leaves the generator
    where it leaves it; a peaked row still samples its likely action (the race is not an argmax of the probs)."""
    from torch.distributions import Categorical

    from portkern.train.ppo import sample_categorical

    logits = 3 * torch.randn(rows, n_actions, generator=torch.Generator().manual_seed(rows))
    dist = Categorical(logits=logits, validate_args=False)
    torch.manual_seed(11)
    want = dist.sample()
    after = torch.get_rng_state()
    torch.manual_seed(11)
    got = sample_categorical(dist.probs)
    assert got.dtype == want.dtype and got.shape == want.shape == (rows,)
    assert torch.equal(got, want) and torch.equal(torch.get_rng_state(), after)
    draws = torch.stack([sample_categorical(torch.tensor([[0.1, 0.9]])) for _ in range(400)])
    assert 0.8 < float(draws.float().mean()) < 0.97  # about 0.9 of the draws are action 1


@pytest.mark.parametrize("env_id, num_steps, k", [
    ("CartPole-v1", 64, 4),
    ("Pendulum-v1", 128, 4),
    ("CartPole-v1", 6, 3),  # the most steps dividing the rollout
    ("CartPole-v1", 7, 1),
    ("Acrobot-v1", 64, 1),  # capped: Inductor miscompiled its multi-step graphs (collect.STEPS_PER_CALL_CAP)
    ("Chain-v0", 64, 1),  # capped: its step's compile
])  # fmt: skip
def test_steps_per_call(env_id: str, num_steps: int, k: int) -> None:
    from portkern.train.collect import steps_per_call

    assert steps_per_call(envs.get(env_id), num_steps) == k
