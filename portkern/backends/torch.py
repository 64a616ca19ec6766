"""The PyTorch backend: a framework stack, every op in standard tensor operations on any torch device.

No custom kernels and no extensions: the env physics is the NumPy reference itself
(``portkern/envs/*.py`` is written against the array API standard and runs on tensors through
array-api-compat), and the rest — Philox, autoreset, policies, buffer ops — is
:mod:`portkern.backends._torch_ops`. Tensors in, tensors out, on the env's device
(``device="cpu"``, ``"cuda"``, ``"cuda:1"``, ``"xpu"``, ``"mps"``; ROCm builds present AMD GPUs
as ``cuda``), so a PyTorch training loop on this backend moves no data between libraries.
"""

from __future__ import annotations

import platform
from typing import Any, Callable

import numpy as np

from .._validate import dtype_of
from ..envs._blocks import Block, install_block_runner
from ..envs.base import EnvSpec, ParamView
from ._cuda_common import one_line
from .base import AUTORESET_MODES, Backend, EnvBuffers, Probe
from .registry import register

_INSTALL_HINT = "pip install 'portkern[torch]' (the CPU build of PyTorch is enough)"

try:  # this module is portkern.backends.torch; the absolute import is the real PyTorch
    import torch

    from . import _torch_ops as ops
except ImportError as exc:
    torch = ops = None
    _IMPORT_ERROR = (f"torch is not installed: {_INSTALL_HINT}" if exc.name == "torch"
                     else f"torch backend failed to import: {one_line(exc)}")  # fmt: skip
except Exception as exc:  # a broken install (CUDA/ABI mismatch) must not break portkern
    torch = ops = None
    _IMPORT_ERROR = f"torch failed to import: {one_line(exc)}"
else:
    _IMPORT_ERROR = ""

#: NumPy dtype -> torch dtype, for the dtypes portkern's buffers use.
_DTYPES: dict[np.dtype, Any] = {} if torch is None else {
    np.dtype(name): getattr(torch, name)
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint32", "bool")
}  # fmt: skip


def _run_block(block: Block, args: tuple) -> Any:
    """A :func:`~portkern.envs.base.repeated_block` call: inside a torch.compile trace, the block's region
    (traced and compiled once per graph, then called again), on its tuples stacked into one tensor each and the
    params as their one array (a region takes no two inputs that alias, and the tuples' members and the
    params' fields are views of one tensor); anywhere else, or on arguments of another shape, the function."""
    *arrays, p = args
    if not torch.compiler.is_compiling() or not isinstance(p, ParamView) or not isinstance(p._values, torch.Tensor):
        return block.fn(*args)
    for a in arrays:
        if not isinstance(a, tuple) or not a or not all(isinstance(x, torch.Tensor) and x.shape == a[0].shape
                                                        for x in a):  # fmt: skip
            return block.fn(*args)
    out = block.region(p._names, p.dtype, p._values, *(torch.stack(a) for a in arrays))
    return tuple(out.unbind(0))


def _make_region(fn: Callable) -> Callable:
    """``fn`` as a nested compile region taking stacked tuples and the params' array (:func:`_run_block`)."""

    def region(names: tuple, dtype: Any, values: Any, *stacked: Any) -> Any:
        return torch.stack(fn(*(tuple(a.unbind(0)) for a in stacked), ParamView(names, values, dtype)))

    region.__name__ = region.__qualname__ = "pk_block_" + fn.__name__.lstrip("_")
    return torch.compiler.nested_compile_region(region)


def _cpu_label() -> str:
    # The same name as the numpy backend's: the benchmark counts every CPU backend of a machine
    # as one device.
    return f"host CPU ({platform.machine() or 'unknown'})"


