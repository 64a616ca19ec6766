"""The measurement instrument: CleanRL's PPO (PyTorch), its agent and rollout storage, and a phase timer with
device synchronisation."""

from __future__ import annotations

import dataclasses
import math
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Independent, Normal

from ..policy import MLPPolicy
from .config import PPOConfig, TaskConfig

#: Phases of one training run, in the order a training step passes them. Every one is timed on its own
#: (each ends with a device synchronise), so their sum is the wall time up to the untimed gaps between them.
PHASES = {
    "setup": "setup (env build, kernel compile, model init, reset)",
    "act": "acting (policy/value forward, incl. bootstrap values and fused stacks' recomputed log-probs)",
    "env": "environment stepping (fused stacks: stepping and in-kernel acting, one launch per rollout; torch "
           "stacks: acting, stepping and recording, one compiled call per few steps, unless +eager-act)",
    "adv": "advantage computation (GAE)",
    "update": "update (PPO epochs: minibatch gather, advantage normalisation, forward, backward, step)",
    "move": "data movement (device<->host, between libraries)",
    "other": "other (episode bookkeeping, convergence check, progress)",
}
#: Parts of the update phase timed inside it (they are included in "update").
UPDATE_PARTS = {
    "gather": "minibatch gather (indexing the flattened rollout by a shuffled permutation)",
    "normalize": "per-minibatch advantage normalisation",
}
#: A run's ``update_parts_note`` where the update is compiled: its parts are fused into the update, not timed.
COMPILED_PARTS_NOTE = ("fused: the compiled update gathers and normalises inside its compiled calls (one per "
                       "minibatch or per few), so update_parts are not timed apart (0); "
                       "'update' holds them")  # fmt: skip


