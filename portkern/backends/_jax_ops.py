"""portkern's ops as pure JAX functions, for the ``jax`` backend and the ``jax`` training stack.

The env physics is not here: it is the NumPy reference itself (``portkern/envs/*.py``, written
against the array API standard), traced on jax arrays. What is here is what the reference backend
does around it, written functionally (JAX arrays are immutable: every function returns the new
buffers instead of writing them):

* Philox4x32-10 on uint32 words (uint64 products), bit-identical to :mod:`portkern.rng`;
* the step with autoreset (``numpy.NumpyBackend.env_step``), the reset draws computed for every
  env and selected with ``where`` (inside one compiled program that is cheaper than a gather);
* policy sampling (:func:`portkern.policy.sample_actions`) and the MLP forward pass;
* the fused rollout as a ``lax.scan`` over the steps, the policy inside;
* the rollout-buffer ops, GAE and discounted returns as reverse ``lax.scan``.

Every function here is meant to run under ``jax.jit``; the backend caches the compiled versions.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import rng
from ..envs.base import EnvSpec, ParamView, step_with
from ..policy import TWO_PI_F32
from ._array_ops import softmax_inverse_cdf

_M0, _M1 = int(rng.PHILOX_M0), int(rng.PHILOX_M1)
_W0, _W1 = int(rng.PHILOX_W0), int(rng.PHILOX_W1)
_U32 = jnp.uint32


class Env(NamedTuple):
    """The env buffers (``EnvBuffers``) as one pytree: what a step or a rollout carries."""

    state: Any  # [D, N]
    steps: Any  # [N] int32
    episodes: Any  # [N] uint32
    needs_reset: Any  # [N] bool
    obs: Any  # [N, obs_dim]
    final_obs: Any  # [N, obs_dim]
    reward: Any  # [N]
    terminated: Any  # [N] bool
    truncated: Any  # [N] bool


# ---- Philox4x32-10 ------------------------------------------------------------------------------
def _mulhilo(m: int, c: Any) -> tuple[Any, Any]:
    """(hi, lo) words of the 64-bit product of the constant ``m`` and uint32 ``c``.

    With 64-bit integers on (the ``jax`` backend turns ``jax_enable_x64`` on) the product is one uint64
    multiply: a 32 x 32 product fits exactly. Without them, ``hi`` is assembled from 16-bit halves (each
    partial product fits 32 bits, the middle sum's carry kept) and ``lo`` is the wrapping uint32 product.
    ``lo`` must not share the halves' middle sum with ``hi``: written that way (the first version here), XLA's
    CPU compiler (jax 0.10) made the last round's fusion cost ~15 us per element whenever a caller kept both
    words of one product (words 0 and 1, or 2 and 3: Pendulum's reset, the Gaussian policy's Box-Muller pair),
    some 300x the whole draw's cost otherwise (``bench/cpu/jax_philox.py``).
    """
    if jax.config.read("jax_enable_x64"):
        p = c.astype(jnp.uint64) * jnp.uint64(m)
        return (p >> jnp.uint64(32)).astype(_U32), p.astype(_U32)
    mh, ml = m >> 16, m & 0xFFFF
    ch, cl = c >> 16, c & 0xFFFF
    b = cl * _U32(mh)
    d = ch * _U32(ml)
    mid = ((cl * _U32(ml)) >> 16) + (b & 0xFFFF) + (d & 0xFFFF)  # < 3 * 2**16: no overflow
    hi = ch * _U32(mh) + (b >> 16) + (d >> 16) + (mid >> 16)
    return hi, c * _U32(m)


def philox4x32(counter: tuple[Any, Any, Any, Any], k0: Any, k1: Any, rounds: int = 10):
    """The rounds of :func:`portkern.rng.philox4x32` on uint32 arrays."""
    c0, c1, c2, c3 = counter
    for r in range(rounds):
        if r > 0:
            k0 = k0 + _U32(_W0)
            k1 = k1 + _U32(_W1)
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def draw(seed: Any, env_index: Any, episode: Any, stream: int, block: Any = 0):
    """Four uint32 words per env: key (seed, env index), counter (episode, block, stream, 0)."""
    episode = jnp.asarray(episode, _U32)
    zeros = jnp.zeros_like(episode)
    block = jnp.asarray(block, _U32) + zeros
    counter = (episode, block, zeros + _U32(stream), zeros)
    return philox4x32(counter, jnp.asarray(seed, _U32) + zeros, jnp.asarray(env_index, _U32))


def uniform(bits: Any, dtype: Any) -> Any:
    """Top 24 bits -> [0, 1): exact in float32 and float64, as :func:`rng.uniform`."""
    return (bits >> 8).astype(dtype) * jnp.asarray(2.0**-24, dtype)


def symmetric(bits: Any, dtype: Any) -> Any:
    return uniform(bits, dtype) * jnp.asarray(2.0, dtype) - jnp.asarray(1.0, dtype)


# ---- environments -------------------------------------------------------------------------------
def _while_wrap(x: Any, lo: Any, hi: Any, span: Any) -> Any:
    """Acrobot's ``_wrap`` with its data-dependent loops as ``lax.while_loop``: the same
    subtractions one span at a time (Gymnasium's wrap), which a traced ``while bool(...)`` cannot run."""
    x = lax.while_loop(lambda v: jnp.any(v > hi), lambda v: jnp.where(v > hi, v - span, v), x)
    return lax.while_loop(lambda v: jnp.any(v < lo), lambda v: jnp.where(v < lo, v + span, v), x)


#: Per env kernel, the reference helpers that need a traceable form (Python control flow on data).
_TRACEABLE = {"acrobot": {"_wrap": _while_wrap}}
_STEPS: dict[str, Any] = {}


def _step_fn(spec: EnvSpec) -> Any:
    """``spec.step`` as JAX traces it: the reference function itself, with the helpers in :data:`_TRACEABLE`."""
    return step_with(spec, _TRACEABLE, _STEPS)


def params_view(spec: EnvSpec, values: Any) -> ParamView:
    """The env's params, read by name from the traced [P] array (an argument, not a constant,
    so XLA cannot fold a division by a param into a multiplication by its reciprocal)."""
    return ParamView(spec.field_names, values, np.dtype(values.dtype))


def reset_states(spec: EnvSpec, p: ParamView, seed: Any, env_index: Any, episode: Any, dtype: Any) -> tuple:
    """The reference reset: Philox (seed, env; episode, 0, STREAM_RESET, 0) -> ``spec.reset``."""
    bits = draw(seed, env_index, episode, rng.STREAM_RESET)
    sym = jnp.stack([symmetric(b, dtype) for b in bits], axis=1)
    return tuple(s.astype(dtype) for s in spec.reset(sym, p))


def env_reset(spec: EnvSpec, values: Any, seed: Any, env: Env, fresh: bool) -> Env:
    """Every env reset (``NumpyBackend.env_reset``): episode counters restart at 0 or advance by one;
    the last step's reward, flags and final obs are left as they were."""
    n = env.episodes.shape[0]
    dtype = env.state.dtype
    p = params_view(spec, values)
    eps = jnp.zeros((n,), _U32) if fresh else env.episodes + _U32(1)
    state = reset_states(spec, p, seed, jnp.arange(n, dtype=_U32), eps, dtype)
    obs = spec.observe(state).astype(dtype)
    return env._replace(state=jnp.stack(state), steps=jnp.zeros((n,), jnp.int32), episodes=eps,
                        needs_reset=jnp.zeros((n,), bool), obs=obs)


def env_step(spec: EnvSpec, values: Any, env: Env, actions: Any, seed: Any, max_steps: int, next_step: bool) -> Env:
    """One step of every env with autoreset (``NumpyBackend.env_step``), as a new :class:`Env`."""
    p = params_view(spec, values)
    dtype = env.state.dtype
    new_state, rew, term = _step_fn(spec)(tuple(env.state[j] for j in range(spec.state_dim)), actions, p)
    new_state = jnp.stack(new_state).astype(dtype)
    rew = jnp.asarray(rew, dtype)
    steps = env.steps + 1
    trunc = steps >= max_steps
    if next_step:
        # Envs that finished on the previous call reset now instead of stepping (reward 0, flags false).
        finished = env.needs_reset
        rew = jnp.where(finished, jnp.zeros_like(rew), rew)
        term = term & ~finished
        trunc = trunc & ~finished
        needs_reset = term | trunc
    else:
        finished = term | trunc
        needs_reset = env.needs_reset
    obs = spec.observe(tuple(new_state[j] for j in range(spec.state_dim))).astype(dtype)
    # Autoreset: the next episode's draw for every env, kept where the env finished.
    n = steps.shape[0]
    bumped = env.episodes + _U32(1)
    fresh = jnp.stack(reset_states(spec, p, seed, jnp.arange(n, dtype=_U32), bumped, dtype))
    fresh_obs = spec.observe(tuple(fresh[j] for j in range(spec.state_dim))).astype(dtype)
    col = finished[:, None]
    return Env(
        state=jnp.where(finished[None, :], fresh, new_state),
        steps=jnp.where(finished, 0, steps).astype(jnp.int32),
        episodes=jnp.where(finished, bumped, env.episodes),
        needs_reset=needs_reset,
        obs=jnp.where(col, fresh_obs, obs),
        # same_step: the obs reached before any reset; next_step: the reset obs where one happened.
        final_obs=jnp.where(col, fresh_obs, obs) if next_step else obs,
        reward=rew,
        terminated=term,
        truncated=trunc,
    )


# ---- policies -----------------------------------------------------------------------------------
def mlp_forward(flat: Any, obs: Any, hidden: int, out_dim: int) -> Any:
    """The MLP of :class:`portkern.policy.MLPPolicy` from its flat float32 parameters: [N, out_dim]."""
    d = obs.shape[1]
    sizes = (d * hidden, hidden, hidden * hidden, hidden, hidden * out_dim, out_dim)
    at = np.cumsum((0,) + sizes)
    w1, b1, w2, b2, w3, b3 = (flat[at[i]: at[i + 1]] for i in range(6))
    x = obs.astype(jnp.float32)
    hi = lax.Precision.HIGHEST  # full float32 products on every device (TPUs default to bfloat16 passes)
    h1 = jnp.tanh(jnp.dot(x, w1.reshape(d, hidden), precision=hi) + b1)
    h2 = jnp.tanh(jnp.dot(h1, w2.reshape(hidden, hidden), precision=hi) + b2)
    return jnp.dot(h2, w3.reshape(hidden, out_dim), precision=hi) + b3


def sample_actions(kind: int, spec: EnvSpec, obs: Any, flat: Any, hidden: int, seed: Any, episodes: Any,
                   steps: Any) -> Any:  # fmt: skip
    """:func:`portkern.policy.sample_actions`: Philox (seed, env; episode, step, STREAM_POLICY, 0)."""
    n = obs.shape[0]
    if not spec.is_discrete and spec.action_dim > 1:
        return _sample_box(kind, spec, obs, flat, hidden, seed, episodes, steps)
    bits = draw(seed, jnp.arange(n, dtype=_U32), episodes, rng.STREAM_POLICY, steps.astype(_U32))
    f32 = jnp.float32
    if kind == 0:
        if spec.is_discrete:
            return (((bits[0] >> 8) * _U32(spec.discrete_actions)) >> 24).astype(jnp.int32)
        return jnp.asarray(spec.action_high, f32) * symmetric(bits[0], f32)
    out = mlp_forward(flat, obs, hidden, spec.discrete_actions if spec.is_discrete else 1)
    if spec.is_discrete:
        e = jnp.exp(out - out.max(axis=1, keepdims=True))
        return softmax_inverse_cdf(e, uniform(bits[0], f32), jnp.zeros((n,), jnp.int32))
    u1 = f32(1.0) - uniform(bits[0], f32)  # (0, 1]: log is finite
    u2 = uniform(bits[1], f32)
    z = jnp.sqrt(f32(-2.0) * jnp.log(u1)) * jnp.cos(f32(TWO_PI_F32) * u2)
    return out[:, 0] + jnp.exp(flat[-1]) * z


def _sample_box(kind: int, spec: EnvSpec, obs: Any, flat: Any, hidden: int, seed: Any, episodes: Any,
                steps: Any) -> Any:  # fmt: skip
    """[N, A] actions of a Box of action_dim A > 1: component j from Philox block j // 4 (random) or
    j // 2 (MLP), the 4th counter word, as :func:`portkern.policy.sample_actions` draws them."""
    n, a, f32 = obs.shape[0], spec.action_dim, jnp.float32
    ep = jnp.asarray(episodes, _U32)
    zeros = jnp.zeros_like(ep)
    counter = (ep, steps.astype(_U32) + zeros, zeros + _U32(rng.STREAM_POLICY))
    key = (jnp.asarray(seed, _U32) + zeros, jnp.arange(n, dtype=_U32))

    def block(b: int):
        return philox4x32((*counter, zeros + _U32(b)), *key)

    cols = []
    if kind == 0:
        for b in range(-(-a // 4)):
            bits = block(b)
            cols += [jnp.asarray(spec.action_high, f32) * symmetric(bits[w], f32) for w in range(min(4, a - 4 * b))]
        return jnp.stack(cols, axis=1)
    mean, std = mlp_forward(flat, obs, hidden, a), jnp.exp(flat[-1])
    for j in range(a):
        bits = block(j // 2) if j % 2 == 0 else bits
        w = 2 * (j % 2)
        u1 = f32(1.0) - uniform(bits[w], f32)  # (0, 1]: log is finite
        z = jnp.sqrt(f32(-2.0) * jnp.log(u1)) * jnp.cos(f32(TWO_PI_F32) * uniform(bits[w + 1], f32))
        cols.append(mean[:, j] + std * z)
    return jnp.stack(cols, axis=1)


def rollout(spec: EnvSpec, values: Any, env: Env, kind: int, flat: Any, hidden: int, seed: Any, steps: int,
            max_steps: int, next_step: bool) -> tuple[Env, dict[str, Any]]:  # fmt: skip
    """``steps`` steps with the policy in the loop, as one ``lax.scan``: (env after, time-major record)."""

    def body(env: Env, _):
        actions = sample_actions(kind, spec, env.obs, flat, hidden, seed, env.episodes, env.steps)
        nxt = env_step(spec, values, env, actions, seed, max_steps, next_step)
        rec = {"obs": env.obs, "actions": actions, "rewards": nxt.reward, "terminated": nxt.terminated,
               "truncated": nxt.truncated, "final_obs": nxt.final_obs}  # fmt: skip
        return nxt, rec

    return lax.scan(body, env, None, length=steps)


# ---- rollout buffer ops ([T, N], time-major) ----------------------------------------------------
def gae(rewards, values, next_values, terminated, truncated, gamma, gamma_lam):
    """``numpy.gae``: delta and the per-step coefficients vectorised, the recursion a reverse scan."""
    dt = rewards.dtype
    nonterminal = (~terminated).astype(dt)
    notdone = (~(terminated | truncated)).astype(dt)
    delta = rewards + gamma * next_values * nonterminal - values
    coef = gamma_lam * notdone

    def body(last, x):
        d, c = x
        last = d + c * last
        return last, last

    _, adv = lax.scan(body, jnp.zeros_like(rewards[0]), (delta, coef), reverse=True)
    return adv, adv + values


def discounted_returns(rewards, terminated, truncated, bootstrap, gamma):
    """``numpy.discounted_returns``; a [T, N] bootstrap is each step's final-obs value (used where truncated)."""
    dt = rewards.dtype
    nonterminal = (~terminated).astype(dt)
    steps = rewards.shape[0]
    per_step = bootstrap.ndim == 2
    last_r = rewards[-1] + gamma * (bootstrap[-1] if per_step else bootstrap) * nonterminal[-1]
    if steps == 1:
        return last_r[None]

    def body(running, x):
        r, nt, tr, boot = x
        nxt = jnp.where(tr, boot if per_step else jnp.zeros_like(running), running)
        running = r + gamma * nxt * nt
        return running, running

    boot = bootstrap[:-1] if per_step else jnp.zeros_like(rewards[:-1])
    _, head = lax.scan(body, last_r, (rewards[:-1], nonterminal[:-1], truncated[:-1], boot), reverse=True)
    return jnp.concatenate([head, last_r[None]])


def normalize(x, eps, acc_dtype):
    """``numpy.normalize``: mean and population std accumulated in ``acc_dtype``."""
    xa = x.astype(acc_dtype)
    mean = xa.mean()
    std = jnp.sqrt(jnp.mean(jnp.square(xa - mean)))
    d = std.astype(x.dtype) + eps
    # XLA divides an array by a scalar as a multiply by the scalar's reciprocal, which is 0 for a float32 scalar
    # past 2^126: a std that large gave all zeros. Both sides scaled by 2^-64 there (exact, a power of two); 1
    # otherwise, so ordinary inputs round as before.
    s = jnp.where(d > 2.0**100, jnp.asarray(2.0**-64, x.dtype), jnp.asarray(1.0, x.dtype))
    return ((x - mean.astype(x.dtype)) * s) / (d * s)


def gather(x, indices):
    return jnp.take(x, indices, axis=0)


__all__ = ["Env", "discounted_returns", "draw", "env_reset", "env_step", "gae", "gather", "mlp_forward",
           "normalize", "philox4x32", "rollout", "sample_actions"]  # fmt: skip
