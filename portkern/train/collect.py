"""The torch stacks' compiled collection (:class:`CompiledCollect`): acting, env stepping and storage writes of
a few steps at a time as one ``torch.compile`` call, for :class:`portkern.train.stacks.TorchStack`; its pieces
(:func:`_act`, :func:`_step`, :class:`_CollectGraph`) also serve the batched ensemble's collection
(:mod:`portkern.train.torch_batch`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

from .. import envs
from ..backends._torch_ops import put_row, step_fn
from ..backends.torch_compile import _renamed
from .ppo import Agent, PhaseTimer, Storage, compile_template, most_dividing

if TYPE_CHECKING:
    from ..backends.torch import TorchBackend
    from ..step import VectorEnv


class TorchEnvStack(Protocol):
    """What :class:`CompiledCollect` reads of a torch stack (:class:`portkern.train.stacks.TorchStack`, which
    builds on this module, so it is named here by what it has rather than imported): its env and backend."""

    env: VectorEnv
    backend: TorchBackend


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
        if device.type == "cpu":  # Inductor's C++ wrapper, as update.CompiledUpdate's: no Python between kernels
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
    cap = STEPS_PER_CALL_CAP.get(spec.kernel, MAX_STEPS_PER_CALL)
    return most_dividing(num_steps, min(MAX_STEPS_PER_CALL, cap))


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

    def __init__(self, stack: TorchEnvStack, agent: Agent, store: Storage) -> None:
        env, b = stack.env, stack.backend
        spec, bufs = env.spec, env._bufs
        self.env, self.store, self.agent, self.bufs = env, store, agent, bufs
        names = tuple(n for n, _ in agent.named_parameters())
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

            def collect_step(params, obs, s_obs, s_actions, s_logprobs, s_values, *env_args):
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
        # compiled step at this size and are skipped, as update.CompiledUpdate skips its own: the key fixes every
        # shape, dtype and device, so one graph serves every call, and a call that would need another raises.
        g = self.graph
        stance = torch.compiler.set_stance(skip_guard_eval_unsafe=bool(self.key in _WARM_STEPS and g.whole))
        with timer("env"), torch.no_grad(), stance:
            b.obs.copy_(next_obs)  # the obs acted on first (in every run already the env's own)
            # The parameters' tensors as they are now: update.CompiledUpdate makes them views of one flat tensor.
            params = [p.detach() for p in self.agent.parameters()]
            for ts in self.ts:  # each call's k step indices
                if not g(params, b.obs, st.obs, st.actions, st.logprobs, st.values, *env_args, ts):
                    return None
            next_obs = b.obs.clone()
        _WARM_STEPS.add(self.key)
        return next_obs