class PhaseTimer:
    """Wall seconds per phase; ``sync`` (the stack's device synchronise) runs before each phase's clock stops."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.parts = dict.fromkeys(UPDATE_PARTS, 0.0)
        self.sync = sync or (lambda: None)

    @contextmanager
    def _clock(self, into: dict[str, float], key: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            into[key] += time.perf_counter() - t0

    def __call__(self, phase: str):  # noqa: ANN204 - a context manager
        return self._clock(self.seconds, phase)

    def part(self, name: str):  # noqa: ANN201 - a context manager, inside the "update" phase
        return self._clock(self.parts, name)


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def _mlp(obs_dim: int, hidden: int, out: int, out_std: float) -> nn.Sequential:
    return nn.Sequential(
        layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, out), std=out_std),
    )  # fmt: skip


class Agent(nn.Module):
    """CleanRL's separate tanh actor and critic; a Gaussian actor with one state-independent log-std for Box
    actions (the shape portkern's in-kernel MLP runs, so a fused rollout can act with these very weights)."""

    def __init__(self, obs_dim: int, n_actions: int | None, hidden: int = 64, action_dim: int = 1) -> None:
        super().__init__()
        self.discrete = n_actions is not None
        #: Box components (EnvSpec.action_dim): one Gaussian mean each, sharing the one log-std.
        self.action_dim = 1 if self.discrete else action_dim
        self.critic = _mlp(obs_dim, hidden, 1, 1.0)
        self.actor = _mlp(obs_dim, hidden, n_actions if self.discrete else action_dim, 0.01)
        self.log_std = nn.Parameter(torch.zeros(1), requires_grad=not self.discrete)
        #: Sample discrete actions as ``torch.multinomial``'s one-sample path does, without its checks
        #: (:func:`sample_categorical`); set on the compiled graphs' template agents (:func:`compile_template`).
        self.unchecked_sample = False

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def distribution(self, x: torch.Tensor) -> Categorical | Normal:
        # No argument checks: at these batch sizes they cost more than the 64-unit forward itself.
        out = self.actor(x)
        if self.discrete:
            return Categorical(logits=out, validate_args=False)
        if self.action_dim > 1:  # independent components: log-probs and entropies add over the last axis
            return Independent(Normal(out, self.log_std.exp().expand_as(out), validate_args=False), 1,
                               validate_args=False)  # fmt: skip
        return Normal(out.squeeze(-1), self.log_std.exp().expand(out.shape[0]), validate_args=False)

    def act(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action, log_prob, entropy, value)``; samples an action unless one is given."""
        dist = self.distribution(x)
        if action is None:
            action = sample_categorical(dist.probs) if self.discrete and self.unchecked_sample else dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`act` sampling an action: what ``torch.func.functional_call`` runs, so a compiled collection
        step (:class:`portkern.train.collect.CompiledCollect`) acts through this very code with any agent's
        parameters swapped in."""
        return self.act(x)

    def in_kernel_policy(self) -> MLPPolicy:
        """The actor as portkern's in-kernel MLP (weights ``[in, out]``, float32, on the host)."""
        layers = [m for m in self.actor if isinstance(m, nn.Linear)]
        w = [lin.weight.detach().to("cpu", torch.float32).T.contiguous().numpy() for lin in layers]
        b = [lin.bias.detach().to("cpu", torch.float32).numpy().copy() for lin in layers]
        log_std = self.log_std.detach().to("cpu", torch.float32).numpy().copy()
        return MLPPolicy(w[0], b[0], w[1], b[1], w[2], b[2], log_std)


def sample_categorical(probs: torch.Tensor) -> torch.Tensor:
    """One action per row of ``probs`` [B, n], the very draw ``Categorical(probs).sample()`` makes from the same
    generator state: ``torch.multinomial``'s one-sample path is the exponential race ``argmax(p / q)``, ``q ~
    Exp(1)`` drawn by ``exponential_`` into a tensor shaped like ``probs``. Without multinomial's argument checks
    (a max, a min and a row sum, each read back to the host: on a GPU a synchronisation per step), which at 4-32
    envs cost a compiled collection step as much as its forward; the probabilities come from a softmax here."""
    q = torch.empty_like(probs).exponential_()
    return (probs / q).argmax(-1)


class SigmoidTanh(nn.Module):
    """``tanh(x)`` as ``2 sigmoid(2x) - 1``: the compiled graphs' tanh on a CPU. Inductor vectorises ``tanh`` with
    SLEEF's 1-ulp ``tanhf`` (5.6x ATen's MKL ``tanh`` on a [512, 64] activation, measured on the development VM's
    Xeon: 135 vs 24 us), which made the four hidden-layer activations a third of a compiled minibatch; its
    sigmoid (one vectorised ``exp``) costs about what ATen's tanh does. The same function to float32 rounding
    (at most 1.8e-7 from float64 tanh over the activations' range, against 3.0e-8 for Inductor's tanh)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * torch.sigmoid(2.0 * x) - 1.0


def compile_template(agent: Agent, device: torch.device) -> Agent:
    """``agent`` as the template a compiled graph traces (``functional_call`` swaps every parameter in, so only
    its structure matters): it samples through :func:`sample_categorical`, and on a CPU its tanh activations
    become :class:`SigmoidTanh`."""
    agent.unchecked_sample = True
    if torch.device(device).type == "cpu":
        for seq in (agent.actor, agent.critic):
            for i, m in enumerate(seq):
                if isinstance(m, nn.Tanh):
                    seq[i] = SigmoidTanh()
    return agent


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


def torch_gae(
    rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor,
    truncated: torch.Tensor, gamma: float, lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """GAE as a CleanRL-style reverse loop over t in PyTorch, with portkern.buffer.gae's semantics:
    ``next_values[t]`` is V(obs step t reached), zeroed where it terminated, kept where it truncated; the
    recursion stops at every episode end."""
    not_term = (~terminated).to(values.dtype)
    not_done = (~(terminated | truncated)).to(values.dtype)
    adv = torch.zeros_like(values)
    last = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * next_values[t] * not_term[t] - values[t]
        last = delta + gamma * lam * not_done[t] * last
        adv[t] = last
    return adv, adv + values


def bootstrap_values(agent: Agent, values: torch.Tensor, final_obs: torch.Tensor,
                     truncated: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``next_values`` [T, N] for :func:`torch_gae`: V(obs step t reached), ``final_obs[t]``. Where step t did not
    end an episode that obs is step t+1's, whose value the rollout recorded (``values[t + 1]``); the critic runs
    only on the last step's ``final_obs`` and where an episode was truncated (its pre-reset obs, whose value GAE
    keeps). Where one terminated the value is whatever step t+1 recorded: GAE zeroes it. CleanRL's and PureJaxRL's
    loops reuse their values the same way (they treat a truncation as an end; portkern bootstraps it), and it saves
    a critic pass over T x N rows per update."""
    out = torch.empty_like(values)
    out[:-1] = values[1:]
    need = truncated.clone()
    need[-1] = True
    rows = need.nonzero(as_tuple=True)
    out[rows] = agent.value(final_obs[rows])
    return out


def make_optimizer(agent: Agent, cfg: PPOConfig) -> torch.optim.Adam:
    """CleanRL's optimizer: Adam at the config's lr with eps 1e-5 (the runner anneals its lr per update)."""
    return torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)


