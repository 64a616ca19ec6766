"""Training stacks: the same PPO collecting its rollouts five ways.

* ``gymnasium`` -- Gymnasium's own ``SyncVectorEnv`` on the host (the off-device simulator a service might
  run); GAE as a PyTorch loop over t.
* ``<backend>`` -- a portkern backend, one kernel launch per step, the policy in PyTorch on the host: obs come
  up and actions go down every step (``numpy``, ``opencl``, ``cupy``, ``numba``).
* ``<backend>+fused`` -- the policy's current weights copied into the in-kernel MLP once per update, the whole
  rollout collected in one launch, log-probs and values recomputed in PyTorch from the stored obs and actions.
* ``torch`` / ``torch_compile`` -- the torch backends: env, agent and storage on one torch device, zero-copy.
  Each step's acting (the agent's forward and sample, log-prob, value), env step (the torch backends' own
  physics and autoreset) and storage writes run in one ``torch.compile`` call with the next few steps'
  (:class:`CompiledCollect`; timed as phase "env"; every env's step compiles to one graph, Acrobot-v1's
  angle-wrap loop as torch's ``while_loop``; a step that did not would collect eagerly); the suffix
  ``+eager-act`` (``torch+eager-act``) keeps the eager loop, one op at a time through :meth:`VectorEnv.step`,
  so a report shows what compiling the acting buys. Its label says
  ``+eager-act``; the compiled one's label is the plain name, and each run's ``collect`` says which ran.
  Compiled, the two stacks step through one graph (the ops both backends share) and differ only in their GAE;
  ``+eager-act`` keeps each backend's own stepping (eager ops, or torch_compile's compiled step and reset).
* ``jax`` -- PPO itself in JAX (:mod:`portkern.train.jax_ppo`): rollout scan, GAE scan and every epoch and
  minibatch each one compiled program, PureJaxRL's design, on the jax backend's physics.

A stack spec is ``NAME[@DEVICE]``: ``opencl@intel``, ``opencl+fused@pocl``, ``torch@cuda``. Every stack with
the PyTorch agent (all but ``jax``) runs its PPO minibatches compiled (:class:`ppo.CompiledUpdate`: gather,
advantage normalisation, loss, gradient, clip and Adam; up to four minibatches to a ``torch.compile`` call while
their rows stay within 2,048); the suffix ``+eager-update`` (``torch+eager-update``,
``opencl+fused+eager-update@pocl``) keeps CleanRL's eager update instead, so a report shows what compiling the
update buys. ``+compiled-update`` names the default explicitly (older commands used it).

The stack names in a training file say which update ran: a compiled update's stack is labelled
``NAME+compiled-update[@DEVICE]``, an eager one's ``NAME[@DEVICE]``, as in every file written while the eager
update was the default (so those files' stacks and the new eager ones stay one stack in a report).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import torch

from .. import buffer, envs, step
from ..backends import Backend, get_backend
from ..backends._torch_ops import put_row, step_fn
from ..backends.torch_compile import _renamed
from ..identity import Target, device_info, machine_label
from .config import TaskConfig
from .ppo import Agent, PhaseTimer, compile_template, torch_gae

TORCH_BACKENDS = ("torch", "torch_compile")
#: Stack-name suffixes: the PPO update compiled (the default of every torch-agent stack), or eager.
COMPILED_UPDATE = "+compiled-update"
EAGER_UPDATE = "+eager-update"
#: Stack-name suffixes of the torch stacks' acting and env stepping: compiled (the default), or eager.
COMPILED_ACT = "+compiled-act"
EAGER_ACT = "+eager-act"


@dataclasses.dataclass(frozen=True)
class StackSpec:
    name: str  # without the update suffix and the device: "gymnasium", "opencl", "opencl+fused", "torch"
    backend: str | None  # None for gymnasium
    mode: str  # "host-sim", "step", "fused", "resident"
    device: str | None = None
    compiled_update: bool = False  # the PPO update compiled, a call per minibatch or per few (ppo.CompiledUpdate)
    compiled_act: bool = False  # torch stacks: acting and env stepping compiled (CompiledCollect)

    @property
    def label(self) -> str:
        """The stack's name in training files: ``+compiled-update`` where the update was compiled, ``+eager-act``
        where a torch stack acted and stepped eagerly."""
        act = EAGER_ACT if self.backend in TORCH_BACKENDS and not self.compiled_act else ""
        update = COMPILED_UPDATE if self.compiled_update else ""
        return self.name + act + update + (f"@{self.device}" if self.device else "")


def parse_stack(text: str) -> StackSpec:
    """``NAME[@DEVICE]``; NAME is ``gymnasium``, a backend, or ``<backend>+fused``, each a torch-agent stack
    optionally ending in ``+eager-update`` (or ``+compiled-update``, the default said explicitly)."""
    from ..backends import registry

    raw = text.strip()
    name, _, device = raw.partition("@")
    name, device = name.strip(), device.strip() or None
    for suffix in (COMPILED_ACT, EAGER_ACT):
        if name.endswith(suffix):
            core = name[: -len(suffix)]
            spec = parse_stack(core + (f"@{device}" if device else "")) if core else None
            if spec is None or spec.backend not in TORCH_BACKENDS:
                raise ValueError(f"--stack {raw!r}: {suffix} applies to the torch and torch_compile stacks (whose "
                                 f"acting and env stepping compile), not {core!r}")  # fmt: skip
            return dataclasses.replace(spec, compiled_act=suffix == COMPILED_ACT)
    for suffix in (COMPILED_UPDATE, EAGER_UPDATE):
        if name.endswith(suffix):
            core = name[: -len(suffix)]
            if core == "jax" or not core:
                raise ValueError(f"--stack {raw!r}: {suffix} applies to the torch-agent stacks, not {core!r} (the jax "
                                 f"stack compiles its whole update already)")  # fmt: skip
            spec = parse_stack(core + (f"@{device}" if device else ""))
            return dataclasses.replace(spec, compiled_update=suffix == COMPILED_UPDATE)
    known = [n for n in registry.names() if n != "cuda_host"]
    valid = (f"gymnasium, {', '.join(known)}, or <backend>+fused (e.g. opencl+fused), each optionally "
             f"+eager-update and @DEVICE")
    if name == "gymnasium":
        if device:
            raise ValueError(f"--stack {raw!r}: gymnasium runs on the host CPU; it takes no @DEVICE")
        return StackSpec(name, None, "host-sim", compiled_update=True)
    base, plus, suffix = name.partition("+")
    if plus and suffix != "fused":
        raise ValueError(f"--stack {raw!r}: unknown mode {suffix!r}; expected {valid}")
    if base not in known:
        raise ValueError(f"--stack {raw!r}: unknown backend {base!r}; expected {valid}")
    if base == "jax":
        if plus:
            raise ValueError(f"--stack {raw!r}: the jax stack compiles the whole rollout already; use 'jax'")
        return StackSpec(name, base, "resident", device)  # PPO itself in jax: portkern.train.jax_ppo
    if base in TORCH_BACKENDS:
        if plus:
            raise ValueError(f"--stack {raw!r}: the torch backends have no fused kernels (they are the framework "
                             f"stack); use {base!r}")  # fmt: skip
        return StackSpec(name, base, "resident", device, compiled_update=True, compiled_act=True)
    return StackSpec(name, base, "fused" if plus else "step", device, compiled_update=True)


@dataclasses.dataclass
class Storage:
    """One rollout on the agent's device, time-major [T, N, ...]."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor

    @classmethod
    def zeros(cls, T: int, N: int, D: int, discrete: bool, device: torch.device, action_dim: int = 1) -> Storage:
        f = dict(device=device)
        a_shape = (T, N) if action_dim == 1 else (T, N, action_dim)  # a Box of several components: [T, N, A]
        return cls(
            obs=torch.zeros((T, N, D), **f), actions=torch.zeros(a_shape, dtype=torch.long if discrete else torch.float32, **f),
            logprobs=torch.zeros((T, N), **f), values=torch.zeros((T, N), **f), rewards=torch.zeros((T, N), **f),
            terminated=torch.zeros((T, N), dtype=torch.bool, **f), truncated=torch.zeros((T, N), dtype=torch.bool, **f),
            final_obs=torch.zeros((T, N, D), **f),
        )  # fmt: skip


