"""The ``jax`` training stack: PPO with every stage of an update one compiled XLA program (PureJaxRL's design).

The same PPO as :mod:`portkern.train.ppo` (CleanRL's): separate 64-64 tanh actor and critic with
orthogonal init (sqrt 2, output 0.01 actor / 1.0 critic), clipped policy and value losses, entropy
bonus, per-minibatch advantage normalisation (unbiased std, as ``torch.std``), global grad-norm clip,
Adam with eps 1e-5 (PyTorch's update rule, written out: no optax) and the linearly annealed rate,
on the pinned config. A Box of several components (``EnvSpec.action_dim`` A > 1, Chain-v0) gets the torch
agent's head: A Gaussian means sharing the one log-std, the actions ``[..., A]``, log-probs and entropies summed
over the components. What differs is how it runs, as PureJaxRL runs it:

* **env** -- the rollout is one ``lax.scan``: the policy samples (``jax.random``), portkern's
  reference physics steps with autoreset (:mod:`portkern.backends._jax_ops`, the ``jax`` backend's
  step), the storage is the scan's output; the episode returns and the ring of the last
  ``solve_window`` finished returns are kept on the device in the same scan;
* **act** -- the bootstrap values V(final obs) of the whole rollout, one forward pass;
* **adv** -- GAE as a reverse ``lax.scan`` (the backend's buffer op);
* **update** -- every epoch and minibatch (permutation, gather, loss, grad, clip, Adam) inside one
  program: a scan over epochs of a scan over minibatches.

Four programs per update rather than PureJaxRL's one, so the report's phases stay measured, not
estimated; what that costs is three extra dispatches and device synchronisations per update
(tens of microseconds on a CPU). Nothing crosses to the host but the convergence check's few
scalars ("other"), so the stack is ``resident`` (no data movement phase).

Compilation happens in setup (``compile_s``), once per process and shape: :func:`prime` runs it
before the timed runs, as for every other stack.

**Many policies per device** (``portkern train --parallel-seeds K``: jax_batch.py, ``train_batch``): K seeds train at
once, PureJaxRL's way, with the state stacked on a leading seed axis and one ``vmap``-ed program per chunk of
updates (a ``lax.scan`` over whole updates, the four stages fused), so per chunk there is one dispatch and one
host read. Every update's ring of finished returns comes out of the scan, so each seed's converged update is
the one the single-seed loop would find on the batch's numbers, not an estimate; those numbers are the single-seed
run's up to float rounding (vmapped kernels round differently in the last bits), which a chaotic env such as
Chain-v0 grows within a rollout, so there a seed may converge at another update in a batch than alone. What the
records say is ``jax_batch.PARALLEL_NOTE``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Callable

import numpy as np

from .. import envs
from .config import PPOConfig, TaskConfig

#: What the record says about where the phases of this stack are (the runner's JSON carries it per run).
PHASE_NOTE = ("jax stack: each phase is one compiled XLA program per update; 'env' includes in-scan acting "
              "(as on fused stacks), 'update' every epoch and minibatch (gather and normalisation inside it, "
              "so update_parts are 0)")  # fmt: skip


def _jax():
    try:
        import jax
    except ImportError as exc:
        raise RuntimeError("--stack jax: needs JAX: pip install 'portkern[jax]'") from exc
    from ..backends.registry import get_backend

    get_backend("jax")  # the backend's settings (64-bit types available) for its env ops
    return jax


# ---- the agent ---------------------------------------------------------------------------------
def init_params(key: Any, obs_dim: int, n_out: int, hidden: int) -> dict[str, Any]:
    """CleanRL's init: orthogonal weights (gain sqrt 2; actor output 0.01, critic output 1.0), zero biases."""
    import jax
    import jax.numpy as jnp

    def mlp(k, out, out_std):
        ks = jax.random.split(k, 3)
        sizes = [(obs_dim, hidden, math.sqrt(2)), (hidden, hidden, math.sqrt(2)), (hidden, out, out_std)]
        return [(jax.nn.initializers.orthogonal(s)(kk, (i, o), jnp.float32), jnp.zeros((o,), jnp.float32))
                for kk, (i, o, s) in zip(ks, sizes)]  # fmt: skip

    ka, kc = jax.random.split(key)
    return {"actor": mlp(ka, n_out, 0.01), "critic": mlp(kc, 1, 1.0), "log_std": jnp.zeros((1,), jnp.float32)}


