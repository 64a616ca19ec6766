"""The JAX backend: a framework stack whose every op is one XLA program, on any JAX device.

No custom kernels: the env physics is the NumPy reference itself (``portkern/envs/*.py`` is
written against the array API standard and traces on jax arrays), and the rest — Philox,
autoreset, policies, buffer ops — is :mod:`portkern.backends._jax_ops`, compiled with
``jax.jit``: a step (physics, reset draws, autoreset) is one program, a fused rollout is one
``lax.scan`` with the policy inside, GAE and discounted returns are reverse scans. Arrays in,
arrays out, on the backend's device (``"cpu"``, ``"gpu"``/``"cuda"``, ``"rocm"``, ``"tpu"``,
with an index: ``"gpu:1"``), so a JAX training loop on this backend moves no data between libraries.

**Immutable arrays.** JAX arrays cannot be written in place, so where the backend contract writes
into a buffer this backend rebinds it: the env's buffers (``EnvBuffers``) and a rollout's
``RolloutBuffer`` fields are replaced by the new arrays, buffer ops return their results, and
:meth:`assign` (not :meth:`write`) stores host data. ``env.obs`` after a step is therefore a new
array each step; an array held from before the step keeps the old values.

**float64.** JAX computes in 32 bits unless ``jax_enable_x64`` is set. Creating this backend sets
it (``jax.config.update("jax_enable_x64", True)``), process-wide, so that ``dtype="float64"`` envs,
float64 buffers and int64 gather indices keep their dtypes as on every other backend. Code that
relies on JAX's 32-bit defaults should pass dtypes explicitly (portkern's own JAX code does). TPUs
have no float64 (``supports_float64`` is False there).

**FMA.** XLA contracts ``a * b + c`` into fused multiply-adds wherever the device has them (CPUs with
FMA3, every GPU), and no per-program option turns that off: results then agree with the reference to
an ulp, resets included, not bit for bit. ``XLA_FLAGS=--xla_cpu_max_isa=AVX``, set before JAX starts,
makes XLA:CPU emit no FMA, and the CPU results bit-identical; the test suite runs that way.

Compilation happens on the first call with new shapes, dtypes or static settings (env, autoreset
mode, policy, rollout length); a benchmark's warm-up call absorbs it.
"""

from __future__ import annotations

import os
import platform
from functools import partial
from typing import Any

import numpy as np

from .._paths import cache_root
from .._validate import dtype_of
from ..envs.base import EnvSpec
from ._cuda_common import one_line
from .base import AUTORESET_MODES, Backend, EnvBuffers, Probe
from .registry import register

_INSTALL_HINT = "pip install 'portkern[jax]' (CPU wheels; for GPUs and TPUs install jax as its docs say)"

try:  # this module is portkern.backends.jax; the absolute import is the real JAX
    import jax
    import jax.numpy as jnp

    from . import _jax_ops as ops
except ImportError as exc:
    jax = jnp = ops = None
    _IMPORT_ERROR = (f"jax is not installed: {_INSTALL_HINT}" if (exc.name or "").startswith("jax")
                     else f"jax backend failed to import: {one_line(exc)}")  # fmt: skip
except Exception as exc:  # a broken install (CUDA plugin mismatch) must not break portkern
    jax = jnp = ops = None
    _IMPORT_ERROR = f"jax failed to import: {one_line(exc)}"
else:
    _IMPORT_ERROR = ""

#: Device platform aliases a user may type (``"cuda"`` for NVIDIA GPUs, as torch spells it).
_ALIASES = {"cuda": "gpu", "rocm": "gpu", "host": "cpu"}


def _enable_x64() -> None:
    if not jax.config.read("jax_enable_x64"):
        jax.config.update("jax_enable_x64", True)


def _label(d: Any) -> str:
    if d.platform == "cpu":
        # The same name as the numpy backend's: the benchmark counts every CPU backend of a machine
        # as one device.
        return f"host CPU ({platform.machine() or 'unknown'})"
    return str(getattr(d, "device_kind", d.platform))


def _key(d: Any) -> str:
    return f"{d.platform}:{d.id}"


def _all_devices() -> list[Any]:
    found = []
    for kind in ("cpu", "gpu", "tpu"):
        try:
            found += jax.devices(kind)
        except RuntimeError:  # no such platform in this install
            pass
    return found or list(jax.devices())