class Stack:
    """Builds its env in ``setup``; ``collect`` fills a Storage with one rollout; ``advantages`` runs GAE."""

    def __init__(self, spec: StackSpec, task: TaskConfig, seed: int) -> None:
        self.spec, self.task, self.seed = spec, task, seed
        self.env_spec = envs.get(task.env_id)
        self.discrete = self.env_spec.is_discrete
        self.n_actions = self.env_spec.discrete_actions if self.discrete else None
        self.obs_dim = self.env_spec.obs_dim
        self.action_dim = self.env_spec.action_dim
        self.agent_device = torch.device("cpu")
        self.backend: Backend | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    def setup(self) -> torch.Tensor:
        """Build and reset the env; the first obs (a tensor on the agent's device)."""
        raise NotImplementedError

    def warm_up(self, agent: Agent) -> None:
        """Run every kernel the stack will launch once, on a throwaway env of the same shape, so that compiling
        (OpenCL/NVRTC builds, torch.compile) happens in setup rather than inside the first timed phase."""
        b = self.backend
        if b is None:  # Gymnasium: nothing to compile
            return
        cfg = self.task.ppo
        env = step.make(self.task.env_id, cfg.num_envs, backend=b, seed=self.seed)
        env.reset()
        if self.spec.mode == "fused":
            env.rollout(1, agent.in_kernel_policy(), path="fused")
        elif not self.spec.compiled_act:  # a compiled collection steps in its own graph (TorchStack.warm_up)
            env.step(np.zeros(cfg.num_envs if self.action_dim == 1 else (cfg.num_envs, self.action_dim),
                             np.int32 if self.discrete else np.float32))  # fmt: skip
        z, f = np.zeros((cfg.num_steps, cfg.num_envs), np.float32), np.zeros((cfg.num_steps, cfg.num_envs), np.bool_)
        buffer.gae(*(b.from_host(a) for a in (z, z, z, f, f)), gamma=cfg.gamma, lam=cfg.gae_lambda, backend=b)
        self.sync()

    def sync(self) -> None:
        """Wait for the stack's device work (the env's backend and the agent's torch device)."""
        if self.backend is not None:
            self.backend.synchronize()
        if self.agent_device.type == "cuda":
            torch.cuda.synchronize(self.agent_device)

    def close(self) -> None:
        pass

    def collect(self, agent: Agent, store: Storage, timer: PhaseTimer, next_obs: torch.Tensor) -> torch.Tensor:
        """Fill ``store`` with T steps from ``next_obs``; the obs after the last step."""
        raise NotImplementedError

    def advantages(self, store: Storage, next_values: torch.Tensor, timer: PhaseTimer) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE with portkern.buffer.gae on the env's backend (inputs moved there and back as data movement)."""
        b = self.backend
        assert b is not None
        with timer("move"):
            ins = [b.from_host(t.numpy()) for t in (store.rewards, store.values, next_values, store.terminated,
                                                    store.truncated)]  # fmt: skip
        with timer("adv"):
            adv, ret = buffer.gae(*ins, gamma=self.task.ppo.gamma, lam=self.task.ppo.gae_lambda, backend=b)
        with timer("move"):
            return torch.from_numpy(b.to_host(adv)), torch.from_numpy(b.to_host(ret))

    def identity(self) -> dict[str, Any]:
        """The device the env runs on, as bench runs name it (device_key, hardware_key, label, kind...)."""
        b = self.backend if self.backend is not None else get_backend("numpy")
        info = device_info(b, Target(b.name, b.device_name), machine_label())
        if self.spec.mode == "host-sim":
            info = {**info, "backend": "gymnasium", "stack_class": "host simulator"}
        return info

    def make_env(self) -> Any:
        """Build the portkern env of the stack's backend and device (``self.env``, ``self.backend``) and reset
        it; its first obs, on the backend."""
        self.env = step.make(self.task.env_id, self.task.ppo.num_envs, backend=self.spec.backend,
                             device=self.spec.device, seed=self.seed)  # fmt: skip
        self.backend = self.env.backend
        return self.env.reset()

    def act(self, agent: Agent, store: Storage, t: int, timer: PhaseTimer) -> torch.Tensor:
        """Step ``t``'s actions sampled from ``store.obs[t]`` (phase ``act``), recorded in ``store`` with their
        log-probs and values, as every stepped collection loop does."""
        with timer("act"), torch.no_grad():
            action, logprob, _, value = agent.act(store.obs[t])
            store.actions[t], store.logprobs[t], store.values[t] = action, logprob, value
        return action

    def actions_for_env(self, action: torch.Tensor) -> np.ndarray:
        a = action.numpy()
        return a.astype(np.int32) if self.discrete else a.astype(np.float32)