def actor_critic(agent: Agent, params: dict[str, torch.Tensor], obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``agent``'s actor output and value on ``obs`` with ``params`` (``{name: tensor}``, the names of
    ``agent.named_parameters()``) swapped into its modules by ``torch.func.functional_call``."""
    from torch.func import functional_call

    out = functional_call(agent.actor, {k[6:]: v for k, v in params.items() if k.startswith("actor.")}, (obs,))
    value = functional_call(agent.critic, {k[7:]: v for k, v in params.items() if k.startswith("critic.")},
                            (obs,)).squeeze(-1)  # fmt: skip
    return out, value


def functional_loss(agent: Agent, cfg: PPOConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The minibatch loss of :func:`ppo_update`'s eager path as a function of a ``{name: tensor}`` parameter dict
    (``torch.func.functional_call`` into ``agent``'s modules): ``loss(params, obs, actions, old_logp, old_v,
    mb_adv, mb_ret) -> (loss, stats)``, stats = ``[pg, v, entropy, approx_kl]`` detached."""
    def loss(params, obs, actions, old_logp, old_v, mb_adv, mb_ret):
        out, value = actor_critic(agent, params, obs)
        if agent.discrete:
            logp_all = torch.log_softmax(out, -1)
            newlogp = logp_all.gather(1, actions.long()[:, None]).squeeze(1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            log_std = params["log_std"]
            mean = out.squeeze(-1)
            newlogp = -((actions - mean) ** 2) / (2 * torch.exp(2 * log_std)) - log_std - 0.5 * math.log(2 * math.pi)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).expand_as(mean)
            if agent.action_dim > 1:  # [B, A] means (out.squeeze kept them): one Gaussian per component
                newlogp, entropy = newlogp.sum(-1), entropy.sum(-1)
        ratio = (newlogp - old_logp).exp()
        pg = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
        if cfg.clip_vloss:
            v_clipped = old_v + torch.clamp(value - old_v, -cfg.clip_coef, cfg.clip_coef)
            v_loss = 0.5 * torch.max((value - mb_ret) ** 2, (v_clipped - mb_ret) ** 2).mean()
        else:
            v_loss = 0.5 * ((value - mb_ret) ** 2).mean()
        ent = entropy.mean()
        logratio = newlogp - old_logp
        stats = torch.stack([pg, v_loss, ent, ((ratio - 1) - logratio).mean()]).detach()
        return pg - cfg.ent_coef * ent + v_loss * cfg.vf_coef, stats

    return loss


def most_dividing(n: int, cap: int) -> int:
    """The largest k in 1..``cap`` (1 if ``cap`` < 1) that divides ``n``: how many minibatches a compiled update
    call runs (:func:`minibatches_per_call`), how many env steps a compiled collection call runs
    (:func:`portkern.train.collect.steps_per_call`)."""
    return max(k for k in range(1, max(cap, 1) + 1) if n % k == 0)


def _grad_fn(agent: Agent, cfg: PPOConfig) -> Callable[..., Any]:
    from torch.func import grad

    return grad(functional_loss(agent, cfg), has_aux=True)


