"""portkern's ops in standard PyTorch tensor operations: no custom kernels, no extensions.

Used by the ``torch`` backend as they are (eager) and by ``torch_compile`` through
``torch.compile`` (Inductor). The env physics is not here: it is the NumPy reference itself
(``portkern/envs/*.py``, written against the array API standard), called on tensors. What is
here is what the reference backend does around it, in tensor form:

* Philox4x32-10 in int64 tensor arithmetic, bit-identical to :mod:`portkern.rng`;
* the autoreset step (``numpy.NumpyBackend.env_step``) writing the env buffers in place;
* policy sampling (:func:`portkern.policy.sample_actions`) and the MLP forward pass;
* the rollout-buffer ops (``numpy.gae``, ``discounted_returns``, ``normalize``, ``gather``).

Every function takes and returns tensors on one device and never synchronises with the host;
the caller's ``nonzero`` between :func:`env_step` and :func:`autoreset` (which envs finished) is
the one synchronisation per step, the price of running the reset draws for those envs only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import rng
from ..envs.base import EnvSpec, step_with
from ..policy import TWO_PI_F32
from ._array_ops import softmax_inverse_cdf

MASK32 = 0xFFFFFFFF
_M0, _M1 = int(rng.PHILOX_M0), int(rng.PHILOX_M1)
_W0, _W1 = int(rng.PHILOX_W0), int(rng.PHILOX_W1)

#: A tensor of int64 words holding uint32 values, or a Python int (constant counter words: the
#: first rounds then fold in Python instead of launching tensor ops).
Word = Any


# ---- Philox4x32-10 ------------------------------------------------------------------------------
def _mulhilo(m: int, c: Word) -> tuple[Word, Word]:
    """(hi, lo) 32-bit words of the 64-bit product ``m * c`` of two uint32 values.

    The product needs 64 unsigned bits, which int64 cannot hold (torch has no uint64 arithmetic
    and little uint32), so the constant ``m`` is split into 16-bit halves: every partial product
    stays below 2**49 and nothing relies on signed overflow wrapping.
    """
    a = c * (m >> 16)
    b = c * (m & 0xFFFF)
    s = ((a & 0xFFFF) << 16) + b
    return (a >> 16) + (s >> 32), s & MASK32


def philox4x32(counter: tuple[Word, Word, Word, Word], k0: Word, k1: Word, rounds: int = 10):
    """Philox4x32 on uint32 words held in int64 tensors (or ints): the rounds of :func:`rng.philox4x32`."""
    c0, c1, c2, c3 = counter
    for r in range(rounds):
        if r > 0:
            k0 = (k0 + _W0) & MASK32
            k1 = (k1 + _W1) & MASK32
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def draw(seed: Word, env_index: torch.Tensor, episode: torch.Tensor, stream: int, block: Word = 0):
    """Four uint32 words per env (int64 tensors): key (seed, env index), counter (episode, block, stream, 0).

    Eager on a CPU, the words come from the reference's own :func:`rng.draw` on the tensors' NumPy views (the
    same bits by construction): a 32 x 32-bit multiply in int64 tensor arithmetic takes 9 ops (no unsigned
    64-bit shifts in torch), one in NumPy's uint64, so the draws of a reset of 6 envs take 0.09 ms there
    (0.07 since rng.draw folds its shared words) against 0.33-0.43 ms in tensor ops, and 0.76 against
    1.7 ms at 16,384 envs (dev VM's Xeon). Traced by torch.compile, or on any other device, the tensor
    arithmetic of :func:`philox4x32`.
    """
    if (isinstance(seed, int) and env_index.device.type == "cpu" and not torch.compiler.is_compiling()
            and isinstance(episode, torch.Tensor)):  # fmt: skip
        host = lambda w: w.numpy() if isinstance(w, torch.Tensor) else w  # zero-copy views
        bits = rng.draw(seed, host(env_index), host(episode), stream, host(block))  # [n, 4] uint32
        return tuple(torch.from_numpy(np.ascontiguousarray(bits.T, dtype=np.int64)))
    return philox4x32((episode, block, stream, 0), seed, env_index)


def uniform(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Top 24 bits -> [0, 1): exact in float32 and float64, as :func:`rng.uniform`."""
    return (bits >> 8).to(dtype) * 2.0**-24


def symmetric(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[-1, 1) as ``2u - 1`` (exact), as :func:`rng.symmetric`."""
    return uniform(bits, dtype) * 2.0 - 1.0


# ---- environments -------------------------------------------------------------------------------
def reset_states(spec: EnvSpec, p: Any, seed: Word, env_index: torch.Tensor, episode: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The reference reset (``numpy.reset_states``): Philox (seed, env; episode, 0, STREAM_RESET, 0)."""
    bits = draw(seed, env_index, episode, rng.STREAM_RESET)
    sym = torch.stack([symmetric(b, dtype) for b in bits], dim=1)  # [n, 4], as rng.symmetric gives
    return tuple(s.to(dtype) for s in spec.reset(sym, p))


def env_reset(spec: EnvSpec, state, steps, episodes, needs_reset, obs, p, seed: Word, fresh: bool,
              env_index: torch.Tensor) -> None:  # fmt: skip
    """Reset every env in place (``NumpyBackend.env_reset``)."""
    if fresh:
        eps = torch.zeros_like(env_index)
    else:
        eps = (episodes.to(torch.int64) + 1) & MASK32  # uint32 arithmetic, in int64 (see _mulhilo)
    fresh_state = reset_states(spec, p, seed, env_index, eps, state.dtype)
    state.copy_(torch.stack(fresh_state))
    episodes.copy_(eps)
    steps.zero_()
    needs_reset.zero_()
    obs.copy_(spec.observe(fresh_state))


def _host_any(flags: torch.Tensor) -> bool:
    return bool(flags.any())


try:  # the reason reaches torch's graph-break log (newer torch); older torch takes the function alone
    _HOST_ANY = torch.compiler.disable(_host_any, reason="Acrobot's wrap loop: a data-dependent trip count")
except TypeError:
    _HOST_ANY = torch.compiler.disable(_host_any)


def _any(flags: torch.Tensor) -> bool:
    # Under torch.compile, bool(tensor) is a Tensor.item() that Dynamo breaks the graph at and warns about
    # (21 lines per compile). The trip count depends on the data, so the break is inherent; through
    # torch.compiler.disable it is a plain eager call, without the warning. Eager torch keeps bool().
    return _HOST_ANY(flags) if torch.compiler.is_compiling() else bool(flags.any())


#: Loop iterations :func:`_wrap` runs unconditionally before its one data-dependent test: an Acrobot step moves
#: an angle by at most 0.2 s x 9 pi rad/s < one span, so a state from a step needs one at most.
WRAP_UNROLL = 2


def _wrap_loop(x: torch.Tensor, lo: Any, hi: Any, span: Any) -> torch.Tensor:
    """Acrobot's ``_wrap`` (Gymnasium's loop, one span at a time), its loop test through :func:`_any`."""
    while _any(x > hi):
        x = torch.where(x > hi, x - span, x)
    while _any(x < lo):
        x = torch.where(x < lo, x + span, x)
    return x


def _wrap(x: torch.Tensor, lo: Any, hi: Any, span: Any) -> torch.Tensor:
    """:func:`_wrap_loop` with one test instead of one per iteration and loop (a host sync each in eager torch):
    each loop's first WRAP_UNROLL iterations run unconditionally (``where`` leaves an element in range as it
    is, so an iteration past the loop's end changes nothing), then one test sends a state still out of range
    through the loops themselves. Under torch.compile each loop instead goes on as torch's ``while_loop`` (a
    loop Inductor compiles, its test read inside the compiled code; usually zero more iterations), every
    subtraction before any addition as in Gymnasium: a data-dependent trip count without a graph break, so an
    Acrobot step compiles to one graph. Bit for bit the reference."""
    compiling = torch.compiler.is_compiling()
    if compiling:
        from torch._higher_order_ops.while_loop import while_loop

        # The loops may close over tensors and ints only, none aliasing another: Python-float bounds become 0-d
        # tensors of x's dtype (the comparisons and sums with a Python float round them so anyway), tensor
        # bounds (views of one params array) copies.
        lo, hi, span = (v.clone() if isinstance(v, torch.Tensor)
                        else torch.scalar_tensor(v, dtype=x.dtype, device=x.device) for v in (lo, hi, span))  # fmt: skip
    up = x
    for _ in range(WRAP_UNROLL):
        up = torch.where(up > hi, up - span, up)
    if compiling:
        (up,) = while_loop(lambda v: (v > hi).any(), lambda v: (torch.where(v > hi, v - span, v),), (up,))
    down = up
    for _ in range(WRAP_UNROLL):
        down = torch.where(down < lo, down + span, down)
    if compiling:
        (down,) = while_loop(lambda v: (v < lo).any(), lambda v: (torch.where(v < lo, v + span, v),), (down,))
        return down
    if _any((up > hi) | (down < lo)):
        return _wrap_loop(x, lo, hi, span)
    return down


#: Per env kernel, the reference helpers that torch runs in another form (envs.base.step_with).
_TRACEABLE = {"acrobot": {"_wrap": _wrap}}
_STEPS: dict[str, Any] = {}


def step_fn(spec: EnvSpec) -> Any:
    """``spec.step`` as torch runs it: the reference function, with the helpers in :data:`_TRACEABLE`. Made on
    the first call, so a compiled caller calls this outside its trace first (Dynamo cannot trace the function
    copy it makes: a graph break that would split the compiled step for good)."""
    return step_with(spec, _TRACEABLE, _STEPS)


def env_step(spec: EnvSpec, state, steps, needs_reset, actions, obs, final_obs, reward, terminated, truncated,
             p, max_steps: int, next_step: bool) -> torch.Tensor:  # fmt: skip
    """One step of every env, writing the env buffers in place (``NumpyBackend.env_step`` before its
    resets); returns which envs finished, for :func:`autoreset`.

    Every env is stepped and observed here, the finished ones included; :func:`autoreset` then
    overwrites the finished envs' state, steps and obs with their reset, so the reset draws run
    for those envs only, not for all N.
    """
    new_state, rew, term = step_fn(spec)(tuple(state.unbind(0)), actions, p)
    new_steps = steps + 1
    trunc = new_steps >= max_steps
    if next_step:
        # Envs that finished on the previous call reset now instead of stepping (reward 0, flags false).
        finished = needs_reset.clone()
        rew = torch.where(finished, torch.zeros_like(rew), rew)
        term = term & ~finished
        trunc = trunc & ~finished
        needs_reset.copy_(term | trunc)
    else:
        finished = term | trunc
    state.copy_(torch.stack(new_state))
    steps.copy_(new_steps)
    o = spec.observe(new_state)
    obs.copy_(o)
    final_obs.copy_(o)  # same_step: the obs reached before any reset; next_step: obs, updated by autoreset
    reward.copy_(rew)
    terminated.copy_(term)
    truncated.copy_(trunc)
    return finished


def put_row(dst: torch.Tensor, t: torch.Tensor, row: torch.Tensor) -> None:
    """``dst[t] = row`` for a step index ``t`` held as a one-element int64 tensor (data, so one compiled graph
    serves every t): ``dst[t]`` with a tensor index would read it back to the host (a graph break), and an int
    ``t`` is specialised by Dynamo at 0 and 1 (a graph each); ``index_copy_`` keeps the step in the graph."""
    dst.index_copy_(0, t, row.unsqueeze(0).to(dst.dtype))


def autoreset(spec: EnvSpec, state, steps, episodes, obs, final_obs, p, seed: Word, idx: torch.Tensor,
              next_step: bool) -> None:  # fmt: skip
    """Reset the envs ``idx`` (the finished ones, from ``nonzero``) in place: next episode's draw,
    steps 0, the reset obs (also the final obs in next_step mode)."""
    # uint32 has no tensor arithmetic: the episode counters are updated through an int32 view of
    # the same bits, the increment done in int64 modulo 2**32.
    ep = episodes.view(torch.int32)
    bumped = (ep[idx].to(torch.int64) + 1) & MASK32
    ep[idx] = torch.where(bumped >= 2**31, bumped - 2**32, bumped).to(torch.int32)
    fresh = reset_states(spec, p, seed, idx, bumped, state.dtype)
    state[:, idx] = torch.stack(fresh)
    steps[idx] = 0
    o = spec.observe(fresh)
    obs[idx] = o
    if next_step:
        final_obs[idx] = o


# ---- policies -----------------------------------------------------------------------------------
def mlp_forward(flat: torch.Tensor, obs: torch.Tensor, hidden: int, out_dim: int) -> torch.Tensor:
    """The MLP of :class:`portkern.policy.MLPPolicy` from its flat float32 parameters: [N, out_dim].

    Matrix products in the framework's own order (BLAS, cuBLAS), not the reference's sequential
    sums: the results agree to float32 rounding, which is what a framework stack gives.
    """
    d = obs.shape[1]
    sizes = (d * hidden, hidden, hidden * hidden, hidden, hidden * out_dim, out_dim)
    w1, b1, w2, b2, w3, b3 = torch.split(flat[: sum(sizes)], sizes)
    x = obs.to(torch.float32)
    h1 = torch.tanh(torch.addmm(b1, x, w1.view(d, hidden)))
    h2 = torch.tanh(torch.addmm(b2, h1, w2.view(hidden, hidden)))
    return torch.addmm(b3, h2, w3.view(hidden, out_dim))


def sample_actions(kind: int, spec: EnvSpec, obs, flat, hidden: int, seed: Word, episodes, steps,
                   env_index: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """:func:`portkern.policy.sample_actions` in tensor ops: Philox (seed, env; episode, step, STREAM_POLICY, 0)."""
    if not spec.is_discrete and spec.action_dim > 1:
        return _sample_box(kind, spec, obs, flat, hidden, seed, episodes, steps, env_index)
    bits = draw(seed, env_index, episodes.to(torch.int64), rng.STREAM_POLICY, steps.to(torch.int64))
    if kind == 0:
        if spec.is_discrete:
            return (((bits[0] >> 8) * spec.discrete_actions) >> 24).to(torch.int32)
        return float(spec.action_high) * symmetric(bits[0], torch.float32)
    out = mlp_forward(flat, obs, hidden, spec.discrete_actions if spec.is_discrete else 1)
    if spec.is_discrete:
        e = torch.exp(out - out.amax(dim=1, keepdim=True))
        zeros = torch.zeros_like(env_index, dtype=torch.int32)
        return softmax_inverse_cdf(e, uniform(bits[0], torch.float32), zeros)
    u1 = 1.0 - uniform(bits[0], torch.float32)  # (0, 1]: log is finite
    u2 = uniform(bits[1], torch.float32)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(float(TWO_PI_F32) * u2)
    return out[:, 0] + torch.exp(flat[-1]) * z


def _sample_box(kind: int, spec: EnvSpec, obs, flat, hidden: int, seed: Word, episodes, steps,
                env_index: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """[N, A] actions of a Box of action_dim A > 1: component j from Philox block j // 4 (random) or
    j // 2 (MLP), the 4th counter word, as :func:`portkern.policy.sample_actions` draws them."""
    a, ep, st = spec.action_dim, episodes.to(torch.int64), steps.to(torch.int64)

    def block(b: int):
        return philox4x32((ep, st, rng.STREAM_POLICY, b), seed, env_index)

    cols = []
    if kind == 0:
        for b in range(-(-a // 4)):
            bits = block(b)
            cols += [float(spec.action_high) * symmetric(bits[w], torch.float32) for w in range(min(4, a - 4 * b))]
        return torch.stack(cols, dim=1)
    mean, std = mlp_forward(flat, obs, hidden, a), torch.exp(flat[-1])
    for j in range(a):
        bits = block(j // 2) if j % 2 == 0 else bits
        w = 2 * (j % 2)
        u1 = 1.0 - uniform(bits[w], torch.float32)  # (0, 1]: log is finite
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(float(TWO_PI_F32) * uniform(bits[w + 1], torch.float32))
        cols.append(mean[:, j] + std * z)
    return torch.stack(cols, dim=1)


# ---- rollout buffer ops ([T, N], time-major) ----------------------------------------------------
# Scalars (gamma, gamma * lam, eps) come already rounded to the buffers' precision, as the
# reference's T(gamma): a Python float holding a float32 value is then exact in every product.
#
# The scans in two steps: the whole-array terms first (deltas and coefficients over all of [T, N]),
# then the recursion, one multiply and one add per row, in place: the CleanRL loop with 2 ops per
# row instead of 7 and nothing allocated. Not torch.addcmul, which is one op but fuses into an FMA
# on CPU, so not the reference's rounding. Masks become coefficients, ``gamma * notterminal``
# (gamma or 0): x * (gamma or 0) rounds as the reference's (gamma * x) * (1 or 0), NaN and inf
# included. The terms come in two forms: eager (``*_terms``), written with ``out=`` into the outputs
# and the caller's scratch, because a fresh [T, N] temporary costs more than computing it (its
# first-touch page faults); and functional (``*_fused``), which torch.compile fuses into one
# kernel writing the outputs (used where that kernel is the faster: torch_compile.py). The
# recursion stays eager in both: Inductor's code for the unrolled loop of T rows ran 3x slower
# than these row ops at 128 x 65,536 float32 (one thread).
def scan_rows(acc, coef, scratch) -> None:
    """``acc_t += coef_t * acc_{t+1}`` for t = T-2 .. 0, in place (``scratch``: one row)."""
    rows, coefs = acc.unbind(0), coef.unbind(0)
    for t in range(len(rows) - 2, -1, -1):
        torch.mul(coefs[t], rows[t + 1], out=scratch)
        rows[t].add_(scratch)


def gae_terms(rewards, values, next_values, terminated, truncated, delta, coef, gamma: float,
              gamma_lam: float, done) -> None:  # fmt: skip
    """delta = r + (gamma * nv) * notterminal - v and coef = gamma_lam * notdone, written with out=
    (``done``: [T, N] bool scratch)."""
    zero = rewards.new_zeros(())
    torch.where(terminated, zero, rewards.new_tensor(gamma), out=coef)
    torch.mul(next_values, coef, out=delta)
    delta.add_(rewards).sub_(values)
    torch.logical_or(terminated, truncated, out=done)
    torch.where(done, zero, rewards.new_tensor(gamma_lam), out=coef)


def gae_terms_fused(rewards, values, next_values, terminated, truncated, delta, coef, gamma: float,
                    gamma_lam: float) -> None:  # fmt: skip
    """:func:`gae_terms` as one expression per output, for torch.compile."""
    delta.copy_(rewards + next_values * ((~terminated).to(rewards.dtype) * gamma) - values)
    coef.copy_((~(terminated | truncated)).to(rewards.dtype) * gamma_lam)


def gae(rewards, values, next_values, terminated, truncated, advantages, returns, gamma: float,
        gamma_lam: float, coef, done) -> None:  # fmt: skip
    """``numpy.gae`` (same operations, same rounding), in place; ``coef`` ([T, N], rewards' dtype)
    and ``done`` ([T, N] bool) are scratch."""
    gae_terms(rewards, values, next_values, terminated, truncated, advantages, coef, gamma, gamma_lam, done)
    scan_rows(advantages, coef, returns[0])  # A_t = delta_t + coef_t * A_{t+1}; the last row is delta
    torch.add(advantages, values, out=returns)


def discounted_returns_coef(terminated, truncated, coef, gamma: float, done) -> None:
    """coef = gamma where neither terminated nor truncated, else 0, written with out= (``done``: scratch)."""
    torch.logical_or(terminated, truncated, out=done)
    torch.where(done, coef.new_zeros(()), coef.new_tensor(gamma), out=coef)


def discounted_returns_own_fused(rewards, terminated, truncated, bootstrap, out, gamma: float) -> None:
    """For torch.compile, with a [T, N] bootstrap: ``out`` = each step's own term, as
    :func:`discounted_returns_scan` writes it (one kernel for its 4 eager passes)."""
    gnt = torch.where(terminated, 0.0, torch.full_like(rewards, gamma))  # gamma or 0, in rewards' dtype
    out.copy_(torch.where(truncated, rewards + bootstrap * gnt, rewards))


def discounted_returns_scan(rewards, terminated, truncated, bootstrap, out, gamma: float, coef,
                            own_written: bool = False) -> None:  # fmt: skip
    """The rest of :func:`discounted_returns` once ``coef`` is written: each step's own term (unless
    ``own_written``: out holds them already), then the rows.

    The reference's ``r_t + (gamma * next) * nonterminal_t``, with ``next`` the running return, or 0
    (or the step's own bootstrap) where truncated: the carried term is ``coef_t * out_{t+1}`` (0 where
    terminated or truncated), added to the step's own term: a truncated step's bootstrap term with a
    [T, N] bootstrap, the reward otherwise.
    """
    steps = rewards.shape[0]
    zero, g = rewards.new_zeros(()), rewards.new_tensor(gamma)
    per_step = bootstrap.dim() == 2
    if per_step and not own_written:  # own term: r + boot * (gamma or 0) where truncated, r elsewhere
        torch.where(terminated, zero, g, out=out)
        out.mul_(bootstrap).add_(rewards)
        torch.where(truncated, out, rewards, out=out)
    # the last step always bootstraps: r + (gamma * bootstrap) * nonterminal
    last = bootstrap[-1] if per_step else bootstrap
    torch.mul(last, torch.where(terminated[-1], zero, g), out=out[-1])
    out[-1].add_(rewards[-1])
    if per_step:  # out holds the own terms
        scan_rows(out, coef, torch.empty_like(out[0]))
        return
    rows, coefs, own = out.unbind(0), coef.unbind(0), rewards.unbind(0)
    for t in range(steps - 2, -1, -1):  # scan_rows, the reward added straight from rewards
        torch.mul(coefs[t], rows[t + 1], out=rows[t])
        rows[t].add_(own[t])


def discounted_returns(rewards, terminated, truncated, bootstrap, out, gamma: float, coef, done) -> None:
    """``numpy.discounted_returns`` (same rounding), in place; a [T, N] bootstrap is each step's final-obs
    value (used where truncated). ``coef`` ([T, N], rewards' dtype) and ``done`` ([T, N] bool) are scratch."""
    discounted_returns_coef(terminated, truncated, coef, gamma, done)
    discounted_returns_scan(rewards, terminated, truncated, bootstrap, out, gamma, coef)


def normalize(x, out, eps: float, acc_dtype: torch.dtype | None) -> None:
    """``numpy.normalize``: mean and population std of x cast to ``acc_dtype``, or (None) of x itself,
    in ATen's all-element reductions (a float32 x on CPU: the mean a cascade sum, the variance
    accumulated in float64 around it). ``out`` may be x: the statistics come first."""
    if acc_dtype is None:  # no casts at all: the public call's whole cost is these four ops at small sizes
        mean, std = x.mean(), x.std(correction=0)
        if x.dtype != torch.float64 and not bool(torch.isfinite(mean) & torch.isfinite(std)):
            # x's own dtype overflowed (a float32 sum past 3.4e38, of finite elements or not): the statistics in
            # float64, as the reference takes them (only then: the cast costs more than the op)
            xa = x.to(torch.float64)
            mean, std = xa.mean().to(x.dtype), xa.std(correction=0).to(x.dtype)
    else:
        xa = x.to(acc_dtype)
        mean, std = xa.mean().to(x.dtype), xa.std(correction=0).to(x.dtype)
    torch.sub(x, mean, out=out)
    out.div_(std + eps)


#: A row's bytes -> an integer (or complex) dtype of that size: on a CPU, a gather of such rows runs as
#: ``index_select`` over a 1-D tensor with one element per row.
_ROW_AS_ELEMENT = {4: torch.int32, 8: torch.int64, 16: torch.complex128}
#: Gathered rows from which the views pay: they cost ~2.5 us a call, as much as the copy they save at ~2,000
#: rows of 4 float32s (index_select alone: 8.5 us at 4,096 rows, 2.4 us at 512).
_ROW_AS_ELEMENT_FROM = 4096


def gather(x, indices, out) -> None:
    """``out[:] = x[indices]`` along dim 0. On a CPU, rows of 4, 8 or 16 bytes (CartPole's 4 float32
    observations, 2-float rows, one float64) are copied as one element each: ATen's index_select over
    [M, F] rows copies each row as a loop over its F elements, over a 1-D tensor as one load and store
    (1.4x at 4 float32s, 2.3x at 2, 2.6x at 1; 524,288 rows, one thread, dev VM's Xeon). The views are
    integer or complex: a move, bit for bit whatever the floats hold. Under ``_ROW_AS_ELEMENT_FROM`` rows,
    where the views cannot be made (a storage offset not a multiple of the row) and elsewhere (CUDA:
    unmeasured), the plain call."""
    n = out.shape[0]
    if n >= _ROW_AS_ELEMENT_FROM and x.dim() > 1 and x.device.type == "cpu":
        row_bytes = (x.numel() // x.shape[0]) * x.element_size() if x.shape[0] else 0
        as_one = _ROW_AS_ELEMENT.get(row_bytes)
        if (as_one is not None and x.is_contiguous() and out.is_contiguous()
                and (x.storage_offset() * x.element_size()) % row_bytes == 0
                and (out.storage_offset() * out.element_size()) % row_bytes == 0):  # fmt: skip
            torch.index_select(x.view(-1).view(as_one), 0, indices, out=out.view(-1).view(as_one))
            return
    torch.index_select(x, 0, indices, out=out)