class GymnasiumStack(Stack):
    """Gymnasium's SyncVectorEnv (same-step autoreset, as portkern's default), obs and actions as NumPy."""

    def __init__(self, spec: StackSpec, task: TaskConfig, seed: int) -> None:
        super().__init__(spec, task, seed)
        try:  # imported here, not in setup: a one-off cost of the process, not of a policy
            import gymnasium as gym
            from gymnasium.vector import AutoresetMode
        except ImportError as exc:
            raise RuntimeError("--stack gymnasium: needs Gymnasium >= 1.1: pip install 'portkern[train]'") from exc
        self._gym, self._mode = gym, AutoresetMode

    def setup(self) -> torch.Tensor:
        gym, AutoresetMode = self._gym, self._mode
        self.envs = gym.make_vec(self.task.env_id, num_envs=self.task.ppo.num_envs, vectorization_mode="sync",
                                 vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})  # fmt: skip
        obs, _ = self.envs.reset(seed=self.seed)
        return torch.as_tensor(np.asarray(obs, np.float32))

    def close(self) -> None:
        if hasattr(self, "envs"):
            self.envs.close()

    def collect(self, agent: Agent, store: Storage, timer: PhaseTimer, next_obs: torch.Tensor) -> torch.Tensor:
        for t in range(store.obs.shape[0]):
            with timer("move"):
                store.obs[t] = next_obs
            action = self.act(agent, store, t, timer)
            with timer("move"):
                host_actions = action.numpy() if self.discrete else action.numpy().reshape(len(action), -1)
            with timer("env"):
                obs, reward, terminated, truncated, info = self.envs.step(host_actions)
            with timer("move"):
                next_obs = torch.from_numpy(np.asarray(obs, np.float32))
                store.rewards[t] = torch.from_numpy(np.asarray(reward, np.float32))
                store.terminated[t] = torch.from_numpy(np.asarray(terminated))
                store.truncated[t] = torch.from_numpy(np.asarray(truncated))
                final = np.asarray(obs, np.float32).copy()
                if "_final_obs" in info:
                    for i in np.flatnonzero(info["_final_obs"]):
                        final[i] = info["final_obs"][i]
                store.final_obs[t] = torch.from_numpy(final)
        return next_obs

    def advantages(self, store: Storage, next_values: torch.Tensor, timer: PhaseTimer) -> tuple[torch.Tensor, torch.Tensor]:
        with timer("adv"):
            return torch_gae(store.rewards, store.values, next_values, store.terminated, store.truncated,
                             self.task.ppo.gamma, self.task.ppo.gae_lambda)  # fmt: skip


