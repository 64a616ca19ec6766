"""The compiled PPO update (:class:`CompiledUpdate`), every torch-agent stack's default: a PPO minibatch's gather,
advantage normalisation, loss, gradient, grad-norm clip and Adam step as ``torch.compile`` calls on the agent's and
the optimizer's own tensors (flat), the whole update one call on a CPU (a compiled loop), a few minibatches a call
on CUDA; and the pieces the K-seed update (:mod:`portkern.train.torch_batch`) maps over seeds."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, NamedTuple

import torch

from .config import PPOConfig
from .ppo import Agent, _grad_fn, compile_template, most_dividing


class UpdateRule(NamedTuple):
    """What stays fixed across a PPO update's minibatches: the loss gradient as a functional transform
    (``ppo._grad_fn``), the trained parameters' names in order, the PPO config, Adam's betas and eps, and, where
    the parameters come as one flat tensor, each one's ``(offset, numel, shape)`` in it."""

    grad_fn: Callable[..., Any]
    names: Sequence[str]
    cfg: PPOConfig
    betas: tuple[float, float]
    eps: float
    layout: Sequence[tuple[int, int, torch.Size]] = ()

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The parameters as views of ``flat`` at :attr:`layout`."""
        return [flat[o : o + n].view(shape) for o, n, shape in self.layout]


class AdamState(NamedTuple):
    """The parameters and ``torch.optim.Adam``'s state that an update changes in place: per-parameter lists (the
    reference step, the K-seed update's stacked tensors), or one flat tensor each (:class:`CompiledUpdate`: the
    step counts one per parameter); the learning rate as a tensor (annealing does not recompile)."""

    params: Any
    exp_avg: Any
    exp_avg_sq: Any
    steps: Any
    lr: torch.Tensor


class Minibatch(NamedTuple):
    """Minibatches of a flattened rollout: its six tensors and the row indices to gather, ``[rows]`` for one
    minibatch or ``[minibatches, rows]`` for several run one after the other."""

    obs: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    values: torch.Tensor
    adv: torch.Tensor
    ret: torch.Tensor
    rows: torch.Tensor


def _minibatch_step(rule: UpdateRule, adam: AdamState, mb: Minibatch) -> torch.Tensor:
    """One PPO minibatch on per-parameter tensors: the clipped gradient (:func:`_minibatch_grads`) and an Adam
    step (:func:`_adam_step`), updating ``adam``'s tensors in place; the loss stats. The reference the K-seed
    update (:mod:`portkern.train.torch_batch`) is tested against."""
    grads, stats = _minibatch_grads(rule, adam.params, mb)
    _adam_step(rule, adam, grads)
    return stats


def _minibatch_steps(rule: UpdateRule, adam: AdamState, mb: Minibatch) -> torch.Tensor:
    """What :class:`CompiledUpdate` compiles: ``mb.rows.shape[0]`` minibatches one after the other (row indices
    ``mb.rows[i]``), each the clipped gradient (:func:`_minibatch_grads`) and an Adam step on the parameters and
    state the one before left. The parameters, the Adam moments and the step counts come flat (one tensor each,
    the parameters at ``rule.layout``; the agent's parameters and the optimizer's state are views of them), so the
    step is one elementwise pass over each and a call takes five state tensors, not four per parameter. The last
    minibatch's loss stats."""
    stats = None
    for i in range(mb.rows.shape[0]):
        grads, stats = _minibatch_grads(rule, rule.views(adam.params), mb._replace(rows=mb.rows[i]))
        adam.steps.add_(1)
        _adam_flat(rule, adam, grads)
    return stats


def _minibatch_loop(rule: UpdateRule, adam: AdamState, mb: Minibatch) -> torch.Tensor:
    """:func:`_minibatch_steps` with the minibatches as a ``while_loop`` (torch's control-flow operator) instead of
    unrolled: one minibatch is compiled once and the loop runs in the compiled code, so a whole update (every
    epoch's minibatches, ``mb.rows`` [epochs x minibatches, rows]) is one call at one minibatch's cold compile.
    The loop carries the parameters, moments and counts as values (its body cannot update its inputs in place),
    written back into ``adam``'s flat tensors at the end; the Adam step is :func:`_adam_apply` on the body's own
    copies."""
    from torch._higher_order_ops.while_loop import while_loop

    rows = mb.rows

    def cond(i, flat, m, v, steps, stats):  # while_loop passes the carried values
        return i < rows.shape[0]

    def body(i, flat, m, v, steps, stats):
        perm = rows.index_select(0, i.reshape(1)).reshape(-1)
        grads, stats = _minibatch_grads(rule, rule.views(flat), mb._replace(rows=perm))
        # a body may not update its inputs
        state = AdamState(flat.clone(), m.clone(), v.clone(), steps + 1, adam.lr)
        _adam_flat(rule, state, grads)
        return i + 1, state.params, state.exp_avg, state.exp_avg_sq, state.steps, stats

    flat = adam.params
    start = (torch.zeros((), dtype=torch.long, device=flat.device), flat, adam.exp_avg, adam.exp_avg_sq, adam.steps,
             torch.zeros(4, dtype=flat.dtype, device=flat.device))  # fmt: skip
    _, *carried, stats = while_loop(cond, body, start)
    for dst, src in zip(adam[:4], carried):
        dst.copy_(src)
    return stats