#: XLA:CPU options of the fused rollout (one ``lax.scan``) on a CPU device. XLA's newer fusion emitters spend
#: most of a minute in LLVM on the scan's body: measured on a 2-core AMD EPYC (Zen 4), jax 0.10.2, CartPole at
#: N = 4,096, T = 128, the fused rollout compiled in 1.3 s with the classic emitters against 10.5 s with the
#: new ones, and ran in 122 against 170 ms (best of 7). The single step goes the other way (CartPole's
#: next_step step: 140 s with the classic emitters, seconds with the new), so it keeps XLA's defaults. The
#: results are the same (the parity suite compares the rollout with the single steps bit for bit).
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
_CPU_OPTIONS: dict[str, Any] | None = None


def _cpu_options() -> dict[str, Any]:
    """:data:`CPU_COMPILER_OPTIONS` where this jaxlib knows them (one tiny compile, once per process); older
    and newer XLAs that do not know an option compile with their defaults instead of failing."""
    global _CPU_OPTIONS
    if _CPU_OPTIONS is None:
        try:
            jax.jit(lambda x: x + 1, compiler_options=CPU_COMPILER_OPTIONS)(np.int32(1)).block_until_ready()
            _CPU_OPTIONS = dict(CPU_COMPILER_OPTIONS)
        except Exception:  # TypeError (no compiler_options in jit) or XLA's unknown-option error
            _CPU_OPTIONS = {}
    return _CPU_OPTIONS