class PortkernStack(Stack):
    """A portkern VectorEnv on a non-torch backend, stepped once per step (mode 'step') or one fused
    rollout per update (mode 'fused'); the agent and the storage are PyTorch on the host."""

    def setup(self) -> torch.Tensor:
        obs = self.make_env()
        if self.spec.mode == "fused":
            self.rollout_buf = self.env.rollout_buffer(self.task.ppo.num_steps)
        self.sync()
        return torch.from_numpy(self.backend.to_host(obs).astype(np.float32, copy=True))

    def collect(self, agent: Agent, store: Storage, timer: PhaseTimer, next_obs: torch.Tensor) -> torch.Tensor:
        if self.spec.mode == "fused":
            return self._collect_fused(agent, store, timer)
        env, b = self.env, self.backend
        obs_np, final_np = store.obs.numpy(), store.final_obs.numpy()
        rewards_np, term_np, trunc_np = store.rewards.numpy(), store.terminated.numpy(), store.truncated.numpy()
        with timer("move"):
            store.obs[0] = next_obs
        for t in range(store.obs.shape[0]):
            action = self.act(agent, store, t, timer)
            with timer("move"):
                host_actions = self.actions_for_env(action)
            with timer("env"):
                obs, reward, terminated, truncated = env.step(host_actions)
            with timer("move"):
                rewards_np[t] = b.to_host(reward)
                term_np[t] = b.to_host(terminated)
                trunc_np[t] = b.to_host(truncated)
                # same_step autoreset: final_obs is every env's post-step obs (pre-reset where it finished).
                final_np[t] = b.to_host(env.final_obs)
                if t + 1 < store.obs.shape[0]:
                    obs_np[t + 1] = b.to_host(obs)
                else:
                    next_obs = torch.from_numpy(b.to_host(obs).astype(np.float32, copy=True))
        return next_obs

    def _collect_fused(self, agent: Agent, store: Storage, timer: PhaseTimer) -> torch.Tensor:
        env, b, buf = self.env, self.backend, self.rollout_buf
        with timer("move"):
            env.load_policy(agent.in_kernel_policy())  # this update's weights, uploaded once
        with timer("env"):
            env.rollout(store.obs.shape[0], env.loaded_policy, buf, path="fused")
        with timer("move"):
            store.obs.numpy()[:] = b.to_host(buf.obs)
            store.actions.numpy()[:] = b.to_host(buf.actions)
            store.rewards.numpy()[:] = b.to_host(buf.rewards)
            store.terminated.numpy()[:] = b.to_host(buf.terminated)
            store.truncated.numpy()[:] = b.to_host(buf.truncated)
            store.final_obs.numpy()[:] = b.to_host(buf.final_obs)
            next_obs = torch.from_numpy(b.to_host(env.obs).astype(np.float32, copy=True))
        with timer("act"), torch.no_grad():
            # The kernel sampled the actions with these weights; PPO needs their log-probs and values.
            flat_obs = store.obs.reshape(-1, self.obs_dim)
            _, logprob, _, value = agent.act(flat_obs, store.actions.flatten(0, 1))
            store.logprobs.copy_(logprob.reshape(store.logprobs.shape))
            store.values.copy_(value.reshape(store.values.shape))
        return next_obs


