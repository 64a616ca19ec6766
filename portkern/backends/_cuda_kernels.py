"""The launches of the CUDA C kernels (kernels/cuda/*.cu), written once for every backend that runs them.

Two backends run the same .cu files: cupy (NVRTC, on an NVIDIA GPU) and cuda_host (the host
compiler, on the CPU, a correctness harness). Both get their ops from :class:`CudaKernels`, so the
argument lists, build options and launch shapes the harness checks on a CPU-only machine are the
ones CuPy sends to the GPU. A subclass supplies the arrays and three hooks: ``_build`` (source and
options -> a module), ``_function`` (module, name -> a kernel) and ``_run`` (one launch).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._kernels import load_source
from ..envs.base import EnvSpec
from .base import AUTORESET_MODES, Backend, EnvBuffers

#: ``REAL`` of each float build (double builds also define PK_DOUBLE, as kernels/README.md says).
REAL_OPTIONS = {
    np.dtype(np.float32): ("-DREAL=float",),
    np.dtype(np.float64): ("-DREAL=double", "-DPK_DOUBLE=1"),
}
#: gather only copies bits, so it runs any element type through the build of a type of the same size.
COPY_UNITS = {8: np.dtype(np.float64), 4: np.dtype(np.float32), 1: np.dtype(np.uint8)}
#: Every build's ``REAL``: the float builds and gather's one-byte copy unit.
DTYPE_OPTIONS = {**REAL_OPTIONS, np.dtype(np.uint8): ("-DREAL=uchar",)}
MAX_PARTIALS = 1024  # normalize's per-block partials; the scratch is allocated once at this size


class CudaKernels(Backend):
    """Every op of the contract as launches of the kernels in kernels/cuda (a thread per env or element)."""

    #: threads per block for elementwise and per-env kernels; set it on an instance to re-tune.
    block_size: int = 256
    #: threads per block of normalize's reductions (PK_WG, a power of two).
    reduce_block_size: int = 256
    #: most blocks of normalize's partial pass (each thread folds a grid-stride slice).
    max_reduce_blocks: int = MAX_PARTIALS

    # ---- hooks --------------------------------------------------------------------------------
    def _build_options(self, dtype: np.dtype) -> tuple[str, ...]:
        """Compiler options of a build whose ``REAL`` is ``dtype``."""
        return DTYPE_OPTIONS[np.dtype(dtype)]

    def _build(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        raise NotImplementedError

    def _function(self, module: Any, kernel: str) -> Any:
        raise NotImplementedError

    def _run(self, fn: Any, grid: int, block: int, args: tuple) -> None:
        raise NotImplementedError

    def _empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.zeros(shape, dtype)

    # ---- programs and launches ----------------------------------------------------------------
    def _kernel(self, filename: str, kernel: str, dtype: Any, extra: tuple[str, ...] = ()) -> Any:
        """Kernel ``kernel`` of ``kernels/cuda/<filename>`` built for ``dtype``, fetched once per instance."""

        def fetch() -> Any:
            source = load_source("cuda", filename)
            options = self._build_options(dtype) + extra
            module = self._program(source, options, lambda: self._build(filename, source, options))
            return self._function(module, kernel)

        return self._cache("kernels", (filename, kernel, np.dtype(dtype).str, extra), fetch)

    def _launch(self, fn: Any, work_items: int, args: tuple, block: int | None = None) -> None:
        block = block or self.block_size
        if work_items > 0:
            self._run(fn, (work_items + block - 1) // block, block, args)

    # ---- environments ------------------------------------------------------------------------
    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        n = self._check_env(spec, bufs, params)
        fn = self._kernel(f"{spec.kernel}.cu", f"pk_{spec.kernel}_reset", params.dtype)
        args = (bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs,
                self._device_params(params), np.uint32(seed), np.int32(bool(fresh)), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        # The hot path: VectorEnv made the buffers, so only the actions are checked here.
        n = int(bufs.steps.shape[0])
        actions = self._actions_on_device(actions, n, spec.action_dtype)
        fn = self._kernel(f"{spec.kernel}.cu", f"pk_{spec.kernel}_step", params.dtype)
        args = (bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, actions, bufs.obs, bufs.final_obs,
                bufs.reward, bufs.terminated, bufs.truncated, self._device_params(params), np.uint32(seed),
                np.int32(max_steps), np.int32(AUTORESET_MODES[autoreset]), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        n = self._check_env(spec, bufs, params)
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        steps = out.steps
        fn = self._kernel(f"{spec.kernel}.cu", f"pk_{spec.kernel}_rollout", params.dtype)
        head = (bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs,
                bufs.reward, bufs.terminated, bufs.truncated, self._device_params(params), policy_params,
                np.int32(policy.kind), np.int32(hidden), out.obs, out.actions, out.rewards, out.terminated,
                out.truncated, out.final_obs, np.uint32(seed), np.int32(max_steps),
                np.int32(AUTORESET_MODES[autoreset]))  # fmt: skip
        # ceil(T / steps_per_launch) launches; each moves the time window (t0, t_count) on.
        for t0 in range(0, steps, steps_per_launch):
            count = min(steps_per_launch, steps - t0)
            self._launch(fn, n, (*head, np.int32(t0), np.int32(count), np.int32(n)))

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, d = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = self._empty((n, out_dim), np.float32)
        fn = self._kernel("mlp.cu", "pk_mlp_forward", obs.dtype)
        args = (policy_params, np.int32(hidden), np.int32(d), np.int32(out_dim), obs, out, np.int32(n))
        self._launch(fn, n, args)
        return out

    # ---- rollout buffer ops ------------------------------------------------------------------
    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        for a, what in ((rewards, "rewards"), (values, "values"), (next_values, "next_values"),
                        (terminated, "terminated"), (truncated, "truncated"),
                        (advantages, "advantages"), (returns, "returns")):  # fmt: skip
            self._check_array(a, what)
        T = rewards.dtype.type
        steps, n = rewards.shape
        fn = self._kernel("gae.cu", "pk_gae", rewards.dtype)
        args = (rewards, values, next_values, terminated, truncated, advantages, returns,
                T(gamma), T(T(gamma) * T(lam)), np.int32(steps), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        for a, what in ((rewards, "rewards"), (terminated, "terminated"), (truncated, "truncated"),
                        (bootstrap, "bootstrap"), (out, "out")):  # fmt: skip
            self._check_array(a, what)
        T = rewards.dtype.type
        steps, n = rewards.shape
        fn = self._kernel("discounted_returns.cu", "pk_discounted_returns", rewards.dtype)
        args = (rewards, terminated, truncated, bootstrap, out, T(gamma),
                np.int32(bootstrap.ndim == 2), np.int32(steps), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def normalize(self, x, out, eps):
        self._check_array(x, "x")
        self._check_array(out, "out")
        T = x.dtype.type
        n = x.size
        if n == 0:
            return
        wg = self.reduce_block_size
        extra = (f"-DPK_WG={wg}",)
        partial_fn = self._kernel("normalize.cu", "pk_normalize_partial", x.dtype, extra)
        finalize_fn = self._kernel("normalize.cu", "pk_normalize_finalize", x.dtype, extra)
        apply_fn = self._kernel("normalize.cu", "pk_normalize_apply", x.dtype, extra)
        # Partials, allocated once at the largest block count; the moments are double in every build.
        pcount = self._scratch("pcount", (MAX_PARTIALS,), np.uint32)
        pmean = self._scratch("pmean", (MAX_PARTIALS,), np.float64)
        pm2 = self._scratch("pm2", (MAX_PARTIALS,), np.float64)
        stats = self._scratch("stats", (2,), x.dtype)
        blocks = max(1, min((n + wg - 1) // wg, self.max_reduce_blocks, MAX_PARTIALS))
        self._run(partial_fn, blocks, wg, (x, pcount, pmean, pm2, np.int32(n)))
        self._run(finalize_fn, 1, wg, (pcount, pmean, pm2, stats, np.int32(blocks)))
        self._launch(apply_fn, n, (x, out, stats, T(eps), np.int32(n)))

    def gather(self, x, indices, out):
        self._check_array(x, "x")
        self._check_array(indices, "indices")
        self._check_array(out, "out")
        kernel = {np.dtype(np.int64): "pk_gather", np.dtype(np.int32): "pk_gather_i32"}.get(
            np.dtype(indices.dtype)
        )
        if kernel is None:
            raise TypeError(f"indices: expected int64 or int32, got {indices.dtype}")
        unit = next(u for u in COPY_UNITS if x.dtype.itemsize % u == 0)
        row_len = math.prod(x.shape[1:]) * x.dtype.itemsize // unit
        total = row_len * indices.size
        if total == 0:
            return
        fn = self._kernel("gather.cu", kernel, COPY_UNITS[unit])
        self._launch(fn, total, (x, indices, out, np.int32(row_len), np.int32(indices.size)))
