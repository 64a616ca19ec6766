"""The ``torch`` backend's ops through ``torch.compile`` (Inductor: C++/OpenMP on CPU, Triton on GPU).

The "framework plus compiler" point on the spectrum: the same tensor code as ``torch``, traced by
Dynamo and compiled by Inductor, so each env step (physics, reset draws, autoreset, buffer
writes), each rollout step (policy, env step, recording) and each buffer op becomes a few fused
kernels. A registered backend of its own, so the benchmark lists eager and compiled PyTorch as
two targets on the same devices.

Compilation happens on the first call with new argument types. The buffer ops' scans compile
their whole-array terms only; their recursion over T runs as eager row ops (see ``_gae``).
Compilation's cost is kept apart from throughput: every call that compiled is timed and
recorded in :attr:`compile_seconds`, and a benchmark's warm-up call absorbs it.

Where compiled results differ from eager ones, it is float rounding: Inductor's sin/cos/exp/tanh
are vectorised differently (a few ulp), its ``remainder`` is ``a - b * floor(a / b)``, and its
reductions sum in another order. Resets use only exact operations (multiplies and adds of
values with at most 24 significant bits) and C++ is built without contraction, so on CPU they
stay bit-identical; Triton may contract ``a * b + c`` into an FMA on GPUs.
"""

from __future__ import annotations

import shutil
import time
import types
from typing import Any, Callable

from .._validate import dtype_of
from ..envs.base import EnvSpec, ParamView
from .base import Probe
from .registry import register
from .torch import TorchBackend, _cpu_label, ops, torch