class MinibatchUpdate(Protocol):
    """What :func:`ppo_update` runs its minibatches with instead of the eager path: a compiled update
    (:class:`portkern.train.update.CompiledUpdate`, which builds on this module, so it is named here by what it
    does rather than imported)."""

    #: Minibatches per :meth:`step` call, in order across the epochs.
    per_call: int

    def calls(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[None]:
        """The context one update's :meth:`step` calls run in."""

    def step(self, optimizer: torch.optim.Optimizer, *rollout: torch.Tensor) -> torch.Tensor:
        """:attr:`per_call` minibatches of the six flattened rollout tensors at the rows of the last argument;
        the last one's loss stats ``[pg, v, entropy, approx_kl]``."""


def ppo_update(
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    cfg: PPOConfig,
    timer: PhaseTimer,
    b_obs: torch.Tensor,
    b_actions: torch.Tensor,
    b_logprobs: torch.Tensor,
    b_values: torch.Tensor,
    b_advantages: torch.Tensor,
    b_returns: torch.Tensor,
    compiled: MinibatchUpdate | None = None,
) -> tuple[float, float, float, float]:
    """CleanRL's clipped-objective epochs over shuffled minibatches: ``(pg, v, entropy, approx_kl)``; with
    ``compiled``, each minibatch (gather and normalisation included, so the update parts are not timed apart)
    runs in its compiled calls (``compiled.per_call`` minibatches each, in order across the epochs: on a CPU the
    whole update one call), on the same permutations as the eager path draws (one per epoch, the same generator
    calls in the same order, drawn first)."""
    batch_size = b_obs.shape[0]
    minibatch = batch_size // cfg.num_minibatches
    pg_loss = v_loss = entropy_loss = approx_kl = torch.zeros(())
    if compiled is not None:
        perms = torch.cat([torch.randperm(batch_size, device=b_obs.device) for _ in range(cfg.update_epochs)])
        rows = compiled.per_call * minibatch  # minibatches per compiled call, run in this order
        with compiled.calls(optimizer):
            for start in range(0, perms.shape[0], rows):
                stats = compiled.step(optimizer, b_obs, b_actions, b_logprobs, b_values, b_advantages, b_returns,
                                      perms[start : start + rows])  # fmt: skip
        pg_loss, v_loss, entropy_loss, approx_kl = stats.unbind(0)
        return pg_loss.item(), v_loss.item(), entropy_loss.item(), approx_kl.item()
    for _ in range(cfg.update_epochs):
        perm = torch.randperm(batch_size, device=b_obs.device)
        for start in range(0, batch_size, minibatch):
            with timer.part("gather"):
                mb = perm[start : start + minibatch]
                obs, actions, old_logp = b_obs[mb], b_actions[mb], b_logprobs[mb]
                old_v, mb_adv, mb_ret = b_values[mb], b_advantages[mb], b_returns[mb]
            _, newlogprob, entropy, newvalue = agent.act(obs, actions)
            logratio = newlogprob - old_logp
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
            if cfg.norm_adv:
                with timer.part("normalize"):
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(
                -mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
            ).mean()
            if cfg.clip_vloss:
                v_unclipped = (newvalue - mb_ret) ** 2
                v_clipped = old_v + torch.clamp(newvalue - old_v, -cfg.clip_coef, cfg.clip_coef)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - mb_ret) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - mb_ret) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - cfg.ent_coef * entropy_loss + v_loss * cfg.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            optimizer.step()
    return pg_loss.item(), v_loss.item(), entropy_loss.item(), approx_kl.item()


def finished_returns(episode_return: torch.Tensor, rewards: torch.Tensor, done: torch.Tensor) -> list[float]:
    """Advance the per-env running returns over a [T, N] rollout; the returns of episodes that ended."""
    out: list[float] = []
    r64 = rewards.to(torch.float64)
    for t in range(rewards.shape[0]):
        episode_return += r64[t]
        d = done[t]
        if bool(d.any()):
            out.extend(episode_return[d].tolist())
            episode_return[d] = 0.0
    return out


def window_mean(recent: list[float] | tuple[float, ...]) -> float:
    return float(np.mean(recent)) if len(recent) else math.nan


def record_update(task: TaskConfig, curve: list[list[Any]], update: int, global_step: int, elapsed: float,
                  recent: Sequence[float], this: float,
                  on_update: Callable[[int, int, float], None] | None) -> str | None:
    """Book one update the same way on every stack: its row of the learning curve (``this``: the mean return
    of the episodes it finished), the progress callback, and why the run stops after it (``"converged"``,
    ``"time budget"``), or None to go on."""
    mean = window_mean(recent)
    curve.append([update, global_step, round(elapsed, 4), None if math.isnan(mean) else round(mean, 3),
                  None if math.isnan(this) else round(this, 3)])  # fmt: skip
    solved = len(recent) == task.ppo.solve_window and mean >= task.target
    if on_update is not None:
        on_update(global_step, task.num_updates * task.ppo.batch_size, mean)
    if solved:
        return "converged"
    if elapsed >= task.max_seconds:
        return "time budget"
    return None