#: (what fixes a compiled collection step's graph) -> that step compiled; one per process, like ppo's updates.
_COLLECT_STEPS: dict = {}
#: The keys of _COLLECT_STEPS whose graph has been compiled (a whole rollout collected once).
_WARM_STEPS: set = set()


def _act(template: Agent, names: tuple[str, ...], discrete: bool, params: list[torch.Tensor], obs: torch.Tensor,
         s_obs: torch.Tensor, s_actions: torch.Tensor, s_logprobs: torch.Tensor, s_values: torch.Tensor,
         t: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Step ``t``'s acting as :meth:`Stack.act` does it: the obs recorded, the action sampled by the agent's own
    :meth:`Agent.act` (``functional_call`` swaps ``params`` into ``template``), its log-prob and value recorded;
    the action as the env takes it."""
    from torch.func import functional_call

    put_row(s_obs, t, obs)
    action, logprob, _, value = functional_call(template, dict(zip(names, params)), (obs,))
    put_row(s_actions, t, action)
    put_row(s_logprobs, t, logprob)
    put_row(s_values, t, value)
    return action.to(torch.int32) if discrete else action


def _step(spec: Any, next_step: bool, max_steps: int, actions: torch.Tensor, state: torch.Tensor,
          steps: torch.Tensor, episodes: torch.Tensor, needs_reset: torch.Tensor, obs: torch.Tensor,
          final_obs: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
          env_params: torch.Tensor, seed: torch.Tensor, env_index: torch.Tensor, s_rewards: torch.Tensor,
          s_terminated: torch.Tensor, s_truncated: torch.Tensor, s_final_obs: torch.Tensor,
          t: torch.Tensor) -> None:  # fmt: skip
    """One env step as the torch backends take it (``_torch_ops.env_step``: the reference physics through the
    torch namespace, same-step or next-step autoreset), its outcome recorded at ``t``. The autoreset runs the
    reset draws for every env and keeps the finished ones' (``torch.where``) instead of the backends' ``nonzero``
    and indexed writes: Philox is counter-based (seed, env, episode), so each finished env gets the very draw
    ``_torch_ops.autoreset`` gives it, and the step needs no host synchronisation and no data-dependent shape."""
    from ..backends import _torch_ops as ops
    from ..envs.base import ParamView

    p = ParamView(spec.field_names, env_params)
    finished = ops.env_step(spec, state, steps, needs_reset, actions, obs, final_obs, reward, terminated,
                            truncated, p, max_steps, next_step)  # fmt: skip
    ep = episodes.view(torch.int32)  # uint32 has no tensor arithmetic: its bits through int32, as autoreset does
    bumped = (ep.to(torch.int64) + 1) & ops.MASK32
    fresh = ops.reset_states(spec, p, seed, env_index, bumped, state.dtype)
    ep.copy_(torch.where(finished, torch.where(bumped >= 2**31, bumped - 2**32, bumped).to(torch.int32), ep))
    state.copy_(torch.where(finished, torch.stack(fresh), state))
    steps.copy_(torch.where(finished, torch.zeros_like(steps), steps))
    o = torch.where(finished[:, None], spec.observe(fresh), obs)
    obs.copy_(o)
    if next_step:
        final_obs.copy_(o)
    for dst, src in ((s_rewards, reward), (s_terminated, terminated), (s_truncated, truncated),
                     (s_final_obs, final_obs)):  # fmt: skip
        put_row(dst, t, src)


class _CollectGraph:
    """A compiled collection step, compiled whole (``fullgraph``). Where Dynamo cannot take the step as one graph
    (a host read inside it, as Acrobot's angle wrap had before it ran as torch's ``while_loop``) it raises while
    tracing, before anything ran; ``whole`` is then False and the stack collects eagerly: a step broken into
    pieces pays every piece's guards and the host reads between them, no cheaper than the eager ops (measured on
    Acrobot-v1), and its later pieces depend on the data, so no warm-up could compile them all."""

    def __init__(self, step: Callable[..., None], device: torch.device, spec: envs.EnvSpec | None = None) -> None:
        # The env's step as torch runs it (its helpers swapped in) is a function made on first use and cached:
        # made here, since Dynamo cannot trace making a function.
        if spec is not None:
            step_fn(spec)
        options = {"fallback_random": True}
        if device.type == "cpu":  # Inductor's C++ wrapper, as ppo.CompiledUpdate's: no Python between kernels
            options["cpp_wrapper"] = True
        self.fn = torch.compile(step, dynamic=False, fullgraph=True, options=options)
        self.whole: bool | None = None  # known after the first call

    def __call__(self, *args: torch.Tensor) -> bool:
        """One step; False (nothing ran) where the step does not compile to one graph."""
        if self.whole is None:
            try:
                self.fn(*args)
            except torch._dynamo.exc.Unsupported:
                self.whole = False
                return False
            self.whole = True
            return True
        if not self.whole:
            return False
        self.fn(*args)
        return True


#: The most env steps one compiled collection call runs (its cold compile grows with them).
MAX_STEPS_PER_CALL = 4
#: Envs (``EnvSpec.kernel``) whose compiled collection runs fewer steps a call, and why. Acrobot-v1, one: with its
#: angle wrap's ``while_loop``s from more than one step in a graph, Inductor's CPU code on torch 2.13 went wrong.
#: At 4 steps a call it recorded the value of each call's first step in its fourth step's row (every other output
#: right; tests/test_train_compiled_collect.py fails); at 2 a fresh rollout matched the eager loop's, but training
#: runs ended episodes after 8-20 steps (returns of -8 to -14, where about -60 is the best an episode can do;
#: bench/results/collect-steps-per-call-xeon/). Chain-v0, one: its articulated-body step is a large graph whose
#: cold compile is already minutes; unrolled it would be several times that.
STEPS_PER_CALL_CAP = {"acrobot": 1, "chain": 1}


def steps_per_call(spec: envs.EnvSpec, num_steps: int) -> int:
    """Env steps per compiled collection call: the most (at most :data:`MAX_STEPS_PER_CALL`, or the env's
    :data:`STEPS_PER_CALL_CAP`) dividing the rollout's ``num_steps``. A call has a fixed cost (~30 us of Dynamo's
    frame and cache lookup and AOTAutograd's wrapper on the 2-core development VM) and fixed costs per kernel that
    a 32-env step's arithmetic does not dwarf: CartPole-v1's 64-step rollout of 32 envs took 7.0 ms at one step a
    call, 4.5 ms at two, 3.5 ms at four."""
    cap = min(MAX_STEPS_PER_CALL, STEPS_PER_CALL_CAP.get(spec.kernel, MAX_STEPS_PER_CALL))
    return max(k for k in range(1, cap + 1) if num_steps % k == 0)


class CompiledCollect:
    """A torch stack's acting and env stepping as ``torch.compile``d calls of :attr:`k` steps each
    (:func:`steps_per_call`; each step :func:`_act` then :func:`_step`, on the obs the one before left) instead of
    some sixty eager ops a step, each paying Python and dispatcher overhead at 32 envs. Acting and stepping in one
    call, not one each: the second call cost a quarter more per rollout on the 2-core development VM. So the whole
    step is the phase "env", as a fused stack's in-kernel acting is.

    Sampling stays the agent's own (``Categorical`` / ``Normal`` of :meth:`Agent.act`) on PyTorch's global
    generator: the step is compiled with Inductor's ``fallback_random``, so its random ops are ATen's, drawing
    the same numbers in the same order as the eager collection. Compiled once per process and shape around a
    template agent (the parameters, env buffers and storage are arguments), and reused by every run.
    """

    def __init__(self, stack: TorchStack, agent: Agent, store: Storage) -> None:
        env, b = stack.env, stack.backend
        spec, bufs = env.spec, env._bufs
        self.env, self.store, self.agent, self.bufs = env, store, agent, bufs
        names = tuple(n for n, _ in agent.named_parameters())
        self.params = [p.detach() for p in agent.parameters()]
        self.env_params = b._params_view(spec, env._param_vector)._values
        self.seed = torch.tensor(env.seed, dtype=torch.int64, device=b.device)  # a tensor: no recompile per seed
        self.env_index = torch.arange(env.num_envs, dtype=torch.int64, device=b.device)
        T = store.obs.shape[0]
        #: Steps per compiled call (:func:`steps_per_call`), and each call's step indices as data.
        self.k = k = steps_per_call(spec, T)
        self.ts = list(torch.arange(T, dtype=torch.int64, device=b.device).reshape(T // k, k, 1))
        next_step, max_steps, discrete = env.autoreset == "next_step", int(spec.max_episode_steps), agent.discrete
        a = agent.actor
        # Everything Dynamo guards on that can change between runs, the thread count included (part of its
        # global state guard: a run capped at other threads than the prime's needs its own graph).
        self.key = (spec.id, spec.kernel_key, env.num_envs, T, a[0].in_features, a[0].out_features,
                    a[-1].out_features, discrete, next_step, max_steps, str(b.device), str(bufs.state.dtype),
                    torch.get_num_threads(), k)  # fmt: skip
        if self.key not in _COLLECT_STEPS:
            template = compile_template(Agent(a[0].in_features, a[-1].out_features if discrete else None,
                                              a[0].out_features, action_dim=agent.action_dim).to(b.device),
                                        b.device)  # fmt: skip

            def collect_step(params, obs, s_obs, s_actions, s_logprobs, s_values, *env_args):  # noqa: ANN001, ANN202
                *env_bufs, ts = env_args
                for i in range(k):  # k steps one after the other, each acting on the obs the one before left
                    t = ts[i]
                    actions = _act(template, names, discrete, params, obs, s_obs, s_actions, s_logprobs, s_values,
                                   t)  # fmt: skip
                    _step(spec, next_step, max_steps, actions, *env_bufs, t)

            # A code object of its own per key (Dynamo's cache and recompile limit are per code object: one shared
            # by every env and shape would fall back to eager after eight), named for profiles.
            name = f"pk_collect_{spec.kernel_key}_{env.num_envs}x{T}_k{k}_{len(_COLLECT_STEPS)}"
            _COLLECT_STEPS[self.key] = _CollectGraph(_renamed(collect_step, name), b.device, spec)
        self.graph: _CollectGraph = _COLLECT_STEPS[self.key]

    def collect(self, timer: PhaseTimer, next_obs: torch.Tensor) -> torch.Tensor | None:
        """Fill the storage with one rollout from ``next_obs`` (phase "env"); the obs after the last step, or None
        (nothing stepped) where the step does not compile to one graph."""
        b, st = self.bufs, self.store
        env_args = (b.state, b.steps, b.episodes, b.needs_reset, b.obs, b.final_obs, b.reward, b.terminated,
                    b.truncated, self.env_params, self.seed, self.env_index, st.rewards, st.terminated, st.truncated,
                    st.final_obs)  # fmt: skip
        # Once compiled, Dynamo's guards (on the template agent's modules and some 30 tensors) cost as much as the
        # compiled step at this size and are skipped, as ppo.CompiledUpdate skips its own: the key fixes every
        # shape, dtype and device, so one graph serves every call, and a call that would need another raises.
        g = self.graph
        stance = torch.compiler.set_stance(skip_guard_eval_unsafe=bool(self.key in _WARM_STEPS and g.whole))
        with timer("env"), torch.no_grad(), stance:
            b.obs.copy_(next_obs)  # the obs acted on first (in every run already the env's own)
            for ts in self.ts:  # each call's k step indices
                if not g(self.params, b.obs, st.obs, st.actions, st.logprobs, st.values, *env_args, ts):
                    return None
            next_obs = b.obs.clone()
        _WARM_STEPS.add(self.key)
        return next_obs


class TorchStack(Stack):
    """The torch backends: env state, agent, storage and GAE on one torch device; nothing crosses libraries."""

    def setup(self) -> torch.Tensor:
        obs = self.make_env()
        self.agent_device = obs.device
        self.sync()
        return obs.clone()

    def collect(self, agent: Agent, store: Storage, timer: PhaseTimer, next_obs: torch.Tensor) -> torch.Tensor:
        if self.spec.compiled_act:
            out = self._compiled_collect(agent, store).collect(timer, next_obs)
            if out is not None:
                return out
        env = self.env
        store.obs[0] = next_obs
        for t in range(store.obs.shape[0]):
            # Same-device tensor copies into the storage (the env reuses its buffers) belong to acting and
            # stepping: nothing here moves between devices or libraries.
            action = self.act(agent, store, t, timer)
            with timer("env"):
                obs, reward, terminated, truncated = env.step(action.to(torch.int32) if self.discrete else action)
                store.rewards[t], store.terminated[t], store.truncated[t] = reward, terminated, truncated
                store.final_obs[t] = env.final_obs
                if t + 1 < store.obs.shape[0]:
                    store.obs[t + 1] = obs
                else:
                    next_obs = obs.clone()
        return next_obs

    @property
    def collect_kind(self) -> str:
        """How this stack collects: "compiled", or "eager" (``+eager-act``, or an env step that does not compile
        to one graph: known once the stack has warmed up)."""
        cc = getattr(self, "_cc", None)
        return "compiled" if self.spec.compiled_act and (cc is None or cc.graph.whole is not False) else "eager"

    def _compiled_collect(self, agent: Agent, store: Storage) -> CompiledCollect:
        """The compiled collection for this agent and storage (the runner keeps both for the whole run)."""
        cc = getattr(self, "_cc", None)
        if cc is None or cc.store is not store or cc.agent is not agent:
            cc = self._cc = CompiledCollect(self, agent, store)
        return cc

    def warm_up(self, agent: Agent) -> None:
        super().warm_up(agent)
        if not self.spec.compiled_act:
            return
        # Compile the collection step now, on a throwaway env, agent and storage of the run's shapes, with the
        # global generator's state put back: the run's draws are the same whether or not this compiled.
        cfg = self.task.ppo
        throwaway = type(self)(self.spec, self.task, self.seed)
        obs = throwaway.make_env()
        store = Storage.zeros(cfg.num_steps, cfg.num_envs, self.obs_dim, self.discrete, self.agent_device,
                              self.action_dim)  # fmt: skip
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.agent_device) if self.agent_device.type == "cuda" else None
        try:
            copy = Agent(self.obs_dim, self.n_actions, cfg.hidden, self.action_dim).to(self.agent_device)
            copy.load_state_dict(agent.state_dict())
            throwaway._compiled_collect(copy, store).collect(PhaseTimer(), obs)
        finally:
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.agent_device)
        self.sync()

    def advantages(self, store: Storage, next_values: torch.Tensor, timer: PhaseTimer) -> tuple[torch.Tensor, torch.Tensor]:
        with timer("adv"):
            return buffer.gae(store.rewards, store.values, next_values, store.terminated, store.truncated,
                              gamma=self.task.ppo.gamma, lam=self.task.ppo.gae_lambda, backend=self.backend)  # fmt: skip


class JaxStack(Stack):
    """The ``jax`` stack's place in :func:`build`: its runs are :func:`portkern.train.jax_ppo.train_one` (the
    whole PPO in compiled JAX, no torch agent); here only what :func:`runner.prime` needs, the compile."""

    def setup(self) -> torch.Tensor:
        from . import jax_ppo

        jax_ppo.compile_all(jax_ppo.Static.of(self.task), self.seed)
        return torch.zeros((self.task.ppo.num_envs, self.obs_dim))

    def warm_up(self, agent: Agent) -> None:
        pass  # setup compiled every stage


def build(spec: StackSpec, task: TaskConfig, seed: int) -> Stack:
    if spec.backend == "jax":
        return JaxStack(spec, task, seed)
    if spec.mode == "host-sim":
        return GymnasiumStack(spec, task, seed)
    if spec.mode == "resident":
        return TorchStack(spec, task, seed)
    return PortkernStack(spec, task, seed)
