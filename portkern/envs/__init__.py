"""The environments: one module each, with its params, spaces and the NumPy reference dynamics.

Every public module in this package that defines ``SPEC`` is an environment, found by listing
the package: adding an env means adding its module (and, unless it is a :func:`variant` of an env
whose kernels it reuses, its kernels), not editing a list here.

A module that fails (it raises on import, has no ``SPEC``, names a kernel no env provides, repeats
an id) takes only its own env down: it is left out of :data:`ENVS` and listed in
:data:`UNAVAILABLE` with the reason, which ``get``/``make`` of that id raise. ``import portkern``
and every other env keep working; tests/test_env_sources.py fails while any module is unavailable.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

from .base import EnvSpec, Structural, variant

#: Listing order (Gymnasium's classic-control order); envs not named here follow by module name.
_ORDER = ("cartpole", "pendulum", "mountain_car", "mountain_car_continuous", "acrobot")

#: env id -> spec, of every env that loaded. Filled in place by :func:`discover` (modules that
#: imported it by name see a rediscovery).
ENVS: dict[str, EnvSpec] = {}
#: env id (or, where a module failed before declaring one, ``portkern/envs/<module>.py``) -> why it
#: is unavailable.
UNAVAILABLE: dict[str, str] = {}
#: kernel stem -> the env that owns those kernels (its module is named after them); its params
#: struct is the one the kernels read, shared by the variants that reuse them.
KERNEL_OWNERS: dict[str, EnvSpec] = {}


class EnvUnavailable(ValueError):
    """An env whose module is in the package but failed to load (the message says why)."""


def _declared_id(path: Path) -> str | None:
    """The env id a module that failed to load meant to declare, read from its source (the first
    ``id="..."`` keyword, or a ``variant("...", ...)`` call's first argument), so that ``make`` of
    that id says what went wrong rather than "unknown"; None if the source does not say."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "id" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if name == "variant" and node.args and isinstance(node.args[0], ast.Constant):
            return node.args[0].value if isinstance(node.args[0].value, str) else None
    return None


def _load(module: str) -> EnvSpec:
    """The module's SPEC; any failure is an ImportError whose message names the module."""
    where = f"portkern/envs/{module}.py"
    try:
        mod = importlib.import_module(f"{__name__}.{module}")
    except Exception as exc:  # any error in an env module is that env's, never the package's
        raise ImportError(f"{where} failed to import: {type(exc).__name__}: {exc}") from exc
    spec = getattr(mod, "SPEC", None)
    if not isinstance(spec, EnvSpec):
        raise ImportError(f"{where} defines no SPEC (an EnvSpec, or a base.variant(...) of one)")
    return spec


def _kernel_mismatch(spec: EnvSpec, owner: EnvSpec) -> str | None:
    """Why ``spec`` cannot run ``owner``'s kernels (which hard-code these), or None."""
    for what in ("field_names", "state_names", "obs_dim", "discrete_actions", "action_high", "action_dim",
                 "structure"):  # fmt: skip
        if getattr(spec, what) != getattr(owner, what):
            return (f"its {what} {getattr(spec, what)!r} differ from {owner.id}'s {getattr(owner, what)!r}, "
                    f"which the {owner.kernel} kernels and their struct {owner.struct_name} are built for")  # fmt: skip
    return None


def discover() -> None:
    """(Re)build :data:`ENVS`, :data:`UNAVAILABLE` and :data:`KERNEL_OWNERS` by listing this package."""
    mods = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name != "base"]
    mods.sort(key=lambda m: (_ORDER.index(m) if m in _ORDER else len(_ORDER), m))
    loaded: list[tuple[str, EnvSpec]] = []
    unavailable: dict[str, str] = {}
    for module in mods:
        try:
            loaded.append((module, _load(module)))
        except ImportError as exc:
            path = next((Path(d) / f"{module}.py" for d in __path__ if (Path(d) / f"{module}.py").is_file()), None)
            unavailable[(path and _declared_id(path)) or f"portkern/envs/{module}.py"] = str(exc)
    first: list[tuple[str, EnvSpec]] = []
    for module, spec in loaded:
        if spec.id in unavailable or any(spec.id == s.id for _, s in first):
            twice = f"portkern/envs/{module}.py: env id {spec.id!r} is declared twice"
            unavailable[spec.id] = "; ".join(filter(None, (unavailable.get(spec.id), twice)))
        else:
            first.append((module, spec))
    # An env module named after its kernel stem owns those kernels; any other reuses an owner's.
    owners = {spec.kernel: spec for module, spec in first if spec.kernel == module}
    found: dict[str, EnvSpec] = {}
    for module, spec in first:
        owner = owners.get(spec.kernel)
        if owner is None:
            problem = (f"kernel {spec.kernel!r} is neither this module's name (an env with its own kernels) "
                       f"nor the kernel of an env module ({', '.join(owners) or 'none'}); a variant keeps its "
                       f"parent's kernel")  # fmt: skip
        else:
            problem = _kernel_mismatch(spec, owner)
        if problem:
            unavailable[spec.id] = f"portkern/envs/{module}.py: {problem}"
        else:
            found[spec.id] = spec
    # In place: modules that did `from portkern.envs import ENVS` hold these very dicts.
    for target, value in ((ENVS, found), (UNAVAILABLE, unavailable), (KERNEL_OWNERS, owners)):
        target.clear()
        target.update(value)


def get(env_id: str, **structure: int) -> EnvSpec:
    """The spec for ``env_id``; unknown ids raise ValueError listing the valid ones, and an env
    whose module failed to load raises :class:`EnvUnavailable` with the reason.

    ``structure`` are the env's structural keywords (``get("Chain-v0", links=5)``): the concrete spec
    for those values (:meth:`EnvSpec.with_structure`, cached); without them, the env at its defaults.
    An unknown keyword, a non-int or a value out of range raises ValueError naming the keyword."""
    try:
        spec = ENVS[env_id]
    except (KeyError, TypeError):
        pass
    else:
        return spec.with_structure(**structure) if structure else spec
    if isinstance(env_id, str) and env_id in UNAVAILABLE:
        raise EnvUnavailable(f"env_id: {env_id!r} is unavailable: {UNAVAILABLE[env_id]}")
    failed = f"; unavailable: {'; '.join(UNAVAILABLE.values())}" if UNAVAILABLE else ""
    raise ValueError(f"env_id: unknown environment {env_id!r}; valid ids: {', '.join(ENVS)}{failed}")


def gymnasium_envs() -> dict[str, EnvSpec]:
    """The envs that declare a Gymnasium counterpart (what the Gymnasium parity tests take)."""
    return {env_id: spec for env_id, spec in ENVS.items() if spec.gymnasium_id is not None}


discover()

__all__ = ["ENVS", "KERNEL_OWNERS", "UNAVAILABLE", "EnvSpec", "EnvUnavailable", "Structural", "discover", "get",
           "gymnasium_envs", "variant"]  # fmt: skip
