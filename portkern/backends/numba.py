"""The Numba backend: the CUDA kernels written with Numba-CUDA (portkern/backends/_numba), on a GPU
or in Numba's CUDA simulator. This module is the mechanism: registration, device, arrays, launches."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _abi
from .._kernels import mlp_build_width
from ..envs.base import EnvSpec
from ._cuda_common import MAX_PARTIALS as _MAX_PARTIALS
from ._cuda_common import one_line, resolve_device
from .base import AUTORESET_MODES, Backend, EnvBuffers, Probe
from .registry import register

try:
    import numba
    from numba import cuda
except ImportError:
    numba = cuda = None
    _IMPORT_ERROR = "numba-cuda is not installed: pip install 'portkern[cuda]'"
except Exception as exc:  # e.g. numba.cuda against a NumPy it does not support (np.row_stack is gone)
    numba = cuda = None
    _IMPORT_ERROR = " ".join(f"numba.cuda failed to import: {type(exc).__name__}: {exc}".split())
else:
    _IMPORT_ERROR = ""



def _same(a: Any) -> Any:
    """What a Numba launch takes for an array argument (the ABI's pointer): the array itself."""
    return a


def _simulator() -> bool:
    return bool(numba is not None and numba.config.ENABLE_CUDASIM)


def _kernels() -> Any:
    # Imported on first use: the kernel package imports numba.cuda, which may be missing or broken.
    from . import _numba

    return _numba


def _gpu_names() -> list[str]:
    names = []
    for dev in cuda.list_devices():
        name = dev.name
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def _array_types() -> tuple[type, ...]:
    mod = cuda.devicearray
    return tuple(getattr(mod, n) for n in ("DeviceNDArray", "FakeCUDAArray") if hasattr(mod, n))


def _numba_cuda_version() -> str:
    try:
        from importlib.metadata import version

        return version("numba-cuda")
    except Exception:
        return "unknown"


@register
class NumbaBackend(Backend):
    name = "numba"
    order = 30
    extra = "cuda"
    import_error = _IMPORT_ERROR

    @classmethod
    def probe(cls) -> Probe:
        if cuda is None:
            return Probe(False, _IMPORT_ERROR)
        versions = {"numba": numba.__version__, "numba_cuda": _numba_cuda_version()}
        if _simulator():
            return Probe(True, devices=("CUDA simulator",), simulator=True, versions=versions)
        if cuda.is_available():
            return Probe(True, devices=tuple(_gpu_names()), versions=versions)
        try:
            cuda.current_context()
            why = "no CUDA GPU found"
        except Exception as exc:
            why = one_line(exc)
        return Probe(False, f"numba-cuda found no CUDA GPU/driver ({why}); "
                            f"set NUMBA_ENABLE_CUDASIM=1 to run in Numba's CUDA simulator")  # fmt: skip

    def __init__(self, device: str | None = None) -> None:
        self.simulator = _simulator()
        if self.simulator:
            # One simulated device: any selector (PORTKERN_DEVICE may name an OpenCL platform) maps to it.
            self.device_id = 0
            self.device_name = "CUDA simulator"
            self.compute_capability = ""
            self._sm_count = 1
        else:
            names = _gpu_names()
            self.device_id = resolve_device(device, names)
            cuda.select_device(self.device_id)
            dev = cuda.get_current_device()
            self.device_name = names[self.device_id]
            self.compute_capability = "{}.{}".format(*dev.compute_capability)
            self._sm_count = int(dev.MULTIPROCESSOR_COUNT)
        self.supports_float64 = True
        # The simulator runs one Python thread per CUDA thread, so it gets small blocks.
        #: threads per block for per-env and elementwise kernels; set it to re-tune.
        self.block_size: int = 32 if self.simulator else 256
        #: threads per block of normalize's reductions (a power of two).
        self.reduce_block_size: int = 32 if self.simulator else 256

    def describe(self) -> dict[str, str]:
        info = {"backend": self.name, "device": self.device_name, "vendor": "NVIDIA",
                "numba": numba.__version__, "numba_cuda": _numba_cuda_version(),
                "simulator": str(self.simulator)}  # fmt: skip
        if not self.simulator:
            info["compute_capability"] = self.compute_capability
            try:
                info["cuda_driver"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
                info["cuda_runtime"] = ".".join(map(str, cuda.runtime.get_version()))
            except Exception as exc:  # versions are metadata; never fail a benchmark over them
                info["cuda_versions"] = one_line(exc)
        return info

    def device_kind(self) -> str:
        # Numba-CUDA drives CUDA GPUs; its simulator runs on the host (reports mark it "simulator").
        return "cpu" if self.simulator else "gpu"

    def synchronize(self) -> None:
        cuda.synchronize()

    def memory_limits(self) -> tuple[int | None, int | None] | None:
        if self.simulator:  # host memory, as NumPy sees it
            return None
        with cuda.gpus[self.device_id]:
            free, total = cuda.current_context().get_memory_info()
        # CUDA has no per-allocation cap below the memory that is free now.
        return int(free), int(total)

    def _grid(self, n: int, block: int | None = None) -> tuple[int, int]:
        block = block or self.block_size
        return max(1, (n + block - 1) // block), block

    def _params(self, spec: EnvSpec, params: Any) -> Any:
        """The env's params as its kernels take them: the env's NamedTuple, built once per value.

        Passed by value (see _numba.common.params_type), so there is nothing to upload; keyed by
        the env too, as two envs' records could hold the same bytes.
        """
        return self._cache("params", (spec.kernel, params.key), lambda: _kernels().params_value(spec, params))

    # ---- arrays -------------------------------------------------------------------------------
    def zeros(self, shape, dtype):
        return cuda.to_device(np.zeros(shape, dtype=dtype))

    def empty(self, shape, dtype):
        return cuda.device_array(tuple(shape), np.dtype(dtype))

    def from_host(self, a):
        return cuda.to_device(np.require(a, requirements="C"))  # a 0-d array stays 0-d

    def to_host(self, a):
        return a.copy_to_host()

    def write(self, dst, src):
        dst.copy_to_device(np.ascontiguousarray(src, dtype=dst.dtype))

    @classmethod
    def owns(cls, a: Any) -> bool:
        return cuda is not None and isinstance(a, _array_types())

    @staticmethod
    def _contiguous(a: Any) -> bool:
        return bool(a.is_c_contiguous())  # Numba device arrays have no .flags.c_contiguous

    # ---- environments ------------------------------------------------------------------------
    @classmethod
    def missing_env_kernel(cls, spec: EnvSpec) -> str | None:
        # The env's device functions are a module named after its kernel stem, like its .cl and .cu files.
        import importlib.util

        if importlib.util.find_spec(f"{__package__}._numba.{spec.kernel}") is None:
            return f"{spec.id} has no Numba kernel yet (portkern/backends/_numba/{spec.kernel}.py)"
        return None

    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        n = self._check_env(spec, bufs, params)
        k = _kernels().env_kernels(spec, params.dtype)
        values = {"params": self._params(spec, params), "seed": seed,
                  "fresh": int(bool(fresh)), "n": n}  # fmt: skip
        k.reset[self._grid(n)](*_abi.pack(_abi.env_entry(spec.kernel, "reset"), values, _same, params.dtype, env=bufs))

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        # The per-step hot path, as on every backend: the buffers are the VectorEnv's own, checked by env_reset.
        n = int(bufs.steps.shape[0])
        actions = self._actions_on_device(actions, n, spec.action_dtype, spec.action_dim)
        k = _kernels().env_kernels(spec, params.dtype)
        values = {"actions": actions, "params": self._params(spec, params), "seed": seed,
                  "max_steps": max_steps, "autoreset_mode": AUTORESET_MODES[autoreset], "n": n}  # fmt: skip
        k.step[self._grid(n)](*_abi.pack(_abi.env_entry(spec.kernel, "step"), values, _same, params.dtype, env=bufs))

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        n = self._check_env(spec, bufs, params)
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        steps = out.steps
        k = _kernels().env_kernels(spec, params.dtype, self._mlp_width(policy.kind, hidden))
        # Time-major [T, N(, d)] buffers as rows t * N + i, so the kernel indexes one flat row per step.
        rows = steps * n
        flat = {name: a.reshape((rows, *a.shape[2:]))  # obs [T, N, d] and Box actions [T, N, A] keep a row
                for name, a in _abi.rollout_values(out).items()}
        pack = _abi.packer(_abi.env_entry(spec.kernel, "rollout"), _same, params.dtype)
        args = list(pack({**flat, "params": self._params(spec, params), "policy": policy_params,
                          "policy_kind": policy.kind, "hidden": hidden, "seed": seed, "max_steps": max_steps,
                          "autoreset_mode": AUTORESET_MODES[autoreset], "t0": 0, "t_count": 0, "n": n}, env=bufs))  # fmt: skip
        i_t0, i_count = pack.index("t0"), pack.index("t_count")
        # ceil(T / steps_per_launch) launches; each moves the time window (t0, t_count) on.
        for t0 in range(0, steps, steps_per_launch):
            args[i_t0], args[i_count] = np.int32(t0), np.int32(min(steps_per_launch, steps - t0))
            k.rollout[self._grid(n)](*args)

    #: Build MLP policies' kernels for their hidden width (policy.build's ``width``: the hidden layers'
    #: accumulators in registers), one build per width in use; False: the run-time-width build. The same
    #: results either way.
    fixed_mlp_width: bool = True

    def _mlp_width(self, kind: int, hidden: int) -> int | None:
        return mlp_build_width(kind, hidden) if self.fixed_mlp_width else None

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, _ = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = cuda.device_array((n, out_dim), np.float32)
        if n:
            fn = _kernels().policy_kernels(np.dtype(obs.dtype).str, self._mlp_width(1, hidden)).mlp_forward
            fn[self._grid(n)](policy_params, np.int32(hidden), obs, out)
        return out

    # ---- rollout buffer ops (arguments validated by portkern.buffer: launches only) -----------
    def _buffers(self, dtype: np.dtype) -> Any:
        return _kernels().buffer_kernels(np.dtype(dtype).str, self.reduce_block_size)

    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        T = rewards.dtype.type
        self._buffers(rewards.dtype).gae[self._grid(rewards.shape[1])](
            rewards, values, next_values, terminated, truncated, advantages, returns, T(gamma), T(T(gamma) * T(lam))
        )  # fmt: skip

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        per_step = len(bootstrap.shape) == 2
        boot = bootstrap if per_step else bootstrap.reshape(1, bootstrap.shape[0])
        self._buffers(rewards.dtype).returns[self._grid(rewards.shape[1])](
            rewards, terminated, truncated, boot, out, rewards.dtype.type(gamma), np.int32(per_step)
        )

    def normalize(self, x, out, eps):
        n = x.size
        if n == 0:
            return
        wg = self.reduce_block_size
        k = self._buffers(x.dtype)
        # Partials allocated once at the largest block count; stats once per dtype.
        pcount = self._scratch("normalize.count", (_MAX_PARTIALS,), np.uint32)
        pmean = self._scratch("normalize.mean", (_MAX_PARTIALS,), np.float64)
        pm2 = self._scratch("normalize.m2", (_MAX_PARTIALS,), np.float64)
        stats = self._scratch("normalize.stats", (2,), x.dtype)
        # Enough blocks to fill the device a few times over; each thread folds a grid-stride slice.
        blocks = max(1, min((n + wg - 1) // wg, 8 * self._sm_count, _MAX_PARTIALS))
        flat, flat_out = x.reshape(n), out.reshape(n)
        k.norm_partial[blocks, wg](flat, pcount, pmean, pm2)
        k.norm_finalize[1, wg](pcount, pmean, pm2, stats, np.int32(blocks))
        k.norm_apply[self._grid(n)](flat, flat_out, stats, x.dtype.type(eps), np.int32(n))

    def gather(self, x, indices, out):
        if indices.shape[0] == 0:
            return
        row_len = math.prod(x.shape[1:])
        # Rows as flat element runs: one kernel serves every dtype and trailing shape.
        xf, of = x.reshape(x.shape[0], row_len), out.reshape(out.shape[0], row_len)
        _kernels().copy_kernels().gather[self._grid(indices.shape[0] * row_len)](xf, indices, of)

    # ---- validation on the device (before any launch that would use the data) ---------------
    def index_range(self, indices):
        # Atomic min/max into two words: validating actions every step must not copy them to the host.
        self._check_array(indices, "indices")
        n = indices.size
        if n == 0:
            raise ValueError("indices: empty array has no range")
        out = self._scratch("index_range", (2,), np.int64)
        self.write(out, np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min], np.int64))
        _kernels().copy_kernels().index_range[self._grid(n)](indices.reshape(n), out)
        lo, hi = self.to_host(out)
        return int(lo), int(hi)

    def all_finite(self, a):
        self._check_array(a, "a")
        n = a.size
        if n == 0:
            return True
        flag = self._scratch("all_finite", (1,), np.int32)
        self.write(flag, np.zeros(1, np.int32))
        _kernels().copy_kernels().any_nonfinite[self._grid(n)](a.reshape(n), flag)
        return not self.to_host(flag)[0]
