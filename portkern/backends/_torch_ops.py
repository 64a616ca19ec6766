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

import torch

from .. import rng
from ..envs.base import EnvSpec
from ..policy import TWO_PI_F32

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
    """Four uint32 words per env (int64 tensors): key (seed, env index), counter (episode, block, stream, 0)."""
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


def env_step(spec: EnvSpec, state, steps, needs_reset, actions, obs, final_obs, reward, terminated, truncated,
             p, max_steps: int, next_step: bool) -> torch.Tensor:  # fmt: skip
    """One step of every env, writing the env buffers in place (``NumpyBackend.env_step`` before its
    resets); returns which envs finished, for :func:`autoreset`.

    Every env is stepped and observed here, the finished ones included; :func:`autoreset` then
    overwrites the finished envs' state, steps and obs with their reset, so the reset draws run
    for those envs only, not for all N.
    """
    new_state, rew, term = spec.step(tuple(state.unbind(0)), actions, p)
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
    bits = draw(seed, env_index, episodes.to(torch.int64), rng.STREAM_POLICY, steps.to(torch.int64))
    if kind == 0:
        if spec.is_discrete:
            return (((bits[0] >> 8) * spec.discrete_actions) >> 24).to(torch.int32)
        return float(spec.action_high) * symmetric(bits[0], torch.float32)
    out = mlp_forward(flat, obs, hidden, spec.discrete_actions if spec.is_discrete else 1)
    if spec.is_discrete:
        # Inverse CDF of the softmax with the reference's sequential float32 sums (not cumsum,
        # which accumulates in float64 on CPU), so the chosen index is the reference's for the same logits.
        e = torch.exp(out - out.amax(dim=1, keepdim=True))
        total = e[:, 0]
        for k in range(1, e.shape[1]):
            total = total + e[:, k]
        threshold = uniform(bits[0], torch.float32) * total
        action = torch.zeros_like(env_index, dtype=torch.int32)
        acc = e[:, 0]
        for k in range(e.shape[1] - 1):  # the first k with threshold < acc_k = how many acc_k <= threshold
            if k:
                acc = acc + e[:, k]
            action = action + (threshold >= acc).to(torch.int32)
        return action
    u1 = 1.0 - uniform(bits[0], torch.float32)  # (0, 1]: log is finite
    u2 = uniform(bits[1], torch.float32)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(float(TWO_PI_F32) * u2)
    return out[:, 0] + torch.exp(flat[-1]) * z


# ---- rollout buffer ops ([T, N], time-major) ----------------------------------------------------
# Scalars (gamma, gamma * lam, eps) come already rounded to the buffers' precision, as the
# reference's T(gamma): a Python float holding a float32 value is then exact in every product.
def gae(rewards, values, next_values, terminated, truncated, advantages, returns, gamma: float,
        gamma_lam: float) -> None:  # fmt: skip
    """``numpy.gae``: the same operations in the same order, the per-step terms vectorised over T."""
    nonterminal = (~terminated).to(rewards.dtype)
    notdone = (~(terminated | truncated)).to(rewards.dtype)
    delta = rewards + gamma * next_values * nonterminal - values
    coef = gamma_lam * notdone
    last = torch.zeros_like(rewards[0])
    # The trace, collected and stacked once: T slice writes would each be a full-buffer scatter
    # after torch.compile's functionalisation; one stack fuses into the loop's single kernel.
    trace = []
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = delta[t] + coef[t] * last
        trace.append(last)
    advantages.copy_(torch.stack(trace[::-1]))
    torch.add(advantages, values, out=returns)


def discounted_returns(rewards, terminated, truncated, bootstrap, out, gamma: float) -> None:
    """``numpy.discounted_returns``; a [T, N] bootstrap is each step's final-obs value (used where truncated)."""
    steps = rewards.shape[0]
    per_step = bootstrap.dim() == 2
    nonterminal = (~terminated).to(rewards.dtype)
    running = torch.zeros_like(rewards[0])
    trace = []  # stacked once, as in gae
    for t in range(steps - 1, -1, -1):
        if per_step:
            nxt = bootstrap[t] if t == steps - 1 else torch.where(truncated[t], bootstrap[t], running)
        else:
            nxt = bootstrap if t == steps - 1 else torch.where(truncated[t], torch.zeros_like(running), running)
        running = rewards[t] + gamma * nxt * nonterminal[t]
        trace.append(running)
    out.copy_(torch.stack(trace[::-1]))


def normalize(x, out, eps: float, acc_dtype: torch.dtype) -> None:
    """``numpy.normalize``: mean and population std accumulated in ``acc_dtype`` (float64 where the device has it)."""
    xa = x.to(acc_dtype)
    mean = xa.mean()
    std = torch.sqrt(torch.mean(torch.square(xa - mean)))
    out.copy_((x - mean.to(x.dtype)) / (std.to(x.dtype) + eps))


def gather(x, indices, out) -> None:
    torch.index_select(x, 0, indices, out=out)