def use_compilation_cache(path: str | os.PathLike[str] | None = None) -> str | None:
    """Keep XLA's compiled programs on disk across processes (JAX's persistent compilation cache), as
    Inductor keeps torch.compile's by default; the benchmark turns it on so that both compilers' warm runs
    compile from a cache. ``path`` defaults to ``$XDG_CACHE_HOME/portkern/jax`` (``~/.cache``). A cache the
    user configured (``JAX_COMPILATION_CACHE_DIR`` or ``jax_compilation_cache_dir``) is kept as it is; without
    jax, or where the directory cannot be made, nothing happens. Process-wide; returns the directory in use (None:
    no cache). Every program is
    cached, not only those over JAX's default 1 s of compile: most of an env's take less.

    Measured on the 2-core Xeon VM (jax 0.10.2): Chain-v0's step and fused rollout and CartPole's at N = 1,024,
    compiled and checked in a new process, 28.5 s without the cache, 6.8 s from it."""
    if jax is None:
        return None
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if current:
        return str(current)
    path = os.fspath(cache_root() / "jax" if path is None else path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # a read-only or full home: the run goes on without a cache, compiling as before
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


@register
class JaxBackend(Backend):
    """Every op one ``jax.jit`` program ("framework compiled": XLA fuses each op)."""

    name = "jax"
    order = 42
    extra = "jax"
    import_error = _IMPORT_ERROR
    # jax arrays cannot be written in place: the buffer ops return their results, out= is refused.
    immutable_arrays = True

    @classmethod
    def probe(cls) -> Probe:
        if jax is None:
            return Probe(False, _IMPORT_ERROR)
        try:  # touch the device, not just the import
            if int(jnp.ones(2, jnp.int32).sum()) != 2:
                raise RuntimeError("wrong result")
            devices = _all_devices()
        except Exception as exc:
            return Probe(False, f"jax found no usable device: {one_line(exc)}")
        return Probe(True, devices=tuple(_label(d) for d in devices), versions={"jax": jax.__version__})

    def __init__(self, device: str | None = None) -> None:
        _enable_x64()
        self.device = self._resolve(device)
        self.device_name = _label(self.device)
        self.supports_float64 = self.device.platform != "tpu"
        self._last: Any = None  # the newest result, for synchronize()
        self._rollout_options = _cpu_options() if self.device.platform == "cpu" else {}

    @staticmethod
    def _resolve(device: str | None) -> Any:
        """``None`` -> JAX's default device; ``"cpu"``, ``"gpu:1"``, ``"cuda"``; or (a substring of) a device name."""
        found = _all_devices()
        if device is None:
            return jax.devices()[0]
        key = device.strip().lower()
        kind, _, index = key.partition(":")
        kind = _ALIASES.get(kind, kind)
        same = [d for d in found if d.platform == kind]
        if same and (not index or index.isdigit()):
            i = int(index or 0)
            for d in same:
                if d.id == i or (not index and d is same[0]):
                    return d
        for d in found:
            if key and (key == _label(d).lower() or key in _label(d).lower()):
                return d
        listing = "; ".join(f"{_key(d)} ({_label(d)})" for d in found)
        raise ValueError(
            f"device: no jax device {device!r} here; devices: {listing}. Pass 'cpu', 'gpu' (or 'cuda'), "
            f"'tpu', with an index ('gpu:1'), or a device name"
        )

    def describe(self) -> dict[str, str]:
        return {"backend": self.name, "device": self.device_name, "jax_device": _key(self.device),
                "jax": jax.__version__, "jaxlib": getattr(jax.lib, "__version__", jax.__version__)}  # fmt: skip

    def device_kind(self) -> str:
        return {"cpu": "cpu", "gpu": "gpu"}.get(self.device.platform, "accelerator")

    def memory_limits(self) -> tuple[int | None, int | None] | None:
        try:
            limit = (self.device.memory_stats() or {}).get("bytes_limit")
        except Exception:  # CPU devices have no memory stats
            limit = None
        return None if not limit else (None, int(limit))

    def synchronize(self) -> None:
        # JAX dispatches asynchronously: wait for the newest result (earlier ones precede it).
        if self._last is not None:
            jax.block_until_ready(self._last)

    def _device_key(self) -> Any:
        return _key(self.device)

    def _done(self, result: Any) -> Any:
        self._last = result
        return result

    # ---- arrays -------------------------------------------------------------------------------
    def _check_dtype(self, dt: np.dtype) -> None:
        if dt.itemsize == 8 and dt.kind in "fc" and not self.supports_float64:
            raise TypeError(f"dtype: {self.device_name} has no {dt} (no double precision); use float32")

    def zeros(self, shape, dtype):
        dt = np.dtype(dtype)
        self._check_dtype(dt)
        return jax.device_put(jnp.zeros(tuple(shape), dt), self.device)

    def from_host(self, a):
        host = np.array(a, copy=True, order="C")
        self._check_dtype(host.dtype)
        return jax.device_put(host, self.device)

    def to_host(self, a):
        return np.array(jax.device_get(a), copy=True)

    def write(self, dst, src):
        raise TypeError(
            "dst: jax arrays are immutable and cannot be written in place; use backend.assign(dst, src), "
            "which returns the new array"
        )

    def assign(self, dst, src):
        host = np.ascontiguousarray(src, dtype=dtype_of(dst))
        if host.shape != tuple(dst.shape):
            raise ValueError(f"src: expected shape {tuple(dst.shape)}, got {host.shape}")
        return jax.device_put(host, self.device)

    @classmethod
    def owns(cls, a: Any) -> bool:
        return jax is not None and isinstance(a, jax.Array)

    @classmethod
    def array_device(cls, a: Any) -> str:
        return _key(next(iter(a.devices())))

    def holds(self, a: Any) -> bool:
        return self.owns(a) and self.device in a.devices()

    @staticmethod
    def _contiguous(a: Any) -> bool:
        return True  # jax arrays have no strides: always dense

    def _check_array(self, a, what, dtype=None, shape=None):
        super()._check_array(a, what, dtype, shape)
        if self.device not in a.devices():
            raise ValueError(f"{what}: expected an array on {_key(self.device)}, got one on "
                             f"{', '.join(_key(d) for d in a.devices())} (move it with jax.device_put)")  # fmt: skip

    def _actions_on_device(self, actions, n, dtype, width=1):
        shape = (n,) if width == 1 else (n, width)
        if self.owns(actions):
            self._check_array(actions, "actions", dtype, shape)
            return actions
        host = np.ascontiguousarray(actions, dtype=dtype)
        if host.shape != shape:
            raise ValueError(f"actions: expected shape {shape}, got {host.shape}")
        return jax.device_put(host, self.device)

    def _values(self, params: Any) -> Any:
        return self._device_params(params)

    def _seed(self, seed: int) -> Any:
        return np.uint32(seed)

    # ---- compiled programs (one per env, mode and static setting; jit caches per shape) ----------
    def _jit(self, op: str, key: tuple, fn: Any, **static: Any) -> Any:
        # Only the rollout scan takes CPU_COMPILER_OPTIONS: they make the single step compile far slower.
        options = self._rollout_options if op == "rollout" else None
        return self._cache("jit", (op, *key),
                           lambda: jax.jit(partial(fn, **static) if static else fn, compiler_options=options or None))

    @staticmethod
    def _env(bufs: EnvBuffers) -> Any:
        return ops.Env(bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs,
                       bufs.reward, bufs.terminated, bufs.truncated)  # fmt: skip

    @staticmethod
    def _store(bufs: EnvBuffers, env: Any) -> None:
        for name, value in env._asdict().items():
            setattr(bufs, name, value)

    # ---- environments ------------------------------------------------------------------------
    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        self._check_env(spec, bufs, params)
        fn = self._jit("reset", (spec.kernel_key, bool(fresh)), ops.env_reset, spec=spec, fresh=bool(fresh))
        new = fn(values=self._values(params), seed=self._seed(seed), env=self._env(bufs))
        self._store(bufs, self._done(new))

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        n = self._check_env(spec, bufs, params)
        actions = self._actions_on_device(actions, n, spec.action_dtype, spec.action_dim)
        next_step = AUTORESET_MODES[autoreset] == AUTORESET_MODES["next_step"]
        fn = self._jit("step", (spec.kernel_key, int(max_steps), next_step), ops.env_step, spec=spec,
                       max_steps=int(max_steps), next_step=next_step)  # fmt: skip
        new = fn(values=self._values(params), env=self._env(bufs), actions=actions, seed=self._seed(seed))
        self._store(bufs, self._done(new))

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        # The whole rollout is one scan: steps_per_launch is checked and has no effect (there is no
        # launch to split), as on the torch backends.
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        self._check_env(spec, bufs, params)
        self._check_policy_size(spec, policy, policy_params, hidden)
        next_step = AUTORESET_MODES[autoreset] == AUTORESET_MODES["next_step"]
        static = dict(spec=spec, kind=int(policy.kind), hidden=hidden, steps=int(out.steps),
                      max_steps=int(max_steps), next_step=next_step)  # fmt: skip
        fn = self._jit("rollout", tuple(v for k, v in static.items() if k != "spec") + (spec.kernel_key,),
                       ops.rollout, **static)  # fmt: skip
        new, rec = fn(values=self._values(params), env=self._env(bufs), flat=policy_params, seed=self._seed(seed))
        self._store(bufs, new)
        for name, value in rec.items():
            setattr(out, name, value.astype(getattr(out, name).dtype))
        self._done(rec)

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        self._check_mlp(policy_params, obs, hidden, out_dim)
        fn = self._jit("mlp", (int(hidden), int(out_dim)), ops.mlp_forward, hidden=int(hidden), out_dim=int(out_dim))
        return self._done(fn(policy_params, obs))

    # ---- rollout buffer ops: they return their results (nothing to write into) ----------------
    def _check_all(self, **arrays: Any) -> None:
        for what, a in arrays.items():
            self._check_array(a, what)

    @staticmethod
    def _real(like: Any, value: float) -> Any:
        """``value`` rounded to the precision of ``like`` (the reference's ``T(value)``)."""
        return dtype_of(like).type(value)

    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        self._check_all(rewards=rewards, values=values, next_values=next_values, terminated=terminated,
                        truncated=truncated, advantages=advantages, returns=returns)  # fmt: skip
        g = self._real(rewards, gamma)
        gl = self._real(rewards, g * self._real(rewards, lam))
        fn = self._jit("gae", (), ops.gae)
        return self._done(fn(rewards, values, next_values, terminated, truncated, g, gl))

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        self._check_all(rewards=rewards, terminated=terminated, truncated=truncated, bootstrap=bootstrap, out=out)
        fn = self._jit("discounted_returns", (), ops.discounted_returns)
        return self._done(fn(rewards, terminated, truncated, bootstrap, self._real(rewards, gamma)))

    def normalize(self, x, out, eps):
        self._check_all(x=x, out=out)
        acc = jnp.float64 if self.supports_float64 else jnp.float32
        fn = self._jit("normalize", (np.dtype(acc).str,), ops.normalize, acc_dtype=acc)
        return self._done(fn(x, self._real(x, eps)))

    def gather(self, x, indices, out):
        self._check_all(x=x, indices=indices, out=out)
        fn = self._jit("gather", (), ops.gather)
        return self._done(fn(x, indices))

    def index_range(self, indices):
        if indices.size == 0:
            raise ValueError("indices: empty array has no range")
        return int(jnp.min(indices)), int(jnp.max(indices))

    def all_finite(self, a):
        return bool(jnp.isfinite(a).all())