def _on_records(body: Callable[[UpdateRule, AdamState, Minibatch], torch.Tensor], rule: UpdateRule,
                flat: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, steps: torch.Tensor,
                lr: torch.Tensor, *minibatch: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``body`` on the records, from what a compiled call takes: the five state tensors, then the six rollout
    tensors and the row indices, each a tensor argument of its own (what Dynamo guards on and CUDA graphs copy)."""
    return body(rule, AdamState(flat, exp_avg, exp_avg_sq, steps, lr), Minibatch(*minibatch))


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


def _minibatch_grads(rule: UpdateRule, params: list[torch.Tensor],
                     mb: Minibatch) -> tuple[list[torch.Tensor], torch.Tensor]:  # fmt: skip
    """A minibatch's gradient, clipped: gather rows ``mb.rows`` of the flattened rollout, normalise the advantages,
    loss and gradient (``rule.grad_fn``), and the gradients scaled as ``nn.utils.clip_grad_norm_`` scales them;
    (the gradients in ``rule.names`` order, the loss stats). Pure, so ``torch.func.vmap`` maps it over K seeds'
    stacked parameters and rollouts (:mod:`portkern.train.torch_batch`), each seed clipped by its own norm."""
    cfg, perm = rule.cfg, mb.rows
    obs, actions, old_logp = mb.obs[perm], mb.actions[perm], mb.logp[perm]
    old_v, mb_adv, mb_ret = mb.values[perm], mb.adv[perm], mb.ret[perm]
    if cfg.norm_adv:
        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
    grads, stats = rule.grad_fn(dict(zip(rule.names, params)), obs, actions, old_logp, old_v, mb_adv, mb_ret)
    grads = [grads[n] for n in rule.names]
    # nn.utils.clip_grad_norm_: the 2-norm of the per-tensor 2-norms, scale min(max_norm / (norm + 1e-6), 1).
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2) for g in grads]), 2)
    scale = torch.clamp(cfg.max_grad_norm / (total + 1e-6), max=1.0)
    return [g * scale for g in grads], stats


def _adam_step(rule: UpdateRule, adam: AdamState, grads: list[torch.Tensor]) -> None:
    """torch.optim.Adam's single-tensor step on per-parameter lists, in place, with the step counts and lr as
    tensors so neither recompiles (the parameters step together: the first one's count is every one's).
    Elementwise, so on K seeds' stacked parameters it is K independent optimizers at one lr."""
    for s in adam.steps:
        s += 1
    _adam_apply(rule, adam, grads, adam.steps[0])


def _adam_flat(rule: UpdateRule, adam: AdamState, grads: list[torch.Tensor]) -> None:
    """:func:`_adam_apply` on flat tensors (counts already incremented): the gradients concatenated in the
    parameters' layout."""
    one = AdamState([adam.params], [adam.exp_avg], [adam.exp_avg_sq], adam.steps, adam.lr)
    _adam_apply(rule, one, [torch.cat([g.reshape(-1) for g in grads])], adam.steps[0])


def _adam_apply(rule: UpdateRule, adam: AdamState, grads: list[torch.Tensor], step: torch.Tensor) -> None:
    """:func:`_adam_step`'s arithmetic at step count ``step`` (already incremented), on ``adam``'s lists."""
    beta1, beta2 = rule.betas
    step_size = adam.lr / (1 - beta1**step)
    bias_correction2_sqrt = (1 - beta2**step).sqrt()
    for p, g, m, v in zip(adam.params, grads, adam.exp_avg, adam.exp_avg_sq):
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p.sub_(step_size * m / (v.sqrt() / bias_correction2_sqrt + rule.eps))


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
            rule = UpdateRule(_grad_fn(template, self.cfg), tuple(self.names), self.cfg, betas, eps,
                              tuple(self.layout))  # fmt: skip
            fn = functools.partial(_on_records, _minibatch_loop if self.loop else _minibatch_steps, rule)
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