def _mlp(layers: list, x: Any) -> Any:
    import jax.numpy as jnp

    (w1, b1), (w2, b2), (w3, b3) = layers
    h = jnp.tanh(x @ w1 + b1)
    h = jnp.tanh(h @ w2 + b2)
    return h @ w3 + b3


def value(params: dict, x: Any) -> Any:
    return _mlp(params["critic"], x)[..., 0]


def log_prob_entropy(params: dict, x: Any, action: Any, discrete: bool) -> tuple[Any, Any]:
    """Log-probs of ``action`` and the entropies, per row. A Box of A > 1 components (actor output ``[..., A]``,
    actions ``[..., A]``) is the torch agent's: A independent Gaussians sharing the one log-std, their
    log-probs and entropies summed over the components; A = 1 keeps the actions ``[...]``."""
    import jax
    import jax.numpy as jnp

    out = _mlp(params["actor"], x)
    if discrete:
        logp = jax.nn.log_softmax(out)
        chosen = jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]
        return chosen, -(jnp.exp(logp) * logp).sum(-1)
    wide = out.shape[-1] > 1
    mean, log_std = (out if wide else out[..., 0]), params["log_std"][0]
    lp = -((action - mean) ** 2) / (2 * jnp.exp(2 * log_std)) - log_std - 0.5 * math.log(2 * math.pi)
    ent = jnp.broadcast_to(0.5 + 0.5 * math.log(2 * math.pi) + log_std, mean.shape)
    return (lp.sum(-1), ent.sum(-1)) if wide else (lp, ent)


def sample(params: dict, x: Any, key: Any, discrete: bool) -> Any:
    """Actions for obs ``x``: ``[...]`` (discrete, or a Box of one component) or ``[..., A]`` (a Box of A > 1)."""
    import jax
    import jax.numpy as jnp

    out = _mlp(params["actor"], x)
    if discrete:
        return jax.random.categorical(key, out).astype(jnp.int32)
    mean = out if out.shape[-1] > 1 else out[..., 0]
    return mean + jnp.exp(params["log_std"][0]) * jax.random.normal(key, mean.shape, jnp.float32)


# ---- the compiled stages -----------------------------------------------------------------------
@dataclass(frozen=True)
class Static:
    """What a compiled program is specialised to (hashable: the cache key of the programs): the env and the
    task's PPO settings, less those no program reads (``lr`` is an argument of ``update``; ``anneal_lr`` and
    ``torch_threads`` are host-side), which are set to neutral values so that they do not multiply the cache."""

    env_id: str
    ppo: PPOConfig

    @classmethod
    def of(cls, task: TaskConfig) -> Static:
        return cls(task.env_id, dataclasses.replace(task.ppo, lr=0.0, anneal_lr=False, torch_threads=0))

    @property
    def window(self) -> int:
        """The length of the ring of finished episodes' returns (the solve window)."""
        return self.ppo.solve_window


def init_state(st: Static, seed: int) -> dict[str, Any]:
    """Everything an update carries: params, Adam moments, env buffers, episode bookkeeping, PRNG key."""
    import jax
    import jax.numpy as jnp

    from ..backends import _jax_ops as ops
    from ..backends.registry import get_backend

    spec = envs.get(st.env_id)
    b = get_backend("jax")
    values = b.from_host(spec.param_vector(spec.defaults, np.float32).as_array())
    n, d = st.ppo.num_envs, spec.obs_dim
    z = jnp.zeros
    empty = ops.Env(z((spec.state_dim, n), jnp.float32), z((n,), jnp.int32), z((n,), jnp.uint32), z((n,), bool),
                    z((n, d), jnp.float32), z((n, d), jnp.float32), z((n,), jnp.float32), z((n,), bool),
                    z((n,), bool))  # fmt: skip
    env = ops.env_reset(spec, values, np.uint32(seed), empty, True)
    key = jax.random.PRNGKey(seed)
    key, kp = jax.random.split(key)
    # One output per Box component (EnvSpec.action_dim), each its own Gaussian mean, as the torch agent's actor.
    params = init_params(kp, d, spec.discrete_actions or spec.action_dim, st.ppo.hidden)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    # Committed to the backend's device like every program output, so the state an update returns has the
    # same signature as this one (jit would otherwise compile every stage a second time).
    return jax.device_put({"params": params, "m": zeros, "v": zeros, "t": jnp.zeros((), jnp.float32), "env": env,
            "values": values, "seed": jnp.asarray(seed, jnp.uint32), "key": key,
            "ep_ret": z((n,), jnp.float32), "ring": jnp.full((st.window,), jnp.nan, jnp.float32),
            "finished": jnp.zeros((), jnp.int32)}, b.device)  # fmt: skip


