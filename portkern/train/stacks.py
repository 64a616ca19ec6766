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
the PyTorch agent (all but ``jax``) runs its PPO minibatches compiled (:class:`update.CompiledUpdate`: gather,
advantage normalisation, loss, gradient, clip and Adam; on a CPU the whole update one ``torch.compile`` call, its
minibatches a compiled loop; on CUDA up to four unrolled to a call while their rows stay within 2,048); the suffix ``+eager-update`` (``torch+eager-update``,
``opencl+fused+eager-update@pocl``) keeps CleanRL's eager update instead, so a report shows what compiling the
update buys. ``+compiled-update`` names the default explicitly (older commands used it).

The stack names in a training file say which update ran: a compiled update's stack is labelled
``NAME+compiled-update[@DEVICE]``, an eager one's ``NAME[@DEVICE]``, as in every file written while the eager
update was the default (so those files' stacks and the new eager ones stay one stack in a report).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from .. import buffer, envs, step
from ..backends import Backend, get_backend
from ..identity import Target, device_info, machine_label
from .collect import CompiledCollect
from .config import TaskConfig
from .ppo import Agent, PhaseTimer, Storage, torch_gae

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
    compiled_update: bool = False  # the PPO update compiled (update.CompiledUpdate): one call (CPU) or a few per epoch
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
