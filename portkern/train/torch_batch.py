"""``portkern train --parallel-seeds K`` on the resident torch stacks (``torch``, ``torch_compile``): K seeds
trained at once on one device as a batched ensemble, PureJaxRL's vmap over seeds done in PyTorch.

* Agents: seed k's agent is initialised exactly as its single-seed run's (``torch.manual_seed(seed_k)``, then
  :class:`ppo.Agent`), and the K agents' parameters are stacked into ``[K, ...]`` tensors
  (``torch.func.stack_module_state``); one Adam state per stacked tensor (Adam is elementwise, so that is K
  independent optimizers), the lr annealed alike for all (every seed is at the same update).
* Env: one portkern env of K x N envs on the stack's backend, rows ``k*N:(k+1)*N`` seed k's. Its random streams
  are Philox keyed (seed, env index); the batch keys row ``k*N + i`` with (seed_k, i), so slot k's envs reset
  and autoreset with the very draws of seed k's single-seed env (a single-seed run's initial states, per slot).
* Acting: ``torch.func.vmap`` over K of the actor and critic forwards (``functional_call`` into a template
  agent), obs viewed ``[K, N, D]``; the actions sampled from the agent's own distributions on the flattened
  K x N rows, on PyTorch's global generator. Acting, env step and storage writes are one ``torch.compile`` call
  per step for all K (as :class:`collect.CompiledCollect` compiles one seed's steps), eager where the env step does not
  compile to one graph (none of portkern's envs now) or for ``+eager-act``.
* GAE: ``portkern.buffer.gae`` on the ``[T, K*N]`` rollout, on the stack's backend (per column: seeds never mix).
* Update: per epoch every seed draws its own permutation (``argsort`` of ``[K, B]`` uniforms); one compiled call
  per minibatch for all K: ``vmap`` of :func:`update._minibatch_grads` (gather, advantage normalisation, loss,
  ``torch.func.grad``, and the grad-norm clip, per seed over its own gradients, as ``clip_grad_norm_`` clips
  one agent's), then :func:`update._adam_step` on the stacked tensors.

Randomness: a batch's action samples and permutations come from the one global generator (seeded by the
last agent's init), so a slot does not replay its seed's single-seed run draw for draw; its init and its env
streams are that run's. See :data:`PARALLEL_NOTE` for what the records hold.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import torch

from ..backends._torch_ops import put_row
from .config import TaskConfig
from .jax_batch import batch_label
from .ppo import (COMPILED_PARTS_NOTE, UPDATE_PARTS, Agent, PhaseTimer, _grad_fn, actor_critic, compile_template,
                  Storage, record_update, sample_categorical, window_mean)  # fmt: skip
from .update import AdamState, Minibatch, UpdateRule, _adam_step, _minibatch_grads

#: What a batch record says about its phases and its convergence (the runner's JSON carries it per run).
PARALLEL_NOTE = (
    "torch stack, K seeds at once (a batched ensemble: the K agents' parameters stacked, torch.func.vmap over "
    "seeds): one env of K x N envs, one compiled call per step acting and stepping for all K (phase 'env'), "
    "bootstrap values in 'act', one GAE over the K x N columns in 'adv', one compiled call per minibatch for all "
    "K (each seed its own permutation, grad-norm clip and Adam state) in 'update'; 'setup' builds the env, the K "
    "agents and the storage; 'move' is the per-update copy of rewards and episode ends to the host, 'other' "
    "the per-seed episode bookkeeping and convergence tests. The phases are the batch's, shared by its records. "
    "Convergence is per seed, the single-seed test after every update; a converged seed trains on with the "
    "others (its updates are on the bill) but its record freezes at the update it converged at (updates, "
    "steps_to_converge, curve, losses, final_return, converged_at_s). The batch stops when every seed has "
    "converged or the task's step or time budget is spent; env_steps is what each slot trained, the batch's "
    "updates x batch size. device_seconds_per_policy = the batch's wall time / its converged policies, the same on "
    "each converged seed's record; an unconverged seed's record has none. compile_s counts compiles inside the "
    "timed batch only: the compiled graphs are built before the batches (prime_s)."
)  # fmt: skip


@lru_cache(maxsize=None)
def _batch_result_class(base: type) -> type:
    """A K-seed batch's record: the runner's record plus the batch it shared the device with (the fields the jax
    batch's records carry under the same names, where they mean the same)."""

    @dataclass
    class TorchBatchResult(base):
        """See :data:`PARALLEL_NOTE`."""

        phase_note: str = PARALLEL_NOTE
        #: The seeds trained at once with this one (itself included), in order.
        batch_seeds: list[int] = dataclasses.field(default_factory=list)
        #: Updates the batch ran (every seed ran them all: a converged one trains on with the others).
        batch_updates: int = 0
        #: Seconds from the batch's start to the end of the update at which this seed converged, or None.
        converged_at_s: float | None = None
        #: The slot (0 .. K - 1) that trained this seed: its rows of the batch's env are slot * N .. slot * N + N.
        slot: int = 0

    return TorchBatchResult


# ---- the compiled pieces (one per shape, config and thread count in the process) -----------------------
#: key -> the compiled (or eager, where it does not compile whole) collection step for K seeds.
_COLLECT: dict = {}
#: key -> the compiled minibatch step for K seeds.
_UPDATE: dict = {}
#: Keys whose compiled function has run once: later calls skip Dynamo's guards, as update.CompiledUpdate does.
_WARM: set = set()


def _forward(template: Agent, names: tuple[str, ...], params: list[torch.Tensor],
             x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One agent's actor output and value on ``x`` (:func:`ppo.actor_critic` with its stacked slice)."""
    return actor_critic(template, dict(zip(names, params)), x)


def _value(template: Agent, names: tuple[str, ...], params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """One agent's value on ``x``: :meth:`Agent.value` through ``functional_call``."""
    from torch.func import functional_call

    critic = {n[7:]: v for n, v in zip(names, params) if n.startswith("critic.")}
    return functional_call(template.critic, critic, (x,)).squeeze(-1)


def _distribution(out: torch.Tensor, log_std: torch.Tensor, discrete: bool, action_dim: int) -> Any:
    """:meth:`Agent.distribution` on K agents' outputs ``[K, N, ...]``, flattened to K x N rows (each row's
    log-std its agent's: ``log_std`` is ``[K, 1]``)."""
    from torch.distributions import Categorical, Independent, Normal

    k, n = out.shape[:2]
    if discrete:
        return Categorical(logits=out.reshape(k * n, -1), validate_args=False)
    std = log_std.exp().reshape(k, 1, 1).expand_as(out)
    if action_dim > 1:
        return Independent(Normal(out.reshape(k * n, -1), std.reshape(k * n, -1), validate_args=False), 1,
                           validate_args=False)  # fmt: skip
    return Normal(out.reshape(k * n), std.reshape(k * n), validate_args=False)


def _collect_step(template: Agent, names: tuple[str, ...], k: int, discrete: bool, action_dim: int, spec: Any,
                  next_step: bool, max_steps: int, params: list[torch.Tensor], obs: torch.Tensor,
                  s_obs: torch.Tensor, s_actions: torch.Tensor, s_logprobs: torch.Tensor, s_values: torch.Tensor,
                  *env_args: torch.Tensor) -> None:  # fmt: skip
    """One step for K seeds: obs recorded, the K agents' forwards (``vmap`` over the stacked parameters, obs viewed
    ``[K, N, D]``), actions sampled with their log-probs and values recorded, and the env step of
    :func:`collect._step` (its autoreset keyed by each row's own seed and env index)."""
    from torch.func import vmap

    from .collect import _step

    t = env_args[-1]
    put_row(s_obs, t, obs)
    out, value = vmap(functools.partial(_forward, template, names))(params, obs.view(k, -1, obs.shape[-1]))
    log_std = params[names.index("log_std")]
    dist = _distribution(out, log_std, discrete, action_dim)
    # The draw Categorical.sample() makes, without torch.multinomial's checks (host reads): ppo.sample_categorical.
    action = sample_categorical(dist.probs) if discrete else dist.sample()
    put_row(s_actions, t, action)
    put_row(s_logprobs, t, dist.log_prob(action))
    put_row(s_values, t, value.reshape(-1))
    _step(spec, next_step, max_steps, action.to(torch.int32) if discrete else action, *env_args)


def _update_step(rule: UpdateRule, params: list[torch.Tensor], exp_avg: list[torch.Tensor],
                 exp_avg_sq: list[torch.Tensor], steps: list[torch.Tensor], lr: torch.Tensor,
                 *minibatch: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """One minibatch for K seeds: ``vmap`` of :func:`update._minibatch_grads` over the stacked parameters, the
    per-seed rollouts ``[K, B, ...]`` and row indices ``[K, mb]`` (each seed clipped by its own gradient norm),
    then one Adam step on the stacked tensors; the loss stats ``[K, 4]``."""
    from torch.func import vmap

    grads, stats = vmap(functools.partial(_minibatch_grads, rule))(params, Minibatch(*minibatch))
    _adam_step(rule, AdamState(params, exp_avg, exp_avg_sq, steps, lr), grads)
    return stats


def _own_code(fn: Callable[..., Any], *bound: Any, name: str) -> Callable[..., Any]:
    """``fn`` with its first arguments ``bound``, as a function with a code object of its own named ``name``
    (Dynamo's cache and recompile limit are per code object: one per compiled key)."""
    from ..backends.torch_compile import _renamed

    def call(*args: Any) -> Any:
        return fn(*bound, *args)

    return _renamed(call, name)


class _Batch:
    """K seeds' agents, optimizer state, env and storage on one torch device, and the three stages of an update
    (collect, advantages, update) for all K at once."""

    def __init__(self, task: TaskConfig, spec: Any, seeds: list[int]) -> None:
        from torch.func import stack_module_state

        from .. import envs, step
        from ..backends import _torch_ops as ops

        cfg = task.ppo
        self.task, self.spec, self.seeds, self.k = task, spec, list(seeds), len(seeds)
        env_spec = envs.get(task.env_id)
        self.discrete = env_spec.is_discrete
        n_actions = env_spec.discrete_actions if self.discrete else None
        self.obs_dim, self.action_dim = env_spec.obs_dim, env_spec.action_dim
        k, n, T, D = self.k, cfg.num_envs, cfg.num_steps, self.obs_dim
        self.env = env = step.make(task.env_id, k * n, backend=spec.backend, device=spec.device, seed=self.seeds[0])
        self.backend = b = env.backend
        env.reset()
        self.device = device = env.obs.device
        # Row k*N + i is env i of seed k: Philox keys (seed_k, i), the single-seed env's streams.
        self.row_seed = torch.tensor(self.seeds, dtype=torch.int64, device=device).repeat_interleave(n)
        self.env_index = torch.arange(n, dtype=torch.int64, device=device).repeat(k)
        self.env_params = b._params_view(env.spec, env._param_vector)._values
        bufs = env._bufs
        with torch.no_grad():
            ops.env_reset(env.spec, bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs,
                          b._params_view(env.spec, env._param_vector), self.row_seed, True, self.env_index)  # fmt: skip
        agents = []
        for s in self.seeds:  # each seed's agent as its single-seed run initialises it
            torch.manual_seed(s)
            agents.append(Agent(D, n_actions, cfg.hidden, self.action_dim).to(device))
        stacked, _ = stack_module_state(agents)
        self.names = tuple(stacked)
        self.params = [stacked[nm].detach().clone() for nm in self.names]
        self.trained = tuple(nm for nm, p in agents[0].named_parameters() if p.requires_grad)
        self.train_params = [self.params[self.names.index(nm)] for nm in self.trained]
        self.exp_avg = [torch.zeros_like(p) for p in self.train_params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.train_params]
        self.steps = [torch.zeros((), device=device) for _ in self.train_params]
        self.lr = torch.zeros((), device=device)
        self.store = Storage.zeros(T, k * n, D, self.discrete, device, self.action_dim)
        self.next_obs = bufs.obs.clone()
        self.ts = list(torch.arange(T, dtype=torch.int64, device=device).reshape(T, 1))
        self.template = compile_template(Agent(D, n_actions, cfg.hidden, self.action_dim).to(device), device)
        self.eager_template = Agent(D, n_actions, cfg.hidden, self.action_dim).to(device)
        threads = torch.get_num_threads()
        next_step = env.autoreset == "next_step"
        shape = (task.env_id, spec.backend, k, n, T, cfg, str(device), threads)
        env_static = (env.spec, next_step, int(env.spec.max_episode_steps))
        self.collect_eager = functools.partial(_collect_step, self.eager_template, self.names, k, self.discrete,
                                               self.action_dim, *env_static)  # fmt: skip
        self.collect_key = ("collect", *shape)
        self.collect_graph = None
        if spec.compiled_act:
            from .collect import _CollectGraph

            if self.collect_key not in _COLLECT:
                _COLLECT[self.collect_key] = _CollectGraph(_own_code(
                    _collect_step, self.template, self.names, k, self.discrete, self.action_dim, *env_static,
                    name=f"pk_batch_collect_{env.spec.kernel_key}_{k}x{n}_{len(_COLLECT)}"), device, env.spec)  # fmt: skip
            self.collect_graph = _COLLECT[self.collect_key]
        self.update_key = ("update", *shape)
        if self.update_key not in _UPDATE:
            betas, eps = (0.9, 0.999), 1e-5  # ppo.make_optimizer's Adam
            fn = _own_code(_update_step, UpdateRule(_grad_fn(self.template, cfg), self.trained, cfg, betas, eps),
                           name=f"pk_batch_update_{k}_{len(_UPDATE)}")  # fmt: skip
            # As update.CompiledUpdate: CUDA graphs on a GPU, Inductor's C++ wrapper on a CPU.
            opts = dict(mode="reduce-overhead") if device.type == "cuda" else dict(options={"cpp_wrapper": True})
            _UPDATE[self.update_key] = torch.compile(fn, dynamic=False, **opts)
        self.update_fn = _UPDATE[self.update_key]
        self.episode_return = np.zeros(k * n)

    @property
    def collect_kind(self) -> str:
        g = self.collect_graph
        return "compiled" if g is not None and g.whole is not False else "eager"

    def sync(self) -> None:
        self.backend.synchronize()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def collect(self, timer: PhaseTimer) -> None:
        """One rollout for all K (phase "env"): acting, stepping and recording, one call per step."""
        bufs, st = self.env._bufs, self.store
        env_args = (bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs, bufs.reward,
                    bufs.terminated, bufs.truncated, self.env_params, self.row_seed, self.env_index, st.rewards,
                    st.terminated, st.truncated, st.final_obs)  # fmt: skip
        g = self.collect_graph
        stance = torch.compiler.set_stance(skip_guard_eval_unsafe=bool(self.collect_key in _WARM and g and g.whole))
        with timer("env"), torch.no_grad(), stance:
            bufs.obs.copy_(self.next_obs)
            for t in self.ts:
                args = (self.params, bufs.obs, st.obs, st.actions, st.logprobs, st.values, *env_args, t)
                if g is None or not g(*args):
                    self.collect_eager(*args)
            self.next_obs = bufs.obs.clone()
        _WARM.add(self.collect_key)

    def advantages(self, timer: PhaseTimer) -> tuple[torch.Tensor, torch.Tensor]:
        """Bootstrap values (phase "act": each seed's critic on its rows' final obs) and GAE (phase "adv")."""
        from torch.func import vmap

        from .. import buffer

        cfg, st, k = self.task.ppo, self.store, self.k
        T, D = cfg.num_steps, self.obs_dim
        with timer("act"), torch.no_grad():
            obs = st.final_obs.view(T, k, -1, D).transpose(0, 1).reshape(k, -1, D)  # [K, T*N, D]
            v = vmap(functools.partial(_value, self.eager_template, self.names))(self.params, obs)
            next_values = v.view(k, T, -1).transpose(0, 1).reshape(T, -1)
        with timer("adv"):
            return buffer.gae(st.rewards, st.values, next_values, st.terminated, st.truncated, gamma=cfg.gamma,
                              lam=cfg.gae_lambda, backend=self.backend)  # fmt: skip

    def per_seed(self, x: torch.Tensor) -> torch.Tensor:
        """A ``[T, K*N, ...]`` rollout tensor as ``[K, T*N, ...]``: seed k's rows in its single-seed flattening."""
        T, k = x.shape[0], self.k
        return x.view(T, k, -1, *x.shape[2:]).transpose(0, 1).reshape(k, -1, *x.shape[2:]).contiguous()

    def update(self, lr: float, advantages: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        """The PPO epochs for all K at ``lr``: per epoch each seed's own permutation, one compiled call per
        minibatch; the last minibatch's loss stats ``[K, 4]``."""
        cfg, st, k = self.task.ppo, self.store, self.k
        self.lr.fill_(lr)
        rollout = [self.per_seed(x) for x in (st.obs, st.actions, st.logprobs, st.values, advantages, returns)]
        batch = rollout[0].shape[1]
        mb = batch // cfg.num_minibatches
        stats = torch.full((k, 4), math.nan)
        for _ in range(cfg.update_epochs):
            # [minibatches, K, mb]: each seed's shuffled rows, every minibatch contiguous (one graph for all).
            perm = torch.argsort(torch.rand(k, batch, device=self.device), dim=1)
            perms = perm.view(k, cfg.num_minibatches, mb).transpose(0, 1).contiguous()
            for i in range(cfg.num_minibatches):
                stance = torch.compiler.set_stance(skip_guard_eval_unsafe=self.update_key in _WARM)
                with torch.no_grad(), stance:
                    stats = self.update_fn(self.train_params, self.exp_avg, self.exp_avg_sq, self.steps, self.lr,
                                           *rollout, perms[i])  # fmt: skip
                _WARM.add(self.update_key)
        return stats

    def finished(self, timer: PhaseTimer) -> list[list[float]]:
        """Per seed, the returns of the episodes its envs finished in this rollout, in the order
        :func:`ppo.finished_returns` lists them for a single seed (float64 running sums, as there)."""
        with timer("move"):
            rewards = self.store.rewards.to(torch.float64).cpu().numpy()
            done = (self.store.terminated | self.store.truncated).cpu().numpy()
        with timer("other"):
            n = self.task.ppo.num_envs
            out: list[list[float]] = [[] for _ in range(self.k)]
            ret = self.episode_return
            for t in range(rewards.shape[0]):
                ret += rewards[t]
                rows = np.flatnonzero(done[t])
                for i in rows:
                    out[i // n].append(float(ret[i]))
                ret[rows] = 0.0
            return out


def prime_parallel(task: TaskConfig, k: int, spec: Any, n_seeds: int | None = None) -> float:
    """Compile the K-seed collection step, GAE and minibatch step for ``spec`` (one throwaway update on throwaway
    seeds, PyTorch's generator state put back), so the timed batches start warm as single-seed runs do after
    prime(); seconds taken. ``n_seeds`` is accepted for the jax batch's signature (no refills here)."""
    _check(task, spec, k)
    t0 = time.perf_counter()
    torch.set_num_threads(task.ppo.torch_threads)
    rng = torch.get_rng_state()
    try:
        batch = _Batch(task, spec, list(range(10_000, 10_000 + k)))
        timer = PhaseTimer(batch.sync)
        batch.collect(timer)
        adv, ret = batch.advantages(timer)
        batch.update(task.ppo.lr, adv, ret)
        batch.sync()
    finally:
        torch.set_rng_state(rng)
    return time.perf_counter() - t0


def _check(task: TaskConfig, spec: Any, k: int) -> None:
    if getattr(spec, "mode", None) != "resident" or spec.backend not in ("torch", "torch_compile"):
        raise ValueError(f"spec: the torch K-seed batch runs the resident torch stacks (torch, torch_compile), not "
                         f"{getattr(spec, 'label', spec)!r}")  # fmt: skip
    if not spec.compiled_update:
        raise ValueError(f"--stack {spec.label}: K seeds at once always compile their update (one vmapped call per "
                         "minibatch); drop +eager-update")  # fmt: skip
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an integer >= 1, got {k!r}")
    if task.ppo.batch_size % task.ppo.num_minibatches:
        raise ValueError(f"task {task.env_id}: batch size does not split into {task.ppo.num_minibatches} minibatches")


def train_batch(task: TaskConfig, spec: Any, seeds: list[int],
                on_update: Callable[[int, int, float], None] | None = None,
                *, result_class: type, slots: int | None = None) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """Train the policies of ``seeds`` at once on ``spec``'s device: (one record per seed, the device's identity).
    ``slots`` must equal the number of seeds (the torch batch does not refill). See :data:`PARALLEL_NOTE` for
    what the records hold; ``result_class`` is the runner's RunResult."""
    from ..identity import Target, device_info, machine_label

    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds) or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds: expected distinct integer seeds, got {seeds!r}")
    k = len(seeds)
    if slots is not None and slots != k:
        raise ValueError(f"slots: the torch batch trains all its seeds at once (no --refill); expected {k}, got "
                         f"{slots!r}")  # fmt: skip
    _check(task, spec, k)
    cfg = task.ppo
    torch.set_num_threads(cfg.torch_threads)
    T, N = cfg.num_steps, cfg.num_envs
    batch = None
    timer = PhaseTimer(lambda: batch.sync() if batch is not None else None)
    t_start = time.perf_counter()
    with timer("setup"):
        batch = _Batch(task, spec, seeds)
        compile_before = _compile_seconds(batch.backend)
    b = batch.backend
    identity = device_info(b, Target(b.name, b.device_name), machine_label())
    recents = [deque(maxlen=cfg.solve_window) for _ in seeds]
    curves: list[list[list[Any]]] = [[] for _ in seeds]
    losses: list[tuple[float, ...]] = [(math.nan,) * 4 for _ in seeds]
    episodes, updates = [0] * k, [0] * k
    stop: dict[int, str] = {}
    done_at: dict[int, float] = {}
    update = 0
    for update in range(1, task.num_updates + 1):
        lr = cfg.lr * (1.0 - (update - 1.0) / task.num_updates) if cfg.anneal_lr else cfg.lr
        batch.collect(timer)
        adv, ret = batch.advantages(timer)
        with timer("update"):
            stats = batch.update(lr, adv, ret)
        finished = batch.finished(timer)
        with timer("other"):
            stats = stats.tolist()
            now = time.perf_counter() - t_start
            pending = []
            for i in range(k):
                if i in stop:  # frozen at the update it stopped at; its slot trains on with the others
                    continue
                updates[i], episodes[i] = update, episodes[i] + len(finished[i])
                recents[i].extend(finished[i])
                losses[i] = tuple(stats[i])
                end = record_update(task, curves[i], update, update * T * N, now, recents[i],
                                    window_mean(finished[i]), None)  # fmt: skip
                if end is None and update >= task.num_updates:
                    end = "step budget"
                if end is not None:
                    stop[i], done_at[i] = end, now
                else:
                    pending.append(window_mean(recents[i]))
            if on_update is not None:
                on_update(update * T * N * k, task.num_updates * T * N * k, min(pending) if pending else math.nan)
        if len(stop) == k:
            break
    wall = time.perf_counter() - t_start
    compile_s = _compile_seconds(b) - compile_before
    n_conv = sum(why == "converged" for why in stop.values())
    per_policy = round(wall / n_conv, 6) if n_conv else None
    phases = {kk: round(v, 6) for kk, v in timer.seconds.items()}
    steps = update * T * N
    results = []
    for i, seed in enumerate(seeds):
        conv = stop[i] == "converged"
        results.append(_batch_result_class(result_class)(
            task=task.env_id, stack=batch_label(spec.label, k), mode=spec.mode, backend=spec.backend,
            device_key=identity["device_key"], hardware_key=identity["hardware_key"], agent_device=str(batch.device),
            seed=seed, converged=conv, stop_reason=stop[i], env_steps=steps,
            steps_to_converge=updates[i] * T * N if conv else None, updates=updates[i], wall_s=round(wall, 6),
            device_hours=per_policy / 3600 if conv and per_policy else None, steps_per_s=steps / wall,
            final_return=window_mean(recents[i]), episodes=episodes[i], phases=phases,
            update_parts=dict.fromkeys(UPDATE_PARTS, 0.0), untimed_s=round(wall - sum(timer.seconds.values()), 6),
            compile_s=round(compile_s, 6), losses=dict(zip(("pg", "v", "entropy", "approx_kl"), losses[i])),
            losses_finite=all(math.isfinite(x) for x in losses[i]), curve=curves[i],
            device_seconds_per_policy=per_policy if conv else None, parallel_seeds=k, update="compiled",
            update_parts_note=COMPILED_PARTS_NOTE, collect=batch.collect_kind, batch_seeds=list(seeds),
            batch_updates=update, converged_at_s=round(done_at[i], 4) if conv else None, slot=i,
        ))  # fmt: skip
    return results, identity


def _compile_seconds(backend: Any) -> float:
    """Seconds the backend has spent compiling so far (the torch_compile backend counts its compiles)."""
    return float(sum(getattr(backend, "compile_seconds", {}).values()))


__all__ = ["PARALLEL_NOTE", "batch_label", "prime_parallel", "train_batch"]
