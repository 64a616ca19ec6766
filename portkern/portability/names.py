"""The names and orders the suite, the report and the workload mixes share, declared once.

The envs come from their registry (portkern.envs) and the kernel names are derived from them; a list needed
in two places is imported from here, never copied.
"""

from __future__ import annotations

from ..envs import ENVS

#: The envs in the registry's listing order (Gymnasium's classic-control order, then by module name).
ENV_ORDER: tuple[str, ...] = tuple(ENVS)
#: Every env's step kernel, then the rollout-buffer ops.
BASE_KERNELS: tuple[str, ...] = tuple(f"step:{e}" for e in ENV_ORDER) + ("gae", "discounted_returns", "normalize",
                                                                         "gather")  # fmt: skip
#: The three data paths of a rollout (VectorEnv.rollout): host round-trip, one launch per step, fused.
PATHS = ("host", "device", "fused")
#: The policies choosing a rollout's actions: a kernel name ends in ``:mlp`` for the MLP, in nothing for random.
POLICIES = ("random", "mlp")
#: Every rollout kernel ``rollout:<env>:<path>[:mlp]``, one per data path (the suite times a subset of them:
#: portkern.portability.suite.ROLLOUT_KERNELS).
ROLLOUT_KERNELS: tuple[str, ...] = tuple(f"rollout:{e}:{p}{'' if pol == 'random' else ':' + pol}"
                                         for pol in POLICIES for e in ENV_ORDER for p in PATHS)  # fmt: skip
#: Every kernel a run or a workload mix may name, in the order reports list them.
KERNEL_ORDER: tuple[str, ...] = BASE_KERNELS + ROLLOUT_KERNELS
#: The order reports list backends in: the native backends of NVIDIA first, then the other custom kernels,
#: compiled and eager frameworks, the NumPy reference last. Backend.order is another order (the registry's
#: listing, the reference first); backends not named here follow by name.
BACKEND_ORDER = ("cupy", "numba", "opencl", "torch_compile", "torch", "numpy")
#: Stack classes (docs/ARCHITECTURE.md), deepest first; the benchmark classes each backend (portkern.identity.BENCH_CLASSES).
STACK_CLASSES = ("fused custom", "custom kernels", "framework compiled", "framework eager")
#: The native backend of a vendor's devices, in order of preference (both compile CUDA for NVIDIA).
NATIVE = {"NVIDIA": ("cupy", "numba")}


def rollout_parts(kernel: str) -> tuple[str, str, str] | None:
    """(env, path, policy) of ``rollout:<env>:<path>[:mlp]``; None for any other kernel."""
    parts = kernel.split(":")
    if parts[0] != "rollout" or len(parts) not in (3, 4) or parts[2] not in PATHS:
        return None
    return parts[1], parts[2], parts[3] if len(parts) == 4 else "random"


def functional_kernel(kernel: str) -> str:
    """The functional matrix's kernel: ``rollout:<env>`` for every path and policy of an env's rollouts."""
    rp = rollout_parts(kernel)
    return f"rollout:{rp[0]}" if rp else kernel
