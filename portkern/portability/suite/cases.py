"""The suite's cases made ready to time: env steps, buffer ops, rollouts (rollouts.py) and the device copy
that measures the bandwidth ceiling; inputs made and uploaded beforehand, one public call per ``run``.

Each ``run`` is the call a user makes, ``env.step(actions)``, ``portkern.buffer.gae(...)`` (argument
checks, outputs from the backend's per-op buffer) or ``env.rollout(...)``, never the backend op behind
it: a ratio between backends is then the one a user gets. The backend ops with preallocated outputs
(the kernels alone) are timed by bench/cpu/buffer_peers.py, as rows of their own."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ... import buffer
from ...backends import Backend, get_backend
from ..names import env_spec
from .kernels import KERNELS, ROLLOUT_T
from .prepared import PARITY_STEPS, SEED, Parity, Prepared, _compare
from .rollouts import _prepare_rollout, make_env, reset_staggered, structure_info

BUFFER_T = 128  # rollout length of the [T, N] buffer cases; their size is T*N elements
GATHER_FEATURES = 4  # row length of the gathered [M, F] array (CartPole's observation)
GAMMA, LAM, EPS = 0.99, 0.95, 1e-8


def _step_bytes(env_id: str) -> int:
    spec = env_spec(env_id)
    # state read+write, steps read+write, action, obs + final_obs, reward, terminated + truncated
    return 2 * 4 * spec.state_dim + 2 * 4 + 4 + 2 * 4 * spec.obs_dim + 4 + 2


def _host_actions(env_id: str, n: int, rng: np.random.Generator) -> np.ndarray:
    spec = env_spec(env_id)
    if spec.is_discrete:
        return rng.integers(0, spec.discrete_actions, n).astype(np.int32)
    # A 1-wide Box takes [N]; a wider one [N, action_dim] (the step checks the shape).
    shape = (n,) if spec.action_dim == 1 else (n, spec.action_dim)
    return rng.uniform(-spec.action_high, spec.action_high, shape).astype(np.float32)


def _prepare_step(b: Backend, env_id: str, n: int) -> Prepared:
    """``env_id`` is a step kernel's env part, structural values included (``Chain-v0/links=10``)."""
    env = make_env(env_id, n, backend=b, seed=SEED)
    rng = np.random.default_rng(SEED)
    acts = [_host_actions(env_id, n, rng) for _ in range(PARITY_STEPS)]
    dev_acts = b.from_host(acts[0])
    reset_staggered(env)

    def run() -> None:  # the public step, its range check of device actions included
        env.step(dev_acts)

    def check() -> Parity:
        ref = make_env(env_id, n, backend="numpy", seed=SEED)
        # Both envs return their own buffers, reused by the next call: copy before stepping on.
        parts = [("reset obs", b.to_host(env.reset(seed=SEED)), ref.reset().copy())]
        for t, a in enumerate(acts):
            got, want = env.step(b.from_host(a)), ref.step(a)
            for name, g, w in zip(("obs", "reward", "terminated", "truncated"), got, want):
                parts.append((f"step {t} {name}", b.to_host(g), w.copy()))
            parts.append((f"step {t} final_obs", b.to_host(env.final_obs), ref.final_obs.copy()))
        reset_staggered(env)  # the timed steps start from the staggered episodes again
        return _compare(parts)

    return Prepared(run, check, n, n * _step_bytes(env_id), "steps", (n,), structure_info(env_spec(env_id)))


