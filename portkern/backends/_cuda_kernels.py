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

from .. import _abi
from .._kernels import load_source, missing_source, mlp_width_option
from ..envs.base import EnvSpec
from ._cuda_common import MAX_PARTIALS
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


def _same(a: Any) -> Any:
    """What a CUDA launch takes for an array argument (the ABI's pointer): the array itself."""
    return a


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
        return self.empty(shape, dtype)

    # ---- programs and launches ----------------------------------------------------------------
    def _kernel(self, filename: str, kernel: str, dtype: Any, extra: tuple[str, ...] = ()) -> Any:
        """Kernel ``kernel`` of ``kernels/cuda/<filename>`` built for ``dtype``, fetched once per instance."""

        def fetch() -> Any:
            source = load_source("cuda", filename)
            options = self._build_options(dtype) + extra
            module = self._program(source, options, lambda: self._build(filename, source, options))
            return self._function(module, kernel)

        return self._cache("kernels", (filename, kernel, np.dtype(dtype).str, extra), fetch)

    #: Build MLP policies' kernels for their hidden width (pk_policy.cuh's PK_MLP_HIDDEN: the hidden layers'
    #: accumulators in registers, not the 512-byte local-memory frame of the run-time width), one build
    #: per width in use. False: the run-time-width build every policy shares (the benchmark's labelled
    #: comparison row). The same results either way.
    fixed_mlp_width: bool = True

    def _mlp_width(self, kind: int, hidden: int) -> tuple[str, ...]:
        return mlp_width_option(kind, hidden, fixed=self.fixed_mlp_width)

    def _launch(self, fn: Any, work_items: int, args: tuple, block: int | None = None) -> None:
        block = block or self.block_size
        if work_items > 0:
            self._run(fn, (work_items + block - 1) // block, block, args)

    # ---- environments ------------------------------------------------------------------------
    @classmethod
    def missing_env_kernel(cls, spec: EnvSpec) -> str | None:
        return missing_source(spec, "cuda", ".cu", "CUDA C")

    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        n = self._check_env(spec, bufs, params)
        name = _abi.env_entry(spec.kernel, "reset")
        fn = self._kernel(f"{spec.kernel}.cu", name, params.dtype, spec.define_options)
        values = {"params": self._device_params(params), "seed": seed,
                  "fresh": int(bool(fresh)), "n": n}  # fmt: skip
        self._launch(fn, n, _abi.pack(name, values, _same, params.dtype, env=bufs))

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        # The hot path: VectorEnv made the buffers, so only the actions are checked here.
        n = int(bufs.steps.shape[0])
        actions = self._actions_on_device(actions, n, spec.action_dtype, spec.action_dim)
        name = _abi.env_entry(spec.kernel, "step")
        fn = self._kernel(f"{spec.kernel}.cu", name, params.dtype, spec.define_options)
        values = {"actions": actions, "params": self._device_params(params), "seed": seed,
                  "max_steps": max_steps, "autoreset_mode": AUTORESET_MODES[autoreset], "n": n}  # fmt: skip
        self._launch(fn, n, _abi.pack(name, values, _same, params.dtype, env=bufs))

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        n = self._check_env(spec, bufs, params)
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        steps = out.steps
        name = _abi.env_entry(spec.kernel, "rollout")
        options = spec.define_options + self._mlp_width(policy.kind, hidden)
        fn = self._kernel(f"{spec.kernel}.cu", name, params.dtype, options)
        pack = _abi.packer(name, _same, params.dtype)
        args = list(pack({**_abi.rollout_values(out), "params": self._device_params(params),
                          "policy": policy_params, "policy_kind": policy.kind, "hidden": hidden, "seed": seed,
                          "max_steps": max_steps, "autoreset_mode": AUTORESET_MODES[autoreset], "t0": 0,
                          "t_count": 0, "n": n}, env=bufs))  # fmt: skip
        i_t0, i_count = pack.index("t0"), pack.index("t_count")
        # ceil(T / steps_per_launch) launches; each moves the time window (t0, t_count) on.
        for t0 in range(0, steps, steps_per_launch):
            args[i_t0], args[i_count] = np.int32(t0), np.int32(min(steps_per_launch, steps - t0))
            self._launch(fn, n, tuple(args))

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, d = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = self._empty((n, out_dim), np.float32)
        fn = self._kernel("mlp.cu", "pk_mlp_forward", obs.dtype, self._mlp_width(1, hidden))
        values = {"policy": policy_params, "hidden": hidden, "obs_dim": d, "out_dim": out_dim, "obs": obs,
                  "out": out, "n": n}  # fmt: skip
        self._launch(fn, n, _abi.pack("pk_mlp_forward", values, _same, obs.dtype))
        return out

    # ---- rollout buffer ops (arguments validated by portkern.buffer: launches only) -----------
    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        T = rewards.dtype.type
        steps, n = rewards.shape
        fn = self._kernel("gae.cu", "pk_gae", rewards.dtype)
        args = {"rewards": rewards, "values": values, "next_values": next_values, "terminated": terminated,
                "truncated": truncated, "advantages": advantages, "returns": returns, "gamma": gamma,
                "gamma_lam": T(gamma) * T(lam), "T": steps, "N": n}  # fmt: skip
        self._launch(fn, n, _abi.pack("pk_gae", args, _same, rewards.dtype))

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        steps, n = rewards.shape
        fn = self._kernel("discounted_returns.cu", "pk_discounted_returns", rewards.dtype)
        args = {"rewards": rewards, "terminated": terminated, "truncated": truncated, "bootstrap": bootstrap,
                "out": out, "gamma": gamma, "per_step_bootstrap": int(bootstrap.ndim == 2), "T": steps, "N": n}
        self._launch(fn, n, _abi.pack("pk_discounted_returns", args, _same, rewards.dtype))

    def normalize(self, x, out, eps):
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
        values = {"x": x, "out": out, "pcount": pcount, "pmean": pmean, "pm2": pm2, "stats": stats, "eps": eps,
                  "n": n, "groups": blocks}  # fmt: skip
        self._run(partial_fn, blocks, wg, _abi.pack("pk_normalize_partial", values, _same, x.dtype))
        self._run(finalize_fn, 1, wg, _abi.pack("pk_normalize_finalize", values, _same, x.dtype))
        self._launch(apply_fn, n, _abi.pack("pk_normalize_apply", values, _same, x.dtype))

    def gather(self, x, indices, out):
        kernel = "pk_gather_i32" if np.dtype(indices.dtype) == np.int32 else "pk_gather"
        unit = next(u for u in COPY_UNITS if x.dtype.itemsize % u == 0)
        row_len = math.prod(x.shape[1:]) * x.dtype.itemsize // unit
        total = row_len * indices.size
        if total == 0:
            return
        fn = self._kernel("gather.cu", kernel, COPY_UNITS[unit])
        values = {"x": x, "indices": indices, "out": out, "row_len": row_len, "B": indices.size}
        self._launch(fn, total, _abi.pack(kernel, values, _same))