def rollout(st: Static, state: dict) -> tuple[dict, dict]:
    """Phase ``env``: T steps of sampling and stepping in one scan; the storage and this update's
    finished-episode count and return sum."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from ..backends import _jax_ops as ops

    spec = envs.get(st.env_id)
    discrete = spec.is_discrete
    w = st.window

    def body(carry, key):
        env, ep_ret, ring, finished, n_upd, sum_upd = carry
        action = sample(state["params"], env.obs, key, discrete)
        nxt = ops.env_step(spec, state["values"], env, action, state["seed"], spec.max_episode_steps, False)
        done = nxt.terminated | nxt.truncated
        ep_ret = ep_ret + nxt.reward
        # The last `window` finished returns, in the order the torch loop appends them (step, then env index):
        # env i's slot is its rank among this step's finished envs; only the last `window` of them are kept.
        rank = jnp.cumsum(done.astype(jnp.int32)) - 1
        count = done.sum().astype(jnp.int32)
        keep = done & (count - 1 - rank < w)
        slot = jnp.where(keep, (finished + rank) % w, w)
        ring = ring.at[slot].set(ep_ret, mode="drop")
        rec = {"obs": env.obs, "actions": action, "rewards": nxt.reward, "terminated": nxt.terminated,
               "truncated": nxt.truncated, "final_obs": nxt.final_obs}  # fmt: skip
        n_upd = n_upd + count
        sum_upd = sum_upd + jnp.where(done, ep_ret, 0.0).sum()
        return (nxt, jnp.where(done, 0.0, ep_ret), ring, finished + count, n_upd, sum_upd), rec

    key, sub = jax.random.split(state["key"])
    keys = jax.random.split(sub, st.ppo.num_steps)
    init = (state["env"], state["ep_ret"], state["ring"], state["finished"], jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.float32))  # fmt: skip
    (env, ep_ret, ring, finished, n_upd, sum_upd), store = lax.scan(body, init, keys)
    # Log-probs and values of the actions taken, with the weights that sampled them (one batched pass).
    store["logprobs"], _ = log_prob_entropy(state["params"], store["obs"], store["actions"], discrete)
    store["values"] = value(state["params"], store["obs"])
    new = {**state, "env": env, "ep_ret": ep_ret, "ring": ring, "finished": finished, "key": key}
    return new, {"store": store, "episodes": n_upd, "return_sum": sum_upd}


def bootstrap(st: Static, params: dict, final_obs: Any) -> Any:
    """Phase ``act``: V(obs each step reached); GAE zeroes it where the step terminated."""
    return value(params, final_obs)


def advantages(st: Static, store: dict, next_values: Any) -> tuple[Any, Any]:
    """Phase ``adv``: GAE as a reverse scan (the jax backend's op)."""
    from ..backends import _jax_ops as ops

    g = np.float32(st.ppo.gamma)
    return ops.gae(store["rewards"], store["values"], next_values, store["terminated"], store["truncated"], g,
                   np.float32(g * np.float32(st.ppo.gae_lambda)))  # fmt: skip


def update(st: Static, state: dict, store: dict, adv: Any, ret: Any, lr: Any) -> tuple[dict, Any]:
    """Phase ``update``: every epoch x minibatch of CleanRL's clipped PPO, Adam as PyTorch's, in one program."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    spec = envs.get(st.env_id)
    discrete = spec.is_discrete
    batch = st.ppo.num_envs * st.ppo.num_steps
    mb = batch // st.ppo.num_minibatches
    flat = {k: v.reshape((batch,) + v.shape[2:]) for k, v in store.items()}
    flat["adv"], flat["ret"] = adv.reshape(batch), ret.reshape(batch)
    b1, b2, eps = 0.9, 0.999, 1e-5

    def loss_fn(params, b):
        newlogp, entropy = log_prob_entropy(params, b["obs"], b["actions"], discrete)
        newv = value(params, b["obs"])
        logratio = newlogp - b["logprobs"]
        ratio = jnp.exp(logratio)
        approx_kl = jnp.mean((ratio - 1) - logratio)
        a = b["adv"]
        if st.ppo.norm_adv:
            a = (a - a.mean()) / (jnp.std(a, ddof=1) + 1e-8)
        pg = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 1 - st.ppo.clip_coef, 1 + st.ppo.clip_coef)).mean()
        if st.ppo.clip_vloss:
            vc = b["values"] + jnp.clip(newv - b["values"], -st.ppo.clip_coef, st.ppo.clip_coef)
            vl = 0.5 * jnp.maximum((newv - b["ret"]) ** 2, (vc - b["ret"]) ** 2).mean()
        else:
            vl = 0.5 * ((newv - b["ret"]) ** 2).mean()
        ent = entropy.mean()
        return pg - st.ppo.ent_coef * ent + st.ppo.vf_coef * vl, (pg, vl, ent, approx_kl)

    grad_fn = jax.grad(loss_fn, has_aux=True)
    tmap = jax.tree_util.tree_map

    def minibatch(carry, idx):
        params, m, v, t = carry
        grads, aux = grad_fn(params, tmap(lambda x: x[idx], flat))
        if discrete:  # the discrete actor has no log-std to train (PyTorch: requires_grad=False)
            grads = {**grads, "log_std": jnp.zeros_like(grads["log_std"])}
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        coef = jnp.minimum(1.0, st.ppo.max_grad_norm / (norm + 1e-6))
        grads = tmap(lambda g: g * coef, grads)
        t = t + 1
        m = tmap(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = tmap(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        params = tmap(lambda p, m_, v_: p - (lr / bc1) * m_ / (jnp.sqrt(v_) / jnp.sqrt(bc2) + eps), params, m, v)
        return (params, m, v, t), aux

    def epoch(carry, key):
        perm = jax.random.permutation(key, batch).reshape(st.ppo.num_minibatches, mb)
        return lax.scan(minibatch, carry, perm)

    key, sub = jax.random.split(state["key"])
    carry = (state["params"], state["m"], state["v"], state["t"])
    (params, m, v, t), aux = lax.scan(epoch, carry, jax.random.split(sub, st.ppo.update_epochs))
    losses = jnp.stack([a[-1, -1] for a in aux])  # the last minibatch's, as the torch loop reports
    return {**state, "params": params, "m": m, "v": v, "t": t, "key": key}, losses


@lru_cache(maxsize=None)
def programs(st: Static) -> dict[str, Callable]:
    """The four compiled stages for ``st`` (jit caches the executables per process)."""
    jax = _jax()
    return {"rollout": jax.jit(partial(rollout, st)), "bootstrap": jax.jit(partial(bootstrap, st)),
            "advantages": jax.jit(partial(advantages, st)), "update": jax.jit(partial(update, st))}  # fmt: skip


def compile_all(st: Static, seed: int = 0) -> float:
    """Run every stage once on a throwaway state (compiling what this process has not); seconds taken."""
    jax = _jax()
    t0 = time.perf_counter()
    p = programs(st)
    state = init_state(st, seed)
    state, out = p["rollout"](state)
    nv = p["bootstrap"](state["params"], out["store"]["final_obs"])
    adv, ret = p["advantages"](out["store"], nv)
    state, losses = p["update"](state, out["store"], adv, ret, np.float32(1e-3))
    jax.block_until_ready(losses)
    return time.perf_counter() - t0


def _timed_update(p: dict[str, Callable], state: dict, lr: Any, timer: Any) -> tuple[dict, dict, Any]:
    """One update through the four programs ``p`` (one seed's or vmapped), each phase synchronised and timed
    on its own as the other stacks time theirs: the new state, the rollout's outputs and the losses."""
    import jax
    with timer("env"):
        state, out = p["rollout"](state)
        jax.block_until_ready(out)
    with timer("act"):
        nv = jax.block_until_ready(p["bootstrap"](state["params"], out["store"]["final_obs"]))
    with timer("adv"):
        adv, ret = jax.block_until_ready(p["advantages"](out["store"], nv))
    with timer("update"):
        state, loss_arr = p["update"](state, out["store"], adv, ret, lr)
        jax.block_until_ready(loss_arr)
    return state, out, loss_arr


# ---- one run, recorded as every other stack's --------------------------------------------------
@lru_cache(maxsize=None)
def _result_class(base: type) -> type:
    """The runner's record class (passed in: this module must not import the runner, which imports it)
    plus where this stack's phases are."""

    @dataclass
    class JaxRunResult(base):
        """A runner record plus where this stack's phases are (see :data:`PHASE_NOTE`)."""

        phase_note: str = PHASE_NOTE

    return JaxRunResult


def train_one(task: TaskConfig, spec: Any, seed: int, on_update: Callable[[int, int, float], None] | None = None,
              threads: int | None = None, *, result_class: type) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """One run of ``task`` on the jax stack with ``seed``: (result, the device's identity), as runner.train_one;
    ``result_class`` is the runner's RunResult (the record gets this stack's fields on top)."""
    from ..backends.registry import get_backend
    from ..identity import Target, device_info, machine_label
    from .ppo import PhaseTimer, record_update, window_mean

    jax = _jax()
    cfg = task.ppo
    st = Static.of(task)
    timer = PhaseTimer()
    t_start = time.perf_counter()
    with timer("setup"):
        b = get_backend("jax", spec.device)
        t0 = time.perf_counter()
        p = programs(st)
        compile_s = compile_all(st, seed)  # a no-op recompile-wise after prime(); absorbs any first-call cost
        compile_s = min(compile_s, time.perf_counter() - t0)
        state = init_state(st, seed)
        jax.block_until_ready(state)
    identity = device_info(b, Target(b.name, b.device_name), machine_label())
    recent: deque[float] = deque(maxlen=cfg.solve_window)
    episodes = global_step = 0
    curve: list[list[float]] = []
    losses = (math.nan,) * 4
    stop, update_i, T, N = "step budget", 0, cfg.num_steps, cfg.num_envs
    for update_i in range(1, task.num_updates + 1):
        with timer("other"):
            lr = np.float32(cfg.lr * (1.0 - (update_i - 1.0) / task.num_updates) if cfg.anneal_lr else cfg.lr)
        state, out, loss_arr = _timed_update(p, state, lr, timer)
        with timer("other"):
            n_new, total, ring, ret_sum, loss_host = jax.device_get(
                (out["episodes"], state["finished"], state["ring"], out["return_sum"], loss_arr))
            losses = tuple(float(x) for x in loss_host)
            global_step += T * N
            episodes = int(total)
            w = cfg.solve_window
            k = min(int(total), w)
            # The ring's last k entries in finishing order: slots (total - k .. total - 1) mod w.
            recent = deque((float(ring[i % w]) for i in range(int(total) - k, int(total))), maxlen=w)
            end = record_update(task, curve, update_i, global_step, time.perf_counter() - t_start, recent,
                                float(ret_sum) / int(n_new) if int(n_new) else math.nan, on_update)  # fmt: skip
        if end is not None:
            stop = end
            break
    wall = time.perf_counter() - t_start
    converged = stop == "converged"
    result = _result_class(result_class)(
        task=task.env_id, stack=spec.label, mode=spec.mode, backend="jax", device_key=identity["device_key"],
        hardware_key=identity["hardware_key"], agent_device=b.describe()["jax_device"], seed=seed,
        converged=converged, stop_reason=stop, env_steps=global_step,
        steps_to_converge=global_step if converged else None, updates=update_i, wall_s=round(wall, 6),
        device_hours=wall / 3600 if converged else None, steps_per_s=global_step / wall,
        final_return=window_mean(recent), episodes=episodes,
        phases={k: round(v, 6) for k, v in timer.seconds.items()},
        update_parts={k: round(v, 6) for k, v in timer.parts.items()},
        untimed_s=round(wall - sum(timer.seconds.values()), 6), compile_s=round(compile_s, 6),
        losses=dict(zip(("pg", "v", "entropy", "approx_kl"), losses)),
        losses_finite=all(math.isfinite(x) for x in losses), curve=curve,
        device_seconds_per_policy=round(wall, 6) if converged else None,
    )  # fmt: skip
    return result, identity


__all__ = ["PHASE_NOTE", "Static", "compile_all", "init_state", "programs", "train_one"]
