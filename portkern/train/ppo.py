"""The measurement instrument: CleanRL's PPO (PyTorch), its agent, and a phase timer with device synchronisation."""

from __future__ import annotations

import functools
import math
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Sequence

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


def _minibatch_step(grad_fn: Callable[..., Any], names: Sequence[str], cfg: PPOConfig, betas: tuple[float, float],
                    eps: float, params: list[torch.Tensor], exp_avg: list[torch.Tensor],
                    exp_avg_sq: list[torch.Tensor], steps: list[torch.Tensor], lr: torch.Tensor,
                    b_obs: torch.Tensor, b_actions: torch.Tensor, b_logp: torch.Tensor, b_values: torch.Tensor,
                    b_adv: torch.Tensor, b_ret: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """One PPO minibatch on per-parameter tensors: the clipped gradient (:func:`_minibatch_grads`) and an Adam
    step (:func:`_adam_step`), updating ``params``, ``exp_avg``, ``exp_avg_sq`` and ``steps`` in place; the loss
    stats. The reference the K-seed update (:mod:`portkern.train.torch_batch`) is tested against."""
    grads, stats = _minibatch_grads(grad_fn, names, cfg, params, b_obs, b_actions, b_logp, b_values, b_adv, b_ret,
                                    perm)  # fmt: skip
    _adam_step(betas, eps, params, grads, exp_avg, exp_avg_sq, steps, lr)
    return stats


def _minibatch_steps(grad_fn: Callable[..., Any], names: Sequence[str], layout: Sequence[tuple[int, int, torch.Size]],
                     cfg: PPOConfig, betas: tuple[float, float], eps: float, flat: torch.Tensor,
                     exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, steps: torch.Tensor, lr: torch.Tensor,
                     b_obs: torch.Tensor, b_actions: torch.Tensor, b_logp: torch.Tensor, b_values: torch.Tensor,
                     b_adv: torch.Tensor, b_ret: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """What :class:`CompiledUpdate` compiles: ``perms.shape[0]`` minibatches one after the other (row indices
    ``perms[i]``), each the clipped gradient (:func:`_minibatch_grads`) and an Adam step on the parameters and
    state the one before left. The parameters, the Adam moments and the step counts come flat (one tensor each,
    the parameters at ``layout``'s ``(offset, numel, shape)``; the agent's parameters and the optimizer's state are
    views of them), so the step is one elementwise pass over each and a call takes five state tensors, not four per
    parameter. The last minibatch's loss stats."""
    stats = None
    for i in range(perms.shape[0]):
        params = [flat[o : o + n].view(shape) for o, n, shape in layout]
        grads, stats = _minibatch_grads(grad_fn, names, cfg, params, b_obs, b_actions, b_logp, b_values, b_adv,
                                        b_ret, perms[i])  # fmt: skip
        steps += 1
        _adam_apply(betas, eps, [flat], [torch.cat([g.reshape(-1) for g in grads])], [exp_avg], [exp_avg_sq],
                    steps[0], lr)  # fmt: skip
    return stats


def _minibatch_loop(grad_fn: Callable[..., Any], names: Sequence[str], layout: Sequence[tuple[int, int, torch.Size]],
                    cfg: PPOConfig, betas: tuple[float, float], eps: float, flat: torch.Tensor,
                    exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, steps: torch.Tensor, lr: torch.Tensor,
                    b_obs: torch.Tensor, b_actions: torch.Tensor, b_logp: torch.Tensor, b_values: torch.Tensor,
                    b_adv: torch.Tensor, b_ret: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """:func:`_minibatch_steps` with the minibatches as a ``while_loop`` (torch's control-flow operator) instead of
    unrolled: one minibatch is compiled once and the loop runs in the compiled code, so a whole update (every
    epoch's minibatches, ``perms`` [epochs x minibatches, rows]) is one call at one minibatch's cold compile. The
    loop carries the parameters, moments and counts as values (its body cannot update its inputs in place),
    written back into ``flat``, ``exp_avg``, ``exp_avg_sq`` and ``steps`` at the end; the Adam step is
    :func:`_adam_apply` on the body's own copies."""
    from torch._higher_order_ops.while_loop import while_loop

    def cond(i, flat, m, v, steps, stats):  # while_loop passes the carried values
        return i < perms.shape[0]

    def body(i, flat, m, v, steps, stats):
        params = [flat[o : o + n].view(shape) for o, n, shape in layout]
        perm = perms.index_select(0, i.reshape(1)).reshape(-1)
        grads, stats = _minibatch_grads(grad_fn, names, cfg, params, b_obs, b_actions, b_logp, b_values, b_adv,
                                        b_ret, perm)  # fmt: skip
        flat, m, v, steps = flat.clone(), m.clone(), v.clone(), steps + 1  # a body may not update its inputs
        _adam_apply(betas, eps, [flat], [torch.cat([x.reshape(-1) for x in grads])], [m], [v], steps[0], lr)
        return i + 1, flat, m, v, steps, stats

    start = (torch.zeros((), dtype=torch.long, device=flat.device), flat, exp_avg, exp_avg_sq, steps,
             torch.zeros(4, dtype=flat.dtype, device=flat.device))  # fmt: skip
    _, new_flat, m, v, new_steps, stats = while_loop(cond, body, start)
    flat.copy_(new_flat)
    exp_avg.copy_(m)
    exp_avg_sq.copy_(v)
    steps.copy_(new_steps)
    return stats


#: Rows per unrolled compiled update call (``CompiledUpdate(loop=False)``, CUDA's default) up to which minibatches
#: are grouped (:func:`minibatches_per_call`): the pinned CartPole-v1 and Acrobot-v1 minibatches (4 x 512 rows)
#: make one call per epoch, Pendulum-v1's (128) four to a call. A CPU runs the whole update as one compiled loop.
ROWS_PER_CALL = 2048
#: The most minibatches one compiled call unrolls (its cold compile grows with them).
MAX_MINIBATCHES_PER_CALL = 4


def minibatches_per_call(cfg: PPOConfig, batch: int) -> int:
    """How many minibatches an unrolled :class:`CompiledUpdate` (``loop=False``) runs per call: the most (at most
    :data:`MAX_MINIBATCHES_PER_CALL`, dividing ``num_minibatches``) whose rows together stay within
    :data:`ROWS_PER_CALL`. One call has a fixed cost (~0.15-0.25 ms on the 2-core development VM: Dynamo's and
    AOTAutograd's wrappers, the C++ wrapper's argument handling) that neither a 128-row nor a 512-row minibatch's
    arithmetic dwarfs (CartPole-v1's 512 rows: ~0.45 ms of kernels); the cold compile grows with the minibatches a
    call unrolls (Pendulum-v1's 4 x 128 rows: 10 -> 25 s, CartPole-v1's 4 x 512: 18 -> 33 s), once per shape
    and machine (Inductor's on-disk cache keeps it), and is timed apart from the runs."""
    rows = max(1, batch // cfg.num_minibatches)
    return most_dividing(cfg.num_minibatches, min(MAX_MINIBATCHES_PER_CALL, ROWS_PER_CALL // rows))


def most_dividing(n: int, cap: int) -> int:
    """The largest k in 1..``cap`` (1 if ``cap`` < 1) that divides ``n``: how many minibatches a compiled update
    call runs (:func:`minibatches_per_call`), how many env steps a compiled collection call runs
    (:func:`portkern.train.collect.steps_per_call`)."""
    return max(k for k in range(1, max(cap, 1) + 1) if n % k == 0)


def _minibatch_grads(grad_fn: Callable[..., Any], names: Sequence[str], cfg: PPOConfig, params: list[torch.Tensor],
                     b_obs: torch.Tensor, b_actions: torch.Tensor, b_logp: torch.Tensor, b_values: torch.Tensor,
                     b_adv: torch.Tensor, b_ret: torch.Tensor,
                     perm: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:  # fmt: skip
    """A minibatch's gradient, clipped: gather rows ``perm`` of the flattened rollout, normalise the advantages,
    loss and gradient (``grad_fn``), and the gradients scaled as ``nn.utils.clip_grad_norm_`` scales them; (the
    gradients in ``names`` order, the loss stats). Pure, so ``torch.func.vmap`` maps it over K seeds' stacked
    parameters and rollouts (:mod:`portkern.train.torch_batch`), each seed clipped by its own norm."""
    obs, actions, old_logp = b_obs[perm], b_actions[perm], b_logp[perm]
    old_v, mb_adv, mb_ret = b_values[perm], b_adv[perm], b_ret[perm]
    if cfg.norm_adv:
        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
    grads, stats = grad_fn(dict(zip(names, params)), obs, actions, old_logp, old_v, mb_adv, mb_ret)
    grads = [grads[n] for n in names]
    # nn.utils.clip_grad_norm_: the 2-norm of the per-tensor 2-norms, scale min(max_norm / (norm + 1e-6), 1).
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2) for g in grads]), 2)
    scale = torch.clamp(cfg.max_grad_norm / (total + 1e-6), max=1.0)
    return [g * scale for g in grads], stats


def _adam_step(betas: tuple[float, float], eps: float, params: list[torch.Tensor], grads: list[torch.Tensor],
               exp_avg: list[torch.Tensor], exp_avg_sq: list[torch.Tensor], steps: list[torch.Tensor],
               lr: torch.Tensor) -> None:  # fmt: skip
    """torch.optim.Adam's single-tensor step, in place, with the step count and lr as tensors so neither
    recompiles (the parameters step together: the first one's count is every one's). Elementwise, so on K seeds'
    stacked parameters it is K independent optimizers at one lr."""
    for s in steps:
        s += 1
    _adam_apply(betas, eps, params, grads, exp_avg, exp_avg_sq, steps[0], lr)


def _adam_apply(betas: tuple[float, float], eps: float, params: list[torch.Tensor], grads: list[torch.Tensor],
                exp_avg: list[torch.Tensor], exp_avg_sq: list[torch.Tensor], step: torch.Tensor,
                lr: torch.Tensor) -> None:  # fmt: skip
    """:func:`_adam_step`'s arithmetic at step count ``step`` (already incremented)."""
    beta1, beta2 = betas
    step_size = lr / (1 - beta1**step)
    bias_correction2_sqrt = (1 - beta2**step).sqrt()
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p.sub_(step_size * m / (v.sqrt() / bias_correction2_sqrt + eps))


def _flat_view(tensors: Sequence[torch.Tensor], layout: Sequence[tuple[int, int, torch.Size]]) -> torch.Tensor | None:
    """The one flat tensor that ``tensors`` are, in order, contiguous views of at ``layout``'s offsets, or None."""
    t0 = tensors[0]
    storage, base = t0.untyped_storage(), t0.storage_offset()
    for t, (o, _, shape) in zip(tensors, layout):
        if (t.untyped_storage().data_ptr() != storage.data_ptr() or t.storage_offset() != base + o
                or t.shape != shape or not t.is_contiguous() or t.dtype != t0.dtype):  # fmt: skip
            return None
    n = layout[-1][0] + layout[-1][1]
    return torch.empty(0, dtype=t0.dtype, device=t0.device).set_(storage, base, (n,), (1,))


def _flatten(tensors: Sequence[torch.Tensor],
             layout: Sequence[tuple[int, int, torch.Size]]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """``(flat, views)``: the flat tensor ``tensors`` already are views of (``views`` None), or a new one holding
    their values and its views at ``layout`` (to put in their place)."""
    flat = _flat_view(tensors, layout)
    if flat is not None:
        return flat, None
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    return flat, [flat[o : o + n].view(shape) for o, n, shape in layout]


#: (obs_dim, n_actions, hidden, config, Adam betas and eps, device) -> the compiled minibatch step.
_COMPILED: dict = {}
#: The keys of _COMPILED whose graph has been compiled (called once).
_WARM: set = set()


class CompiledUpdate:
    """A PPO minibatch as one ``torch.compile`` call: gather, advantage normalisation, loss, gradient
    (``torch.func.grad``), grad-norm clip and the Adam step (:func:`_minibatch_steps`), so a minibatch costs one
    compiled call instead of dozens of eager ops, each paying Python and dispatch overhead at this size; the
    minibatches :attr:`per_call` to a call, one after the other across the epochs: on a CPU the whole update
    (every epoch's minibatches, a compiled loop: :func:`_minibatch_loop`), so a call's fixed cost (~0.3 ms on
    the development VM: Dynamo's and AOTAutograd's wrappers, the C++ wrapper's) is paid once per update; else
    unrolled, :func:`minibatches_per_call` to a call (:func:`_minibatch_steps`). The
    parameters and the Adam state are the agent's and the ``torch.optim.Adam``'s own tensors, updated in place:
    the optimizer's state and ``lr`` (read at every step, a tensor in the graph, so annealing does not
    recompile) stay the truth, and the eager path could take over at any step. Those tensors are made views of
    one flat tensor each (parameters, first and second moments, step counts; the agent's parameters when this is
    built, the optimizer's state when it first steps or its state was replaced), so a call passes five of them
    rather than four per parameter, the Adam step is one elementwise pass, and the loop carries three tensors of
    state (alone, the flat tensors timed within the noise of per-parameter ones on the development VM: 0.98-1.04x
    a CartPole-v1 epoch call over three alternations). On CUDA it is compiled with
    ``mode="reduce-overhead"``, CUDA graphs where torch.compile can apply them (it may decline for a graph that
    updates its inputs in place, and then runs the plain compiled one). Untested: the development machine has
    no GPU.
    """

    def __init__(self, agent: Agent, cfg: PPOConfig, per_call: int | None = None, loop: bool | None = None) -> None:
        self.agent, self.cfg = agent, cfg
        named = dict(agent.named_parameters())
        device = next(iter(named.values())).device
        #: The minibatches of a call as a compiled loop (:func:`_minibatch_loop`), not unrolled
        #: (:func:`_minibatch_steps`): the default on a CPU, where it makes the whole update one call; on CUDA the
        #: unrolled calls run as CUDA graphs, and a loop's condition would be read back to the host each minibatch.
        self.loop = device.type == "cpu" if loop is None else bool(loop)
        total = cfg.update_epochs * cfg.num_minibatches
        #: Minibatches per compiled call, in order across epochs (a loop's: the update's, all of them; else
        #: :func:`minibatches_per_call`), unless given; :meth:`step` takes their rows.
        if per_call is None:
            per_call = total if self.loop else minibatches_per_call(cfg, cfg.batch_size)
        self.per_call = int(per_call)
        if self.per_call < 1 or total % self.per_call:
            raise ValueError(f"per_call: expected a divisor of the update's minibatches (update_epochs x "
                             f"num_minibatches = {total}), got {per_call}")  # fmt: skip
        self.names = [n for n, p in agent.named_parameters() if p.requires_grad]
        self.params = [named[n] for n in self.names]
        #: ``(offset, numel, shape)`` of each parameter in the flat tensors.
        self.layout = []
        for p in self.params:
            self.layout.append((self.layout[-1][0] + self.layout[-1][1] if self.layout else 0, p.numel(), p.shape))
        #: The parameters as one flat tensor, of which the agent's parameters are views from here on (the compiled
        #: step updates it in place, outside autograd).
        self.flat, views = _flatten([p.detach() for p in self.params], self.layout)
        if views is not None:
            with torch.no_grad():
                for p, v in zip(self.params, views):
                    p.data = v
        #: The gradient of the loss as a functional transform (what the compiled step traces), uncompiled.
        self.grad = _grad_fn(agent, cfg)
        self.device = self.params[0].device
        self.lr = torch.zeros((), device=self.device)  # the optimizer's lr, copied in when it changes
        self._lr_value: float | None = None
        #: What :meth:`step` looked up on its last call, reused while still valid (:meth:`_lookup`).
        self._last: tuple | None = None
        #: True inside :meth:`calls` once warm: the guard-skipping stance is already set.
        self._stanced = False

    def _compiled(self, optimizer: torch.optim.Optimizer) -> tuple[tuple, Callable[..., torch.Tensor]]:
        group = optimizer.param_groups[0]
        if not isinstance(optimizer, torch.optim.Adam) or len(optimizer.param_groups) != 1 or group["amsgrad"] \
                or group["weight_decay"] or group["maximize"]:  # fmt: skip
            raise ValueError("optimizer: the compiled update takes the eager path's torch.optim.Adam (one parameter "
                             "group, no weight decay, amsgrad or maximize)")  # fmt: skip
        betas, eps = tuple(float(b) for b in group["betas"]), float(group["eps"])
        a = self.agent
        n_out = a.actor[-1].out_features
        key = (a.actor[0].in_features, n_out if a.discrete else None, a.actor[0].out_features, self.cfg, betas, eps,
               str(self.device), a.action_dim, torch.get_num_threads(), self.per_call, self.loop)  # fmt: skip
        # One compiled step per shape and config in the process (and per thread count: Inductor's CPU code fixes
        # its OpenMP team size when it generates the kernels, so a run under another torch.set_num_threads gets
        # its own compile rather than the other's team size), around a template agent (functional_call swaps
        # in every parameter, so the template's own weights never matter): Dynamo would otherwise recompile for
        # each run's agent and fall back to eager after its recompile limit.
        if key not in _COMPILED:
            template = compile_template(Agent(key[0], key[1], key[2], action_dim=key[7]).to(self.device), self.device)
            fn = functools.partial(_minibatch_loop if self.loop else _minibatch_steps, _grad_fn(template, self.cfg),
                                   tuple(self.names),
                                   tuple(self.layout), self.cfg, betas, eps)  # fmt: skip
            if self.device.type == "cuda":  # CUDA graphs: one launch a step
                _COMPILED[key] = torch.compile(fn, dynamic=False, mode="reduce-overhead")
            else:  # Inductor's C++ wrapper: the kernel calls without a Python wrapper (1.12x a minibatch, measured)
                _COMPILED[key] = torch.compile(fn, dynamic=False, options={"cpp_wrapper": True})
        return key, _COMPILED[key]

    def _state(self, optimizer: torch.optim.Optimizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The Adam moments and step counts, flat (``exp_avg``, ``exp_avg_sq``, ``steps``: one count per
        parameter), the optimizer's own state tensors being views of them: created as ``torch.optim.Adam`` creates
        them at its first step, but the counts on the parameters' device (as its ``capturable`` mode keeps them: a
        CUDA graph cannot read a host scalar); state it holds already (an eager step's, a checkpoint's) copied in
        and its tensors replaced by the views, unless they are views of one flat tensor each already."""
        state = optimizer.state
        for p in self.params:
            st = state[p]
            if not st:
                st["step"] = torch.zeros((), dtype=torch.float32, device=self.device)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            elif st["step"].device != self.device:
                st["step"] = st["step"].to(self.device)
        step_layout = [(i, 1, torch.Size()) for i in range(len(self.params))]
        flats = []
        for name, layout in (("exp_avg", self.layout), ("exp_avg_sq", self.layout), ("step", step_layout)):
            flat, views = _flatten([state[p][name] for p in self.params], layout)
            if views is not None:
                for p, v in zip(self.params, views):
                    state[p][name] = v
            flats.append(flat)
        return flats[0], flats[1], flats[2]

    def warm_up(self, optimizer: torch.optim.Optimizer, batch: int) -> None:
        """Compile now (setup), on a zero rollout of ``batch`` rows and copies of the parameters and state, rather
        than in the first timed update; the agent and ``optimizer`` are left as they were."""
        key, fn = self._compiled(optimizer)
        dev, d = self.device, self.agent.actor[0].in_features
        mb = batch // self.cfg.num_minibatches
        def z(*shape: int) -> torch.Tensor:  # a separate tensor per argument: Dynamo guards on aliasing between them
            return torch.zeros(shape or (batch,), device=dev)

        a_dim = self.agent.action_dim  # Box actions of several components are [batch, A]
        actions = (torch.zeros(batch, dtype=torch.long, device=dev) if self.agent.discrete
                   else z(batch, a_dim) if a_dim > 1 else z())  # fmt: skip
        rows = self.per_call * mb
        perm = torch.arange(rows, device=dev).remainder(batch).view(self.per_call, mb)  # contiguous, as ppo_update's
        with torch.no_grad():
            fn(self.flat.clone(), torch.zeros_like(self.flat), torch.zeros_like(self.flat),
               torch.zeros(len(self.params), device=dev), torch.zeros((), device=dev), z(batch, d), actions, z(), z(),
               z(), z(), perm)  # fmt: skip
        _WARM.add(key)

    def _lookup(self, optimizer: torch.optim.Optimizer) -> tuple:
        """(key, compiled step, exp_avg, exp_avg_sq, steps) for ``optimizer``: those of the last call while nothing
        they depend on changed (the same optimizer, thread count, Adam betas and eps, and state: ``load_state_dict``
        replaces every parameter's state dict), else looked up afresh. A Pendulum-v1 update is 320 minibatches of
        128 rows; building the key and the state lists for each cost ~50 us of a ~0.3 ms call."""
        group = optimizer.param_groups[0]
        threads = torch.get_num_threads()
        last = self._last
        if (last is not None and last[0] is optimizer and last[1] == threads and last[2] == group["betas"]
                and last[3] == group["eps"] and optimizer.state.get(self.params[0]) is last[4]):  # fmt: skip
            return last[5]
        key, fn = self._compiled(optimizer)
        found = (key, fn, *self._state(optimizer))
        self._last = (optimizer, threads, group["betas"], group["eps"], optimizer.state[self.params[0]], found)
        return found

    @contextmanager
    def calls(self, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        """A run of :meth:`step` calls (an update's minibatches) under one Dynamo stance, set once for all of
        them rather than per call (~15 us of a ~0.3 ms call at 128 rows); only once the step is compiled (the
        first call runs Dynamo's guards and compiles)."""
        if self._stanced or self._lookup(optimizer)[0] not in _WARM:
            yield
            return
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            self._stanced = True
            try:
                yield
            finally:
                self._stanced = False

    def step(self, optimizer: torch.optim.Optimizer, *rollout: torch.Tensor) -> torch.Tensor:
        """:attr:`per_call` minibatches, one after the other (``rollout``: the six flattened rollout tensors, then
        the minibatches' row indices, ``[per_call, rows]`` or flat) at the optimizer's current lr; the last
        one's loss stats ``[pg, v, entropy, approx_kl]``."""
        key, fn, exp_avg, exp_avg_sq, steps = self._lookup(optimizer)
        if rollout:
            rollout = (*rollout[:-1], rollout[-1].view(self.per_call, -1))
        lr = float(optimizer.param_groups[0]["lr"])
        if lr != self._lr_value:  # annealed once per update: one fill, then 15 minibatches reuse it
            self.lr.fill_(lr)
            self._lr_value = lr
        # Once compiled, Dynamo's guards (on some 50 tensor arguments) cost as much as a fifth of a call at this
        # size and are skipped: the one graph per key covers every call (the key fixes the shapes and dtypes, the
        # rollout rows are contiguous), and a call that would need another graph raises instead.
        stance = nullcontext() if self._stanced else torch.compiler.set_stance(
            skip_guard_eval_unsafe=key in _WARM)  # fmt: skip
        with torch.no_grad(), stance:
            stats = fn(self.flat, exp_avg, exp_avg_sq, steps, self.lr, *rollout)
        _WARM.add(key)
        return stats


def _grad_fn(agent: Agent, cfg: PPOConfig) -> Callable[..., Any]:
    from torch.func import grad

    return grad(functional_loss(agent, cfg), has_aux=True)


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
    compiled: CompiledUpdate | None = None,
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