def _renamed(fn: Callable, name: str) -> Callable:
    """``fn`` with a code object of its own, named ``name``.

    Dynamo keys its cache (and its recompile limit of 8) on the code object, so one function
    compiled for every env and mode would share one cache and fall back to eager after the
    eighth variant; one code object per (op, env, mode) keeps each a handful of graphs, and the
    names (``pk_cartpole_step_same_step``) show up in profiles.
    """
    code = fn.__code__
    code = code.replace(co_name=name, **({"co_qualname": name} if hasattr(code, "co_qualname") else {}))
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def _frames_compiled() -> int:
    """Frames Dynamo has compiled so far in this process (a call that raised it compiled)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["frames"]["total"])
    except Exception:
        return 0


def _cpp_compiler() -> str | None:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return get_cpp_compiler()
    except Exception:
        return shutil.which("g++") or shutil.which("clang++")


@register
class TorchCompileBackend(TorchBackend):
    """PyTorch ops compiled by ``torch.compile`` (Inductor), one compiled function per op, env and mode."""

    name = "torch_compile"
    order = 41
    extra = "torch"

    @classmethod
    def probe(cls) -> Probe:
        base = super().probe()
        if not base.available:
            return base
        try:
            import torch._inductor  # noqa: F401  (the compiler, not only the tracer)
        except Exception as exc:
            return Probe(False, f"torch.compile's Inductor failed to import: {type(exc).__name__}: {exc}")
        try:
            from torch.utils._triton import has_triton

            triton = has_triton()
        except Exception:
            triton = False
        cpp = _cpp_compiler() is not None
        cpu = _cpu_label()
        # Inductor writes C++ for the CPU (built at run time) and Triton for GPUs (Metal on MPS).
        devices = [d for d in base.devices if (cpp if d == cpu else triton or "MPS" in d)]
        if not devices:
            why = [w for ok, w in ((cpp, "no C++ compiler for Inductor's CPU code (install g++)"),
                                   (triton, "no Triton for Inductor's GPU code")) if not ok]  # fmt: skip
            return Probe(False, "torch.compile cannot build here: " + "; ".join(why))
        versions = dict(base.versions)
        if triton:
            import triton as _triton

            versions["triton"] = _triton.__version__
        return Probe(True, devices=tuple(devices), versions=versions)

    def __init__(self, device: str | None = None) -> None:
        super().__init__(device)  # raises BackendUnavailable, with the install hint, without torch
        #: torch.compile's ``mode`` (None: Inductor's default; "max-autotune-no-cudagraphs" searches
        #: kernel configs). CUDA graphs ("reduce-overhead") are not used: the ops write the env's
        #: buffers in place, which CUDA graph replays would have to copy back.
        self.compile_mode: str | None = None
        #: "<compiled function>" -> seconds of every call that compiled (first call, recompiles),
        #: summed: compile time, kept apart from throughput.
        self.compile_seconds: dict[str, float] = {}

    def describe(self) -> dict[str, str]:
        return {**super().describe(), "compile": "inductor" + (f" ({self.compile_mode})" if self.compile_mode else "")}

    # ---- compiled functions ---------------------------------------------------------------------
    def _compiled(self, name: str, fn: Callable) -> Callable:
        """``fn`` compiled under its own code object ``name``; calls that compiled are timed."""

        def make() -> Callable:
            compiled = torch.compile(_renamed(fn, name), dynamic=True, mode=self.compile_mode)

            def call(*args: Any) -> Any:
                before = _frames_compiled()
                t0 = time.perf_counter()
                result = compiled(*args)
                if _frames_compiled() != before:
                    self.synchronize()
                    self.compile_seconds[name] = self.compile_seconds.get(name, 0.0) + time.perf_counter() - t0
                return result

            return call

        return self._cache("compiled", (name, self.compile_mode), make)

    def _seed(self, seed: int) -> Any:
        # A tensor, not an int: an int in Philox's integer ops would be traced as a symbolic size.
        return self._cache("seed", seed, lambda: torch.tensor(seed, dtype=torch.int64, device=self.device))

    def _physics(self, spec, bufs, actions, p, max_steps, next_step):
        mode = "next_step" if next_step else "same_step"
        fn = self._compiled(f"pk_{spec.kernel_key}_step_{mode}", _step_fn(spec, next_step))
        return fn(bufs.state, bufs.steps, bufs.needs_reset, actions, bufs.obs, bufs.final_obs, bufs.reward,
                  bufs.terminated, bufs.truncated, p._values, max_steps)  # fmt: skip

    def _autoreset(self, spec, bufs, finished, p, seed, next_step) -> None:
        # On the CPU, called with no env finished too (a no-op): it then compiles on the first step, like
        # the step itself, rather than whenever an episode first ends, inside someone's timed loop.
        # On a GPU an empty reset is skipped: Inductor's Triton launcher divides by zero on an empty
        # unbacked size (PyTorch 2.11 on an H200: "ZeroDivisionError" from the launcher of the first step,
        # where no env had finished; pytorch/pytorch#178878 fixes it). The count is on the host already
        # (nonzero synchronised), so the test costs nothing.
        idx = torch.nonzero(finished)[:, 0]
        if idx.numel() or self.device.type == "cpu":
            self._reset_some(spec, bufs, p, seed, idx, next_step)

    def _reset_some(self, spec, bufs, p, seed, idx, next_step) -> None:
        # The number of finished envs changes every step: unbacked, so Dynamo neither recompiles
        # for it nor specialises the sizes 0 and 1.
        mark = getattr(torch._dynamo.decorators, "mark_unbacked", torch._dynamo.maybe_mark_dynamic)  # < 2.4
        mark(idx, 0)
        fn = self._compiled(f"pk_{spec.kernel_key}_autoreset", _autoreset_fn(spec))
        fn(bufs.state, bufs.steps, bufs.episodes, bufs.obs, bufs.final_obs, p._values, self._seed(seed), idx,
           next_step)  # fmt: skip

    def _rollout_physics(self, spec, bufs, kind, flat, hidden, out, t, p, seed, max_steps, next_step):
        mode = "next_step" if next_step else "same_step"
        policy = "mlp" if kind == 1 else "random"
        fn = self._compiled(f"pk_{spec.kernel_key}_rollout_{mode}_{policy}", _rollout_fn(spec, kind, next_step))
        return fn(bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs, bufs.reward,
                  bufs.terminated, bufs.truncated, p._values, flat, hidden, self._seed(seed), max_steps,
                  self._env_index(bufs.steps.shape[0]), out.obs, out.actions, out.rewards, out.terminated,
                  out.truncated, self._step_index(t))  # fmt: skip

    def _step_index(self, t: int) -> Any:
        """Step ``t`` of a rollout as the one-element int64 tensor the compiled rollout step indexes with."""
        return self._cache("step_index", t, lambda: torch.tensor([t], dtype=torch.int64, device=self.device))

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        self._check_mlp(policy_params, obs, hidden, out_dim)
        self._check_array(obs, "obs")
        with torch.no_grad():
            return self._compiled("pk_mlp_forward", ops.mlp_forward)(policy_params, obs, int(hidden), int(out_dim))

    # The scans: whole-array terms compiled where Inductor's kernel beats eager's passes, the
    # recursion over T in eager row ops, as in the torch backend. Compiling the recursion too (the
    # loop unrolled, the trace stacked once) ran 3x slower than the row ops at 128 x 65,536 float32
    # and took minutes to compile on 2 cores (_torch_ops).
    def _scan_coef(self, like: Any) -> Any:
        """The scans' coefficient array (the torch backend's scratch; gae's fused terms need no flags)."""
        return self._scratch("scan_coef", tuple(like.shape), dtype_of(like))

    def _gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma,
             gamma_lam):  # fmt: skip
        coef = self._scan_coef(rewards)
        self._compiled("pk_gae", ops.gae_terms_fused)(rewards, values, next_values, terminated, truncated,
                                                       advantages, coef, gamma, gamma_lam)  # fmt: skip
        ops.scan_rows(advantages, coef, returns[0])
        torch.add(advantages, values, out=returns)

    def _discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        if bootstrap.dim() == 1:
            # With an [N] bootstrap the only whole-array terms are the coefficients, which eager
            # computes faster (two vectorised ops on the flags: 8-14 ms against 17-20 ms for
            # Inductor's fused kernel at 128 x 65,536, one thread): the torch backend's op as it is.
            return super()._discounted_returns(rewards, terminated, truncated, bootstrap, out, gamma)
        # [T, N]: each step's own term compiled (one kernel for 4 eager passes: 13.9 against 21.6 ms
        # there), the coefficients and the rows eager, as above.
        self._compiled("pk_discounted_returns", ops.discounted_returns_own_fused)(
            rewards, terminated, truncated, bootstrap, out, gamma)  # fmt: skip
        coef, done = self._scan_scratch(rewards)
        ops.discounted_returns_coef(terminated, truncated, coef, gamma, done)
        ops.discounted_returns_scan(rewards, terminated, truncated, bootstrap, out, gamma, coef,
                                    own_written=True)  # fmt: skip

    def _normalize_acc(self) -> Any:
        # On CPU, the torch backend's eager op (see _normalize). Elsewhere always the explicit cast: it
        # fuses into Inductor's reduction (no float64 copy of the buffer), and Inductor's own accumulator
        # is not ATen's.
        if self.device.type == "cpu":
            return super()._normalize_acc()
        return torch.float64 if self.supports_float64 else torch.float32

    def _normalize(self, *args) -> None:
        # On CPU, eager ATen: its float32 mean is a cascade sum and its std accumulates in float64 inside one
        # vectorised pass, while Inductor's kernel sums a float64 cast element by element, 0.75x of the eager
        # op at 128 x 4,096 (bench/cpu/buffer_peers.py). Compiling would only make the op slower there, so the
        # compiled backend runs what is fastest, as _discounted_returns does for an [N] bootstrap.
        if self.device.type == "cpu":
            return super()._normalize(*args)
        self._compiled("pk_normalize", ops.normalize)(*args)

    def _gather(self, *args) -> None:
        # On CPU, eager index_select: a gather is one indexed copy, which Inductor cannot fuse with anything here,
        # and its compiled form was 0.94x-0.98x of the eager op (bench/cpu/buffer_peers.py, 128 x 4,096 and
        # 65,536); the eager op also checks every index itself (gather_checks_indices).
        if self.device.type == "cpu":
            return super()._gather(*args)
        self._compiled("pk_gather", ops.gather)(*args)


