"""The names and orders the suite, the report and the workload mixes share, declared once.

The envs come from their registry (portkern.envs) and the kernel names are derived from them; a list needed
in two places is imported from here, never copied.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..envs import ENVS
from ..tuning import env_label

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


#: Kernel names of an env at other structural values (EnvSpec.structure, e.g. a chain's ``links``) carry them
#: after the env id, ``/<name>=<value>`` each (tuning.env_label): ``step:Chain-v0/links=10``,
#: ``rollout:Chain-v0/links=10:fused``. The plain name is the env at its defaults, so names of envs without
#: structure, and of a structural env at its defaults, are the ones in KERNEL_ORDER.
STRUCTURE_SEP = "/"


def split_env(token: str) -> tuple[str, dict[str, int]]:
    """(env id, the structural values a kernel name's env part gives) of ``Chain-v0/links=10``; a ValueError
    naming the part for an unknown env or keyword, a value out of range or at its default (whose name is the
    plain one), or values out of declaration order: every env at every structure has exactly one name."""
    env_id, *given = token.split(STRUCTURE_SEP)
    if env_id not in ENVS:
        raise ValueError(f"kernel: unknown env {env_id!r} in {token!r}; valid: {', '.join(ENV_ORDER)}")
    spec = ENVS[env_id]
    values: dict[str, int] = {}
    for part in given:
        name, eq, text = part.partition("=")
        if not eq or not text.isdigit() or str(int(text)) != text:
            raise ValueError(f"kernel: {part!r} in {token!r}: expected <keyword>=<int> after the env id")
        if name in values:
            raise ValueError(f"kernel: {name} given twice in {token!r}")
        values[name] = int(text)
    try:
        spec.check_structure(values)  # unknown keywords and out-of-range values, naming them
    except ValueError as exc:
        raise ValueError(f"kernel: {token!r}: {exc}") from None
    canonical = env_label(spec.with_structure(**values))
    if canonical != token:
        raise ValueError(f"kernel: {token!r} names {canonical!r} (structural values at their default are left "
                         "out, the others in declaration order)")  # fmt: skip
    return env_id, values


def env_name(env_id: str, **values: int) -> str:
    """The env part of kernel names for ``env_id`` at these structural values (the others at their defaults)."""
    if env_id not in ENVS:
        raise ValueError(f"env: unknown env {env_id!r}; valid: {', '.join(ENV_ORDER)}")
    return env_label(ENVS[env_id].with_structure(**values))


def env_spec(token: str) -> Any:
    """The concrete EnvSpec a kernel name's env part names (``Chain-v0/links=10``: the chain at K = 10)."""
    env_id, values = split_env(token)
    return ENVS[env_id].with_structure(**values)


def _env_at(kernel: str) -> int | None:
    """Index of the env part in a step or rollout kernel name split at ':'; None for other kernels."""
    parts = kernel.split(":")
    return 1 if parts[0] in ("step", "rollout") and len(parts) > 1 else None


def kernel_structure(kernel: str) -> dict[str, int]:
    """The structural values a kernel name gives (``{"links": 10}``; {} for a plain name or a buffer op)."""
    i = _env_at(kernel)
    return {} if i is None else split_env(kernel.split(":")[i])[1]


def base_kernel(kernel: str) -> str:
    """The kernel name without structural values (``step:Chain-v0/links=10`` -> ``step:Chain-v0``), checked;
    also for families (``rollout:Chain-v0/links=10``)."""
    i = _env_at(kernel)
    if i is None:
        return kernel
    parts = kernel.split(":")
    parts[i] = split_env(parts[i])[0]
    return ":".join(parts)


def with_structure(kernel: str, **values: int) -> str:
    """``kernel`` (a plain name of KERNEL_ORDER, or a family) at these structural values of its env: the env
    part renamed (env_name); a ValueError naming the keyword when the env has no such structure."""
    i = _env_at(kernel)
    if i is None:
        if values:
            raise ValueError(f"{next(iter(values))}: {kernel} has no env, so no structural keywords")
        return kernel
    parts = kernel.split(":")
    env_id, own = split_env(parts[i])
    parts[i] = env_name(env_id, **{**own, **values})
    return ":".join(parts)


def structural_variants(kernel: str, structure: Mapping[str, Any]) -> list[str]:
    """The names of ``kernel`` at each value of ``structure`` (keyword -> values, e.g. ``{"links": (3, 10)}``)
    its env declares, in the order given; ``[kernel]`` for a kernel whose env declares none of them (an env
    without ``links`` is unaffected by ``--links``)."""
    i = _env_at(kernel)
    if i is None or not structure:
        return [kernel]
    declared = {s.name for s in ENVS[split_env(kernel.split(":")[i])[0]].structure}
    names = [kernel]
    for keyword, values in structure.items():
        if keyword in declared:
            names = [with_structure(k, **{keyword: v}) for k in names for v in values]
    return list(dict.fromkeys(names))


def is_kernel(name: str) -> bool:
    """Whether a run or a workload mix may name ``name``: a kernel of KERNEL_ORDER, or one at other
    structural values of its env (``step:Chain-v0/links=10``)."""
    try:
        return base_kernel(name) in KERNEL_ORDER
    except ValueError:
        return False


def kernel_rank(name: str) -> tuple[Any, ...]:
    """Sort key of the report's kernel order: KERNEL_ORDER's, each kernel's structural variants after it by
    their values (``links`` 3, 5, 10), names outside it last by name."""
    try:
        base, values = base_kernel(name), kernel_structure(name)
    except ValueError:
        return (len(KERNEL_ORDER), (), name)
    if base not in KERNEL_ORDER:
        return (len(KERNEL_ORDER), (), name)
    i = _env_at(base)
    spec = ENVS[base.split(":")[i]] if i is not None else None
    full = tuple(values.get(s.name, s.default) for s in spec.structure) if spec is not None else ()
    return (KERNEL_ORDER.index(base), full, name)


def rollout_parts(kernel: str) -> tuple[str, str, str] | None:
    """(env, path, policy) of ``rollout:<env>:<path>[:mlp]``; None for any other kernel. ``env`` is the
    name's env part, structural values included (``Chain-v0/links=10``: another kernel than ``Chain-v0``)."""
    parts = kernel.split(":")
    if parts[0] != "rollout" or len(parts) not in (3, 4) or parts[2] not in PATHS:
        return None
    return parts[1], parts[2], parts[3] if len(parts) == 4 else "random"


def functional_kernel(kernel: str) -> str:
    """The functional matrix's kernel: ``rollout:<env>`` for every path and policy of an env's rollouts."""
    rp = rollout_parts(kernel)
    return f"rollout:{rp[0]}" if rp else kernel
