"""The environments: one module each, with Gymnasium's constants and the NumPy reference dynamics.

Every public module in this package that defines ``SPEC`` is an environment, found by listing
the package: adding an env means adding its module (and its kernels), not editing a list here.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import EnvSpec

#: Listing order (Gymnasium's classic-control order); envs not named here follow by module name.
_ORDER = ("cartpole", "pendulum", "mountain_car", "mountain_car_continuous", "acrobot")


def _discover() -> dict[str, EnvSpec]:
    mods = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name != "base"]
    mods.sort(key=lambda m: (_ORDER.index(m) if m in _ORDER else len(_ORDER), m))
    found: dict[str, EnvSpec] = {}
    for name in mods:
        spec = getattr(importlib.import_module(f"{__name__}.{name}"), "SPEC", None)
        if not isinstance(spec, EnvSpec):
            raise ImportError(f"portkern/envs/{name}.py defines no SPEC (an EnvSpec): every env module needs one")
        if spec.kernel != name:
            raise ImportError(f"portkern/envs/{name}.py: SPEC.kernel is {spec.kernel!r}; it must be the module name")
        if spec.id in found:
            raise ImportError(f"env id {spec.id!r} is declared twice")
        found[spec.id] = spec
    return found


ENVS: dict[str, EnvSpec] = _discover()


def get(env_id: str) -> EnvSpec:
    """The spec for ``env_id``; unknown ids raise ValueError listing the valid ones."""
    try:
        return ENVS[env_id]
    except (KeyError, TypeError):
        raise ValueError(
            f"env_id: unknown environment {env_id!r}; valid ids: {', '.join(ENVS)}"
        ) from None


__all__ = ["ENVS", "EnvSpec", "get"]