def _buffer_case(kernel: str, size: int, rng: np.random.Generator):
    """Host inputs, the public call ``call(backend, inputs) -> outputs`` (portkern.buffer as a user calls
    it: no ``out=``), the compulsory bytes of one call, and the case's shape."""
    f32 = np.float32
    if kernel == "gather":
        m = size
        x = rng.standard_normal((m, GATHER_FEATURES)).astype(f32)
        idx = rng.permutation(m).astype(np.int32)  # one epoch of minibatches: every row once
        call = lambda b, i: (buffer.gather(i[0], i[1], backend=b),)  # noqa: E731
        return [x, idx], call, m * (4 + 2 * 4 * GATHER_FEATURES), (m, GATHER_FEATURES)
    t, n = BUFFER_T, max(1, size // BUFFER_T)
    shape = (t, n)

    def flags(p: float) -> np.ndarray:
        return rng.random(shape) < p

    if kernel == "gae":
        ins = [rng.standard_normal(shape).astype(f32) for _ in range(3)] + [flags(0.02), flags(0.01)]
        call = lambda b, i: buffer.gae(*i, gamma=GAMMA, lam=LAM, backend=b)  # noqa: E731
        return ins, call, t * n * 22, shape
    if kernel == "discounted_returns":
        ins = [rng.standard_normal(shape).astype(f32), flags(0.02), flags(0.01), rng.standard_normal(n).astype(f32)]
        call = lambda b, i: (buffer.discounted_returns(*i, gamma=GAMMA, backend=b),)  # noqa: E731
        return ins, call, t * n * 10 + 4 * n, shape
    if kernel == "normalize":
        ins = [(3.0 * rng.standard_normal(shape) + 1.5).astype(f32)]
        call = lambda b, i: (buffer.normalize(i[0], EPS, backend=b),)  # noqa: E731
        return ins, call, t * n * 8, shape
    raise ValueError(f"kernel: unknown kernel {kernel!r}; valid: {', '.join(KERNELS)}")


def _prepare_buffer(b: Backend, kernel: str, size: int) -> Prepared:
    ins, call, nbytes, shape = _buffer_case(kernel, size, np.random.default_rng(SEED))
    dev_ins = [b.from_host(a) for a in ins]
    ref = get_backend("numpy")

    def run() -> None:
        call(b, dev_ins)

    def check() -> Parity:
        # Host copies first: the results are the backend's per-op buffers (the numpy reference's,
        # when b is the numpy backend), which the reference call below writes again.
        got = [np.array(b.to_host(g)) for g in call(b, dev_ins)]
        want = [np.array(w) for w in call(ref, ins)]
        return _compare([(f"out{j}", g, w) for j, (g, w) in enumerate(zip(got, want))])

    items = int(np.prod(shape[:1])) if kernel == "gather" else int(np.prod(shape))
    return Prepared(run, check, items, nbytes, "rows" if kernel == "gather" else "elements", shape)


def prepare(b: Backend, kernel: str, size: int, config: dict[str, Any] | None = None,
            steps: int = ROLLOUT_T) -> Prepared:  # fmt: skip
    """Inputs made and uploaded beforehand; ``run`` is one public call of the case under test.

    ``config``'s case knobs (``steps_per_launch``) and ``steps`` (a rollout's T) concern rollouts only.
    """
    if kernel.startswith("step:"):
        return _prepare_step(b, kernel.split(":", 1)[1], size)
    if kernel.startswith("rollout:"):
        return _prepare_rollout(b, kernel, size, steps, config)
    if kernel == "copy":
        return prepare_copy(b, size)
    return _prepare_buffer(b, kernel, size)


def device_copy(dst: Any, src: Any) -> None:
    """Device-to-device copy of a native array (the contract has none; dispatch on the array's API)."""
    if hasattr(dst, "copy_to_device"):  # Numba DeviceNDArray: copy_to_device of a device array stays on it
        dst.copy_to_device(src)
    elif hasattr(dst, "queue") and hasattr(dst, "base_data"):  # pyopencl: an explicit buffer copy
        import pyopencl as cl

        cl.enqueue_copy(dst.queue, dst.base_data, src.base_data, byte_count=src.nbytes,
                        src_offset=src.offset, dst_offset=dst.offset)  # fmt: skip
    else:  # NumPy, CuPy
        dst[...] = src


def prepare_copy(b: Backend, nbytes: int) -> Prepared:
    n = nbytes // 4
    src = b.from_host(np.arange(n, dtype=np.float32))
    if b.immutable_arrays:
        # jax: no array to copy into; a device copy is a new array (read + write, as the in-place copy),
        # waited for here since the backend's synchronize knows only its own ops' results.
        made: list[Any] = [None]

        def run() -> None:
            made[0] = src.copy()
            made[0].block_until_ready()

        def copied() -> Any:
            return made[0]
    else:
        dst = b.zeros((n,), np.dtype(np.float32))

        def run() -> None:
            device_copy(dst, src)

        def copied() -> Any:
            return dst

    def check() -> Parity:
        run()
        return _compare([("copy", b.to_host(copied()), np.arange(n, dtype=np.float32))])

    return Prepared(run, check, n, 2 * n * 4, "bytes", (n,))


def copy_bandwidth(b: Backend, nbytes: int = 64 << 20, reps: int = 3) -> float:
    """A quick copy-bandwidth estimate (read + write bytes/s, best of ``reps``) for sizing the full ladder."""
    case = prepare_copy(b, nbytes)
    case.run()
    b.synchronize()
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        case.run()
        b.synchronize()
        best = min(best, time.perf_counter() - t0)
    return case.bytes / best
