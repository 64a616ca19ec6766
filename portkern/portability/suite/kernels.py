"""The kernels the suite times, their families and sizes: step and buffer kernels, and rollouts of the three
data paths (a subset of portkern.portability.names.ROLLOUT_KERNELS: the MLP policy on MLP_ENVS only)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ... import tuning
from ..names import BASE_KERNELS, PATHS, split_env
from ..names import ROLLOUT_KERNELS as ALL_ROLLOUT_KERNELS

#: The step kernel of every env and the buffer ops, each timed on its own.
KERNELS: tuple[str, ...] = BASE_KERNELS
#: Envs with an ``:mlp`` variant of their rollout cases (the random policy runs for every env): the
#: host path runs the MLP in NumPy, about 1 us per env step, so CartPole alone carries the policy's cost.
MLP_ENVS = ("CartPole-v1",)
#: Rollout cases ``rollout:<env>:<path>[:mlp]``: T steps of N envs with a policy choosing actions.
ROLLOUT_KERNELS: tuple[str, ...] = tuple(k for k in ALL_ROLLOUT_KERNELS
                                         if not k.endswith(":mlp") or k.split(":")[1] in MLP_ENVS)  # fmt: skip
#: Steps per rollout: full, quick, simulator devices. A quick run's rollout groups were its largest timed
#: share at T = 32 (Chain-v0's: 4 s a round, NumPy and eager torch's host loops up to 1.1 s a launch); at
#: T = 16 the host path's per-step rate is the same and the fused path still amortises its launch.
ROLLOUT_T, QUICK_ROLLOUT_T, SIM_ROLLOUT_T = 128, 16, 8

#: Sizes (items) per kernel family and mode; "full" is replaced by a ladder scaled to the device.
#: Rollout sizes are env counts N (a case runs N x T env steps). Quick rollouts run at the smaller step
#: size: their host path steps the env at N, so a backend that compiles per shape (jax) reuses the step
#: case's programs instead of compiling each env's step and reset once more.
QUICK_SIZES = {"step": (1024, 16384), "buffer": (8192, 65536), "copy": (32 << 20,), "rollout": (1024,),
               "rollout-mlp": (1024,)}  # fmt: skip
SIM_SIZES = {"step": (64,), "buffer": (1024,), "rollout": (64,), "rollout-mlp": (16,)}  # an interpreter: tiny

#: Backends whose "device" rollout path runs the very code of their "fused" path: their env_rollout
#: has no launch to split, so steps_per_launch is checked and ignored (numpy: the reference loop;
#: torch and torch_compile: one loop of tensor ops; jax: one scan). A quick run times their fused path
#: only and records the device case as left out (quick_left_out); the full run times both.
DEVICE_PATH_IS_FUSED = frozenset({"numpy", "torch", "torch_compile", "jax"})


def quick_left_out(backend: str, kernel: str, simulator: bool) -> str | None:
    """Why a quick run leaves this case out, as the case it repeats; None for a case a quick run keeps.

    * The device path of a backend in DEVICE_PATH_IS_FUSED repeats its fused path (same code, same N).
    * On a simulator or correctness harness (parity only, never timed), the host path repeats the
      step case (the same step kernel at the same N; the host loop itself is checked on every timed
      device) and the device path repeats the fused path (the same rollout kernel, one step per launch).
    """
    rk = rollout_kernel(kernel)
    if rk is None or rk.path == "fused":
        return None
    fused = kernel.replace(f":{rk.path}", ":fused", 1)
    if simulator:
        return f"step:{rk.env}" if rk.path == "host" else fused
    if rk.path == "device" and backend in DEVICE_PATH_IS_FUSED:
        return fused
    return None


@dataclass(frozen=True)
class RolloutKernel:
    env: str  # the name's env part: the env id, and structural values away from the defaults (names.split_env)
    path: str
    policy: str  # "random" | "mlp"


def rollout_kernel(kernel: str) -> RolloutKernel | None:
    """``rollout:<env>:<path>[:mlp]`` split into its parts; None for any other kernel."""
    parts = kernel.split(":")
    if parts[0] != "rollout":
        return None
    if len(parts) not in (3, 4) or parts[2] not in PATHS or parts[3:] not in ([], ["mlp"]):
        raise ValueError(f"kernel: expected rollout:<env>:<path>[:mlp], got {kernel!r}; valid: {', '.join(ROLLOUT_KERNELS)}")
    split_env(parts[1])  # an unknown env, or structural values it does not take, named
    return RolloutKernel(parts[1], parts[2], "mlp" if len(parts) == 4 else "random")


def family(kernel: str) -> str:
    """The KNOBS family of a kernel: the tuned defaults' family (portkern.tuning.family), once a rollout
    kernel's name is checked."""
    rollout_kernel(kernel)  # a malformed rollout name raises here, listing the valid ones
    return tuning.family(kernel)


def size_family(kernel: str) -> str:
    if kernel.startswith("step:"):
        return "step"
    rk = rollout_kernel(kernel)
    if rk is not None:
        return "rollout-mlp" if rk.policy == "mlp" else "rollout"
    return "copy" if kernel == "copy" else "buffer"


def comparison_kernel(kernel: str) -> str:
    """The kernels timed together in one interleaved group: a kernel itself, or all three data paths of
    one rollout (``rollout:<env>[:mlp]``), so that path factors are paired as well as backends."""
    rk = rollout_kernel(kernel)
    if rk is None:
        return kernel
    return f"rollout:{rk.env}" + (":mlp" if rk.policy == "mlp" else "")


def case_stack_class(backend_class: str, kernel: str) -> str:
    """The stack class of one case: the backend's, except a fused rollout of custom kernels ("fused custom")."""
    rk = rollout_kernel(kernel)
    if rk is not None and rk.path == "fused" and backend_class == "custom kernels":
        return "fused custom"
    return backend_class


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(1.0, x)))))


def full_sizes(bandwidth: float) -> dict[str, tuple[int, ...]]:
    """A ladder per family whose largest launch moves about 4 ms of the device's copy bandwidth."""
    budget = bandwidth * 4e-3
    step = min(max(_pow2_floor(budget / 82), 1 << 16), 1 << 24)
    buf = min(max(_pow2_floor(budget / 22), 1 << 18), 1 << 27)
    copy = min(max(_pow2_floor(bandwidth * 2e-3 / 2), 64 << 20), 1 << 30)
    # Rollouts run T = 128 steps per case and keep a [T, N] buffer, twice for the host path (device
    # and host): N is capped so the host path's round trips stay within seconds per rollout.
    roll = min(max(step >> 4, 1 << 12), 1 << 16)
    mlp = min(roll, 1 << 12)  # the host path's NumPy MLP: about 1 us per env step on one core
    return {"step": (step >> 8, step >> 4, step), "buffer": (buf >> 8, buf >> 4, buf), "copy": (copy,),
            "rollout": (roll >> 4, roll), "rollout-mlp": (mlp >> 4, mlp)}  # fmt: skip
