"""The measurement instrument: CleanRL's PPO (PyTorch), its agent, and a phase timer with device synchronisation."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from ..policy import MLPPolicy
from .config import PPOConfig, TaskConfig

#: Phases of one training run, in the order a training step passes them. Every one is timed on its own
#: (each ends with a device synchronise), so their sum is the wall time up to the untimed gaps between them.
PHASES = {
    "setup": "setup (env build, kernel compile, model init, reset)",
    "act": "acting (policy/value forward, incl. bootstrap values and fused stacks' recomputed log-probs)",
    "env": "environment stepping (fused stacks: stepping and in-kernel acting, one launch per rollout)",
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

    def __init__(self, obs_dim: int, n_actions: int | None, hidden: int = 64) -> None:
        super().__init__()
        self.discrete = n_actions is not None
        self.critic = _mlp(obs_dim, hidden, 1, 1.0)
        self.actor = _mlp(obs_dim, hidden, n_actions if self.discrete else 1, 0.01)
        self.log_std = nn.Parameter(torch.zeros(1), requires_grad=not self.discrete)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def distribution(self, x: torch.Tensor) -> Categorical | Normal:
        # No argument checks: at these batch sizes they cost more than the 64-unit forward itself.
        out = self.actor(x)
        if self.discrete:
            return Categorical(logits=out, validate_args=False)
        return Normal(out.squeeze(-1), self.log_std.exp().expand(out.shape[0]), validate_args=False)

    def act(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action, log_prob, entropy, value)``; samples an action unless one is given."""
        dist = self.distribution(x)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(x)

    def in_kernel_policy(self) -> MLPPolicy:
        """The actor as portkern's in-kernel MLP (weights ``[in, out]``, float32, on the host)."""
        layers = [m for m in self.actor if isinstance(m, nn.Linear)]
        w = [lin.weight.detach().to("cpu", torch.float32).T.contiguous().numpy() for lin in layers]
        b = [lin.bias.detach().to("cpu", torch.float32).numpy().copy() for lin in layers]
        log_std = self.log_std.detach().to("cpu", torch.float32).numpy().copy()
        return MLPPolicy(w[0], b[0], w[1], b[1], w[2], b[2], log_std)


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


#: (obs_dim, n_actions, hidden, config, device) -> the compiled gradient function (see CompiledLoss).
_COMPILED: dict = {}


class CompiledLoss:
    """The minibatch loss and its gradient as one compiled graph: ``torch.func.grad`` over the agent's
    parameters, traced and compiled by ``torch.compile`` (forward, loss and backward fused by Inductor), so a
    minibatch step is one compiled call instead of dozens of eager ops. The same loss as :func:`ppo_update`'s
    eager path; the optimizer step and the grad-norm clip stay PyTorch's own (they are one foreach op each).
    """

    def __init__(self, agent: Agent, cfg: PPOConfig) -> None:
        self.agent, self.cfg = agent, cfg
        self.names = [n for n, p in agent.named_parameters() if p.requires_grad]
        n_out = agent.actor[-1].out_features
        key = (agent.actor[0].in_features, n_out if agent.discrete else None, agent.actor[0].out_features, cfg,
               str(next(agent.parameters()).device))  # fmt: skip
        # One compiled graph per shape and config in the process, around a template agent (functional_call
        # swaps in every parameter, so the template's own weights never matter): Dynamo would otherwise
        # recompile for each run's agent and fall back to eager after its recompile limit.
        if key not in _COMPILED:
            template = Agent(key[0], key[1], key[2]).to(key[4])
            _COMPILED[key] = self._build(template, cfg)
        self.grad = _COMPILED[key]

    def warm_up(self, batch: int) -> None:
        """Compile now (setup), on a zero minibatch of ``batch`` rows, rather than in the first timed update."""
        named = dict(self.agent.named_parameters())
        dev = next(self.agent.parameters()).device
        def z() -> torch.Tensor:  # a separate tensor per argument: Dynamo guards on aliasing between them
            return torch.zeros(batch, device=dev)

        obs = torch.zeros((batch, self.agent.actor[0].in_features), device=dev)
        actions = torch.zeros(batch, dtype=torch.long, device=dev) if self.agent.discrete else z()
        self.grad({n: named[n].detach() for n in self.names}, obs, actions, z(), z(), z(), z())

    @staticmethod
    def _build(agent: Agent, cfg: PPOConfig):
        from torch.func import functional_call, grad

        def loss(params, obs, actions, old_logp, old_v, mb_adv, mb_ret):
            out = functional_call(agent.actor, {k[6:]: v for k, v in params.items() if k.startswith("actor.")}, (obs,))
            value = functional_call(agent.critic, {k[7:]: v for k, v in params.items() if k.startswith("critic.")},
                                    (obs,)).squeeze(-1)  # fmt: skip
            if agent.discrete:
                logp_all = torch.log_softmax(out, -1)
                newlogp = logp_all.gather(1, actions.long()[:, None]).squeeze(1)
                entropy = -(logp_all.exp() * logp_all).sum(-1)
            else:
                log_std = params["log_std"]
                mean = out.squeeze(-1)
                newlogp = -((actions - mean) ** 2) / (2 * torch.exp(2 * log_std)) - log_std - 0.5 * math.log(2 * math.pi)
                entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).expand_as(mean)
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

        return torch.compile(grad(loss, has_aux=True), dynamic=False)

    def step(self, optimizer: torch.optim.Optimizer, *batch: torch.Tensor) -> torch.Tensor:
        """One minibatch: compiled loss and gradient, then the grad-norm clip and the optimizer step."""
        named = dict(self.agent.named_parameters())
        params = {n: named[n].detach() for n in self.names}
        grads, stats = self.grad(params, *batch)
        for n in self.names:
            named[n].grad = grads[n]
        nn.utils.clip_grad_norm_([named[n] for n in self.names], self.cfg.max_grad_norm)
        optimizer.step()
        return stats


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
    compiled: CompiledLoss | None = None,
) -> tuple[float, float, float, float]:
    """CleanRL's clipped-objective epochs over shuffled minibatches: ``(pg, v, entropy, approx_kl)``; with
    ``compiled``, each minibatch's loss and backward are that one compiled graph (gather and normalisation
    stay timed apart, as on the eager path)."""
    batch_size = b_obs.shape[0]
    minibatch = batch_size // cfg.num_minibatches
    pg_loss = v_loss = entropy_loss = approx_kl = torch.zeros(())
    for _ in range(cfg.update_epochs):
        perm = torch.randperm(batch_size, device=b_obs.device)
        for start in range(0, batch_size, minibatch):
            with timer.part("gather"):
                mb = perm[start : start + minibatch]
                obs, actions, old_logp = b_obs[mb], b_actions[mb], b_logprobs[mb]
                old_v, mb_adv, mb_ret = b_values[mb], b_advantages[mb], b_returns[mb]
            if compiled is not None:
                if cfg.norm_adv:
                    with timer.part("normalize"):
                        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                stats = compiled.step(optimizer, obs, actions, old_logp, old_v, mb_adv, mb_ret)
                pg_loss, v_loss, entropy_loss, approx_kl = stats.unbind(0)
                continue
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