def _accelerators() -> list[tuple[str, str]]:
    """(torch device string, device name) of every accelerator this PyTorch build sees."""
    found = []
    if torch.cuda.is_available():  # NVIDIA, and AMD under ROCm builds (torch.version.hip)
        found += [(f"cuda:{i}", torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found += [(f"xpu:{i}", xpu.get_device_name(i)) for i in range(xpu.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append(("mps", "Apple GPU (MPS)"))
    return found


def _devices() -> list[tuple[str, str]]:
    return [("cpu", _cpu_label()), *_accelerators()]


def _versions() -> dict[str, str]:
    v = {"torch": torch.__version__}
    if torch.version.cuda:
        v["cuda_runtime"] = torch.version.cuda
    if getattr(torch.version, "hip", None):
        v["hip"] = torch.version.hip
    return v


@register
class TorchBackend(Backend):
    """Eager PyTorch ("framework eager" on the spectrum); ``torch_compile`` is the same ops through Inductor."""

    name = "torch"
    order = 40
    extra = "torch"
    import_error = _IMPORT_ERROR

    @classmethod
    def probe(cls) -> Probe:
        if torch is None:
            return Probe(False, _IMPORT_ERROR)
        usable, broken = [], []
        for dev, label in _devices():
            try:  # touch the device, not just the import
                if int(torch.ones(2, device=dev).sum().item()) != 2:
                    raise RuntimeError("wrong result")
                usable.append(label)
            except Exception as exc:
                broken.append(f"{dev}: {one_line(exc)}")
        if not usable:
            return Probe(False, f"torch found no usable device ({'; '.join(broken)})")
        return Probe(True, devices=tuple(usable), versions=_versions())

    def __init__(self, device: str | None = None) -> None:
        self.device, self.device_name = self._resolve(device)
        # A repeated block of env physics traced by torch.compile (torch_compile's ops, the training stacks'
        # compiled steps) compiles once per graph: Chain-v0's step 250 s -> 48 s without a cache, measured.
        install_block_runner(_run_block, _make_region)
        kind = self.device.type
        self.supports_float64 = kind != "mps"
        if kind == "xpu":
            self.supports_float64 = bool(getattr(torch.xpu.get_device_properties(self.device), "has_fp64", True))
        self.vendor = {"cuda": "AMD" if getattr(torch.version, "hip", None) else "NVIDIA", "xpu": "Intel",
                       "mps": "Apple"}.get(kind, platform.processor() or "")  # fmt: skip

    @staticmethod
    def _resolve(device: str | None) -> tuple[Any, str]:
        """``None`` -> PyTorch's default device; a torch device string; or (a substring of) a listed device name."""
        found = _devices()
        if device is None:
            device = str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "cpu"
        key = device.strip()
        try:
            dev = torch.device("cpu" if key.lower() == "host" else key)
        except (RuntimeError, ValueError):
            dev = None
        if dev is not None:
            api = getattr(torch, dev.type, None)
            if dev.index is None and dev.type in ("cuda", "xpu") and api.is_available():
                dev = torch.device(dev.type, api.current_device())  # "cuda": the current device, as in torch
            for d, label in found:
                if torch.device(d) == dev:
                    return dev, label
        else:
            for d, label in found:
                if key and (key == label or key.lower() in label.lower()):
                    return torch.device(d), label
        listing = "; ".join(f"{d} ({label})" for d, label in found)
        raise ValueError(
            f"device: no torch device {device!r} here; devices: {listing}. Pass a torch device string "
            f"('cpu', 'cuda', 'cuda:1', 'xpu', 'mps') or a device name"
        )

    def describe(self) -> dict[str, str]:
        # Intra-op threads matter as much as the device on CPUs: on a shared VM two threads can be
        # an order of magnitude slower than one (each op waits for a descheduled thread).
        return {"backend": self.name, "device": self.device_name, "vendor": self.vendor,
                "torch_device": str(self.device), "torch_threads": str(torch.get_num_threads()),
                **_versions()}  # fmt: skip

    def device_kind(self) -> str:
        """From the tensor device's type: "cpu" on the host, "gpu" for cuda (ROCm too), xpu and mps,
        "accelerator" for any other (a backend such as "hpu" or "privateuseone")."""
        kind = self.device.type
        return "cpu" if kind == "cpu" else "gpu" if kind in ("cuda", "xpu", "mps") else "accelerator"

    def synchronize(self) -> None:
        kind = self.device.type
        if kind in ("cuda", "xpu"):
            getattr(torch, kind).synchronize(self.device)
        elif kind == "mps":
            torch.mps.synchronize()

    def memory_limits(self) -> tuple[int | None, int | None] | None:
        if self.device.type == "cuda":
            return None, int(torch.cuda.get_device_properties(self.device).total_memory)
        if self.device.type == "xpu":
            return None, int(torch.xpu.get_device_properties(self.device).total_memory)
        return None

    def _device_key(self) -> Any:
        return str(self.device)

    # ---- arrays -------------------------------------------------------------------------------
    @staticmethod
    def torch_dtype(dtype: Any) -> Any:
        """The torch dtype of a NumPy dtype (or of a torch dtype, returned as is)."""
        if torch is not None and isinstance(dtype, torch.dtype):
            return dtype
        dt = np.dtype(dtype)
        if dt not in _DTYPES:
            raise TypeError(f"dtype: the torch backend has no {dt} tensors")
        return _DTYPES[dt]

    def zeros(self, shape, dtype):
        return torch.zeros(tuple(shape), dtype=self.torch_dtype(dtype), device=self.device)

    def empty(self, shape, dtype):
        return torch.empty(tuple(shape), dtype=self.torch_dtype(dtype), device=self.device)

    def from_host(self, a):
        host = np.array(a, copy=True, order="C")  # owned and writable: torch.from_numpy shares it
        t = torch.from_numpy(host)
        return t if self.device.type == "cpu" else t.to(self.device)

    def to_host(self, a):
        host = a.detach().cpu()
        if host.is_floating_point() and host.dtype not in (torch.float16, torch.float32, torch.float64):
            host = host.float()  # bfloat16 and the float8s have no NumPy dtype; float32 holds them exactly
        # .cpu() of a CPU tensor is the tensor itself: copy, so the host array never aliases the env's buffer.
        return host.numpy().copy() if a.device.type == "cpu" else host.numpy()

    def write(self, dst, src):
        host = np.array(src, dtype=dtype_of(dst), copy=True, order="C")
        dst.copy_(torch.from_numpy(host))

    @classmethod
    def owns(cls, a: Any) -> bool:
        return torch is not None and isinstance(a, torch.Tensor)

    @classmethod
    def array_device(cls, a: Any) -> str:
        return str(a.device)

    @staticmethod
    def _contiguous(a: Any) -> bool:
        return bool(a.is_contiguous())

    def holds(self, a: Any) -> bool:
        return self.owns(a) and a.device == self.device

    @staticmethod
    def _span(a: Any) -> tuple[Any, int, int] | None:
        # The tensor's own pointer first: the array interfaces Backend._span asks for before it cost a
        # raised and caught AttributeError per call on a CPU tensor, ~15 us of every buffer op's check.
        if torch is not None and isinstance(a, torch.Tensor):
            start = a.data_ptr()
            return None, start, start + a.numel() * a.element_size()
        return Backend._span(a)

    def _check_array(self, a, what, dtype=None, shape=None):
        super()._check_array(a, what, dtype, shape)
        if a.device != self.device:
            raise ValueError(f"{what}: expected a tensor on {self.device}, got one on {a.device} (move it with .to())")

    def _params_view(self, spec: EnvSpec, params: Any) -> ParamView:
        """The env's params as 0-d tensors on this device, made once per distinct value.

        On the device rather than Python floats: CUDA divides a tensor by a host scalar as a
        multiplication by its reciprocal, which is not the reference's division.
        """
        return self._cache("param_view", (spec.kernel, params.key),
                           lambda: ParamView(spec.field_names, self._device_params(params), params.dtype))  # fmt: skip

    def _env_index(self, n: int) -> Any:
        return self._cache("env_index", n, lambda: torch.arange(n, dtype=torch.int64, device=self.device))

    # ---- environments ------------------------------------------------------------------------
    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        n = self._check_env(spec, bufs, params)
        with torch.no_grad():
            ops.env_reset(spec, bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs,
                          self._params_view(spec, params), int(seed), bool(fresh), self._env_index(n))  # fmt: skip

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        n = self._check_env(spec, bufs, params)
        actions = self._actions_on_device(actions, n, spec.action_dtype, spec.action_dim)
        next_step = AUTORESET_MODES[autoreset] == AUTORESET_MODES["next_step"]
        with torch.no_grad():
            finished = self._physics(spec, bufs, actions, self._params_view(spec, params), int(max_steps), next_step)
            self._autoreset(spec, bufs, finished, self._params_view(spec, params), int(seed), next_step)

    # The two halves of a step; torch_compile compiles each, with the nonzero between them eager.
    def _physics(self, spec, bufs, actions, p, max_steps, next_step):
        return ops.env_step(spec, bufs.state, bufs.steps, bufs.needs_reset, actions, bufs.obs, bufs.final_obs,
                            bufs.reward, bufs.terminated, bufs.truncated, p, max_steps, next_step)  # fmt: skip

    def _autoreset(self, spec, bufs, finished, p, seed, next_step) -> None:
        idx = torch.nonzero(finished)[:, 0]  # which envs finished: the step's one host synchronisation
        if idx.numel():
            self._reset_some(spec, bufs, p, seed, idx, next_step)

    def _reset_some(self, spec, bufs, p, seed, idx, next_step) -> None:
        ops.autoreset(spec, bufs.state, bufs.steps, bufs.episodes, bufs.obs, bufs.final_obs, p, seed, idx, next_step)

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        # A framework has no launch to fuse steps into: steps_per_launch is checked and has no
        # effect; "fused" and "device" both mean the policy runs on the device, in tensor ops.
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        self._check_env(spec, bufs, params)
        self._check_policy_size(spec, policy, policy_params, hidden)
        p = self._params_view(spec, params)
        next_step = AUTORESET_MODES[autoreset] == AUTORESET_MODES["next_step"]
        with torch.no_grad():
            for t in range(out.steps):
                # The reference's loop body: sample from the obs acted on, step, record.
                finished = self._rollout_physics(spec, bufs, policy.kind, policy_params, hidden, out, t, p,
                                                 int(seed), int(max_steps), next_step)  # fmt: skip
                self._autoreset(spec, bufs, finished, p, int(seed), next_step)
                out.final_obs[t] = bufs.final_obs  # after the resets: next_step's final obs is the reset obs

    def _rollout_physics(self, spec, bufs, kind, flat, hidden, out, t, p, seed, max_steps, next_step):
        actions = ops.sample_actions(kind, spec, bufs.obs, flat, hidden, seed, bufs.episodes, bufs.steps,
                                     self._env_index(bufs.steps.shape[0]))  # fmt: skip
        out.obs[t] = bufs.obs
        out.actions[t] = actions
        finished = self._physics(spec, bufs, actions, p, max_steps, next_step)
        out.rewards[t] = bufs.reward
        out.terminated[t] = bufs.terminated
        out.truncated[t] = bufs.truncated
        return finished

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        self._check_mlp(policy_params, obs, hidden, out_dim)
        self._check_array(obs, "obs")
        with torch.no_grad():
            return ops.mlp_forward(policy_params, obs, int(hidden), int(out_dim))

    # ---- rollout buffer ops (arguments validated by portkern.buffer: launches only) -----------
    @staticmethod
    def _real(like: Any, value: float) -> float:
        """``value`` rounded to the precision of ``like`` (the reference's ``T(value)``), as a Python float."""
        return float(dtype_of(like).type(value))

    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        g = self._real(rewards, gamma)
        gl = self._real(rewards, g * self._real(rewards, lam))
        with torch.no_grad():
            self._gae(rewards, values, next_values, terminated, truncated, advantages, returns, g, gl)

    def _gae(self, *args) -> None:
        ops.gae(*args, *self._scan_scratch(args[0]))

    def _scan_scratch(self, like: Any) -> tuple[Any, Any]:
        """A coefficient and a flag array of ``like``'s shape, kept for the next call: the eager scans'
        whole-array terms go there instead of into fresh [T, N] temporaries (see _torch_ops)."""
        shape = tuple(like.shape)
        return (self._scratch("scan_coef", shape, dtype_of(like)),
                self._scratch("scan_done", shape, np.bool_))  # fmt: skip

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        with torch.no_grad():
            self._discounted_returns(rewards, terminated, truncated, bootstrap, out, self._real(rewards, gamma))

    def _discounted_returns(self, *args) -> None:
        ops.discounted_returns(*args, *self._scan_scratch(args[0]))

    def normalize(self, x, out, eps):
        with torch.no_grad():
            self._normalize(x, out, self._real(x, eps), self._normalize_acc())

    def _normalize_acc(self) -> Any:
        """The dtype normalize's statistics are taken in: float64 where the device has it, as the
        reference. None (x's own dtype) on CPU, where a float64 copy of the buffer costs more than the
        op (33 ms for 128 x 65,536 float32 on one core): ATen's all-element std of a float32 tensor
        accumulates in float64 already, and its float32 mean is a cascade sum, within the parity
        tolerance of the float64 one (the peer a torch user writes, ``x.mean()``, is the same)."""
        if self.device.type == "cpu":
            return None
        return torch.float64 if self.supports_float64 else torch.float32

    def _normalize(self, *args) -> None:
        ops.normalize(*args)

    def gather(self, x, indices, out):
        with torch.no_grad():
            self._gather(x, indices, out)

    def _gather(self, *args) -> None:
        ops.gather(*args)

    def gather_checks_indices(self) -> bool:
        # On a CPU, index_select checks every index (IndexError, negative ones included) as it copies: an aminmax
        # first was a second pass over the indices, 0.93x of a bare index_select at 128 x 4,096. On CUDA an
        # out-of-range index is a device-side assert that poisons the context, so the range is checked first.
        return self.device.type == "cpu"

    def index_range(self, indices):
        if indices.numel() == 0:
            raise ValueError("indices: empty array has no range")
        lo, hi = torch.aminmax(indices)
        return int(lo), int(hi)

    def all_finite(self, a):
        return bool(torch.isfinite(a).all())