# The functions compiled per env: the spec and the autoreset mode are fixed in the closure, the
# params come in as the one [P] tensor (a ParamView made inside the graph), so a new param value
# is new data, not a recompile.
def _step_fn(spec: EnvSpec, next_step: bool) -> Callable:
    names = spec.field_names
    ops.step_fn(spec)  # made here, outside the trace, where the traced env_step finds it (see there)

    def step(state, steps, needs_reset, actions, obs, final_obs, reward, terminated, truncated, params, max_steps):
        return ops.env_step(spec, state, steps, needs_reset, actions, obs, final_obs, reward, terminated,
                            truncated, ParamView(names, params), max_steps, next_step)  # fmt: skip

    return step


def _autoreset_fn(spec: EnvSpec) -> Callable:
    names = spec.field_names

    def autoreset(state, steps, episodes, obs, final_obs, params, seed, idx, next_step):
        ops.autoreset(spec, state, steps, episodes, obs, final_obs, ParamView(names, params), seed, idx, next_step)

    return autoreset


def _rollout_fn(spec: EnvSpec, kind: int, next_step: bool) -> Callable:
    names = spec.field_names
    ops.step_fn(spec)  # made here, outside the trace (see _step_fn)

    def rollout_step(state, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated,
                     params, flat, hidden, seed, max_steps, env_index, out_obs, out_actions, out_rewards,
                     out_terminated, out_truncated, t):  # fmt: skip
        actions = ops.sample_actions(kind, spec, obs, flat, hidden, seed, episodes, steps, env_index)
        ops.put_row(out_obs, t, obs)
        ops.put_row(out_actions, t, actions)
        finished = ops.env_step(spec, state, steps, needs_reset, actions, obs, final_obs, reward, terminated,
                                truncated, ParamView(names, params), max_steps, next_step)  # fmt: skip
        ops.put_row(out_rewards, t, reward)
        ops.put_row(out_terminated, t, terminated)
        ops.put_row(out_truncated, t, truncated)
        return finished

    return rollout_step
