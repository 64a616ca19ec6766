"""EnvSpec: what every backend needs to know about an environment, plus its NumPy reference dynamics.

Each env module declares its physics params once, by name (:class:`Param` for what a user may
set, :class:`Derived` for the constants Gymnasium computes from them in Python floats). From that
one declaration come the reference's values (:class:`KernelParams`, read as ``p.gravity``), the C
struct every OpenCL and CUDA env kernel takes (:meth:`EnvSpec.c_struct`, read as ``p->gravity``),
and the NumPy structured dtype both are laid out by; no kernel or reference reads a param by
position.

The reference dynamics are written against the Python array API standard (through
array-api-compat), so the specification itself runs on NumPy, PyTorch and any other conforming
array library; :func:`namespace` gives a function its arrays' namespace, and :class:`ParamView`
reads the params by name from a 1-D array of that library (on its device).
"""

from __future__ import annotations

import math
import numbers
import types
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

State = tuple[np.ndarray, ...]

#: (array types) -> array API namespace. A plain dict, not array-api-compat's lru_cache: it is
#: looked up on every reference call, and torch.compile traces a dict lookup without a warning.
_NAMESPACES: dict[tuple[type, ...], Any] = {}


def namespace(*arrays: Any) -> Any:
    """The array API namespace of ``arrays`` (``array_api_compat.array_namespace``): numpy for
    NumPy arrays, torch for tensors, and so on, so one reference runs on every array library."""
    key = tuple({type(a): None for a in arrays})
    xp = _NAMESPACES.get(key)
    if xp is None:
        from array_api_compat import array_namespace

        xp = _NAMESPACES[key] = array_namespace(*arrays)
    return xp


class ParamView:
    """An env's params read by name from a 1-D array of any array library (``KernelParams.as_array()``
    uploaded to a device): ``p.gravity`` is a 0-d array there, so the reference's arithmetic on
    that library's arrays never goes back to the host. ``dtype`` is the NumPy dtype of the values.
    """

    _values: Any

    def __init__(self, names: Sequence[str], values: Any, dtype: np.dtype | None = None) -> None:
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._values = values  # the whole [P] array, for callers that pass it on (compiled code)
        self._names = tuple(names)  # values' order, to view the same array again (repeated_block)
        for i, name in enumerate(names):
            setattr(self, name, values[i])


def square(x):
    """Squaring as the kernels do it (one correctly rounded multiply). Gymnasium writes ``x**2`` on
    NumPy scalars, which calls libm's pow; tests swap an env module's ``square`` for that to prove
    the rest of its reference is exact (each env imports this by name, so the swap is per env)."""
    return x * x


#: Param domains: name -> (predicate, words for error messages).
DOMAINS: dict[str, tuple[Callable[[float], bool], str]] = {
    "finite": (math.isfinite, "a finite number"),
    "positive": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    "nonnegative": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
}


@dataclass(frozen=True)
class Param:
    """A physics param a user may set with ``make(..., params={name: value})``."""

    name: str
    default: float
    domain: str = "finite"  # a key of DOMAINS
    doc: str = ""
    #: A value inside the domain that moves the dynamics, for the perturbation test (default:
    #: 1.25 x the default, or 0.01 for a zero default).
    perturb: float | None = None

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise ValueError(f"Param {self.name}: unknown domain {self.domain!r}")
        if not DOMAINS[self.domain][0](self.default):
            raise ValueError(f"Param {self.name}: default {self.default!r} outside its domain")

    def perturbed(self) -> float:
        if self.perturb is not None:
            return self.perturb
        return self.default * 1.25 if self.default != 0 else 0.01


@dataclass(frozen=True)
class Derived:
    """A constant computed from the params in Python floats (float64), as Gymnasium's ``__init__`` does."""

    name: str
    fn: Callable[[Mapping[str, float]], float]
    doc: str = ""


@dataclass(frozen=True)
class Structural:
    """An int keyword of ``make`` fixed for the env's lifetime (``links`` of a K-link chain): it sets the
    env's sizes (state, observations, actions), so the kernels take it as a compile-time constant.

    ``make(env_id, N, links=3)`` checks the value against ``[low, high]``, builds the concrete spec
    (:meth:`EnvSpec.with_structure`) and hands the kernel builds ``-D<define>=<value>`` (OpenCL and CUDA
    C; the Numba builder gets the value as a keyword). ``define`` defaults to ``PK_<NAME>``.
    """

    name: str
    default: int
    low: int
    high: int
    doc: str = ""
    define: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Structural {self.name!r}: the name must be a Python identifier (a make() keyword)")
        for what in ("default", "low", "high"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"Structural {self.name}: {what} must be an int, got {v!r}")
        if not self.low <= self.default <= self.high:
            raise ValueError(f"Structural {self.name}: default {self.default} outside [{self.low}, {self.high}]")
        if not self.define:
            object.__setattr__(self, "define", f"PK_{self.name.upper()}")
        if not self.define.isidentifier():
            raise ValueError(f"Structural {self.name}: define {self.define!r} is not a C identifier")

    def check(self, value: Any) -> int:
        """``value`` if it is an int in ``[low, high]``; else a ValueError naming the keyword and the range."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not self.low <= value <= self.high:
            raise ValueError(f"{self.name}: must be an int from {self.low} to {self.high}, got {value!r}")
        return int(value)


@dataclass(frozen=True)
class Constraint:
    """A condition across params (e.g. ``reset_low <= reset_high``), checked at ``make()``."""

    text: str  # what must hold, as shown in the error
    names: tuple[str, ...]
    holds: Callable[[Mapping[str, float]], bool]


class KernelParams:
    """An env's kernel params in one precision: one record of ``REAL`` fields, read by name.

    ``p.gravity`` is a NumPy scalar of ``p.dtype`` (what the reference computes with);
    ``p.record`` is the structured array laid out exactly as the generated C struct, which the
    kernel backends upload once and pass to every env kernel.
    """

    __slots__ = ("dtype", "record", "_values", "_key")

    def __init__(self, spec: "EnvSpec", values: Mapping[str, float], dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        self.record = np.zeros((), dtype=spec.param_dtype(self.dtype))
        for name in spec.field_names:
            self.record[name] = values[name]
        self._values = {name: self.dtype.type(self.record[name]) for name in spec.field_names}
        self._key = (self.dtype.str, self.record.tobytes())

    def __getattr__(self, name: str):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no param {name!r}") from None

    def __getitem__(self, name: str):
        return self._values[name]

    @property
    def key(self) -> tuple[str, bytes]:
        """Hashable identity (dtype and bytes) for caches of uploaded params."""
        return self._key

    def as_array(self) -> np.ndarray:
        """The record as a 1-D array of ``dtype`` (every field is ``REAL``, so this is its exact layout)."""
        return self.record.reshape(1).view(self.dtype).copy()

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self._values.items()}

    def __repr__(self) -> str:
        return f"KernelParams({self.dtype.name}, {self.to_dict()})"


@dataclass(frozen=True)
class EnvSpec:
    """One environment: names, sizes, params, parity facts and the reference dynamics (the specification).

    Reference functions operate on structure-of-arrays state (a sequence of ``[N]`` arrays, one
    per state variable), in the dtype of the arrays they get, with ``p`` a :class:`KernelParams`
    (NumPy scalars) or a :class:`ParamView` (0-d arrays of the state's library). They use only
    the array API standard and never write to their inputs:

    * ``reset(sym, p) -> State``: initial state from ``sym`` ([N, 4] uniform in [-1, 1), see rng.symmetric).
    * ``step(state, action, p) -> (State, reward, terminated)``.
    * ``observe(state) -> obs [N, obs_dim]``.

    Parity facts (what tests and the report need; every env declares them, none is borrowed):

    * ``test_state_box``: (low, high) per state variable: random states inside what episodes reach.
    * ``parity_states(rng, n) -> [n, D]``: states across the region with some packed near the
      env's thresholds and clips, for parity against Gymnasium and the perturbation test.
    * ``parity_tolerance``: {"float32": tol, "float64": tol} for one step of a kernel against the
      reference (libm differences amplified by the dynamics).

    Box actions are ``[N, action_dim]`` float32 in ``[-action_high, action_high]`` per component;
    ``reference step`` gets them as ``[N]`` when ``action_dim`` is 1 (every classic-control env) and
    as ``[N, action_dim]`` otherwise. Discrete envs take one action index per env (``[N]`` int32).

    Structural keywords (:class:`Structural`, e.g. a chain's ``links``) are make() keywords fixed for
    the env's lifetime that change its sizes. ``structure`` declares them and ``specialise(values)``
    returns the EnvSpec field changes for one set of values (``state_names``, ``obs_dim``,
    ``obs_low``/``obs_high``, ``action_dim``, ``test_state_box``, ...). The module's SPEC is the env at
    the default values (what the registry holds and ``make`` without keywords runs): declare it with the
    fields ``specialise`` gives for the defaults (``EnvSpec(..., **shape(defaults))``), which
    ``__post_init__`` checks. :meth:`with_structure` returns the concrete spec for other values;
    ``structure_values`` and :attr:`defines` say which ones a spec is.
    """

    id: str
    kernel: str  # kernel file stem and name stem: kernels/<api>/<kernel>.{cl,cu}, pk_<kernel>_step
    state_names: tuple[str, ...]
    obs_dim: int
    obs_low: tuple[float, ...]  # observation space bounds, as Gymnasium declares them
    obs_high: tuple[float, ...]
    discrete_actions: int | None  # number of actions, or None for a Box action
    action_high: float  # Box action bound (symmetric), ignored for discrete actions
    #: |state| limits that set_state enforces (Acrobot's angle wrap loops once per 2*pi), or None
    state_limit: tuple[float, ...] | None
    max_episode_steps: int
    params: tuple[Param | Derived, ...]
    reset: Callable[[np.ndarray, KernelParams], State]
    step: Callable[[State, np.ndarray, KernelParams], tuple[State, np.ndarray, np.ndarray]]
    observe: Callable[[State], np.ndarray]
    test_state_box: tuple[tuple[float, ...], tuple[float, ...]]
    parity_states: Callable[[np.random.Generator, int], np.ndarray]
    parity_tolerance: Mapping[str, float]
    constraints: tuple[Constraint, ...] = ()
    #: The id of the Gymnasium env this one reproduces (same dynamics, defaults, spaces and episode
    #: limit), which is then also its portkern id; the Gymnasium parity tests take exactly the envs
    #: that declare one. None: a portkern-only env (a variant, say), which everything else runs.
    gymnasium_id: str | None = None
    #: Width of a Box action (``[N, action_dim]``); 1 for every classic-control env. Discrete envs keep 1.
    action_dim: int = 1
    #: The env's structural make() keywords (compile-time constants of its kernels), and the function
    #: from their values to the EnvSpec fields they change (see the class docstring).
    structure: tuple[Structural, ...] = ()
    specialise: Callable[[Mapping[str, int]], Mapping[str, Any]] | None = field(default=None, repr=False)
    #: The structural values this spec is built for (filled with the defaults when not given).
    structure_values: Mapping[str, int] = field(default_factory=dict)
    _fields: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _concrete: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"{self.id}: params declared twice: {sorted(dup)}")
        for n in names:
            if not n.isidentifier():
                raise ValueError(f"{self.id}: param name {n!r} is not a C identifier")
        if set(self.parity_tolerance) != {"float32", "float64"}:
            raise ValueError(f"{self.id}: parity_tolerance needs float32 and float64 entries")
        lo, hi = self.test_state_box
        if not len(lo) == len(hi) == len(self.state_names):
            raise ValueError(f"{self.id}: test_state_box needs one bound per state variable")
        if not self.kernel.isidentifier():
            raise ValueError(f"{self.id}: kernel {self.kernel!r} is not a C identifier (a kernel file stem)")
        if self.gymnasium_id not in (None, self.id):
            # make(id) and gymnasium.make(id) name the same env, so one id serves both sides.
            raise ValueError(
                f"{self.id}: gymnasium_id must be None (a portkern-only env) or the env's own id, "
                f"got {self.gymnasium_id!r}"
            )
        object.__setattr__(self, "_fields", tuple(names))
        object.__setattr__(self, "_concrete", {})
        if isinstance(self.action_dim, bool) or not isinstance(self.action_dim, int) or self.action_dim < 1:
            raise ValueError(f"{self.id}: action_dim must be an int >= 1, got {self.action_dim!r}")
        if self.is_discrete and self.action_dim != 1:
            raise ValueError(f"{self.id}: a discrete env takes one action index per env (action_dim 1)")
        self._post_init_structure()

    def _post_init_structure(self) -> None:
        names = [s.name for s in self.structure]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.id}: structural keywords declared twice: {names}")
        reserved = sorted(set(names) & MAKE_KEYWORDS)
        if reserved:
            raise ValueError(f"{self.id}: structural keyword {reserved[0]!r} is one of make()'s own keywords")
        if not self.structure:
            if self.specialise is not None or self.structure_values:
                raise ValueError(f"{self.id}: specialise/structure_values need structure=(Structural(...), ...)")
            return
        if self.specialise is None:
            raise ValueError(f"{self.id}: an env with structure needs specialise(values) -> field changes")
        values = dict(self.structure_values) or {s.name: s.default for s in self.structure}
        if set(values) != set(names):
            raise ValueError(f"{self.id}: structure_values needs exactly {names}, got {sorted(values)}")
        for s in self.structure:
            s.check(values[s.name])
        # A plain dict (read-only by convention), so that a spec pickles (process pools, Ray workers).
        object.__setattr__(self, "structure_values", values)
        # The fields specialise() sets must be the ones this spec was declared with: a SPEC whose shape
        # disagrees with its own specialise() would run other sizes than with_structure() at the defaults.
        for name, value in self._changes(values).items():
            if not callable(value) and getattr(self, name) != value:
                raise ValueError(
                    f"{self.id}: {name} is {getattr(self, name)!r} but specialise({values}) gives {value!r}; "
                    f"declare the spec with the fields specialise gives"
                )

    def _changes(self, values: Mapping[str, int]) -> dict[str, Any]:
        """``specialise(values)``, checked to name only EnvSpec fields that a structure may change."""
        changes = dict(self.specialise(types.MappingProxyType(dict(values))))
        fixed = sorted(set(changes) & STRUCTURE_FIXED)
        if fixed:
            raise ValueError(f"{self.id}: specialise() may not change {', '.join(fixed)}")
        unknown = sorted(set(changes) - {f.name for f in fields(EnvSpec) if f.init})
        if unknown:
            raise ValueError(f"{self.id}: specialise() returned unknown EnvSpec fields {', '.join(unknown)}")
        return changes

    # ---- structural keywords -----------------------------------------------------------------
    def check_structure(self, values: Mapping[str, Any]) -> dict[str, int]:
        """Every structural value (the defaults overridden by ``values``), checked: an unknown keyword,
        a non-int, a bool or a value out of range raises ValueError naming the keyword."""
        declared = {s.name: s for s in self.structure}
        # make() passes every keyword it does not know itself here, so a misspelt option lands here too.
        options = "make's own options: backend, device, seed, dtype, autoreset, params"
        for name in values:
            if name not in declared:
                if not declared:
                    raise ValueError(f"{name}: {self.id} has no structural keywords (it takes no {name}=; {options})")
                raise ValueError(
                    f"{name}: {self.id} has no structural keyword {name!r}; its structural keywords: "
                    f"{', '.join(declared)} ({options})"
                )
        merged = dict(self.structure_values)
        for name, value in values.items():
            merged[name] = declared[name].check(value)
        return merged

    def with_structure(self, **values: Any) -> "EnvSpec":
        """The concrete spec for these structural values (the others at this spec's values), built once
        per values and cached; ``self`` when they are this spec's own."""
        merged = self.check_structure(values)
        if merged == dict(self.structure_values):
            return self
        key = tuple(sorted(merged.items()))
        spec = self._concrete.get(key)
        if spec is None:
            spec = replace(self, structure_values=merged, **self._changes(merged))
            # One cache for the whole family, so links=3 -> links=5 -> links=3 comes back to the same spec.
            self._concrete.setdefault(tuple(sorted(self.structure_values.items())), self)
            object.__setattr__(spec, "_concrete", self._concrete)
            spec = self._concrete.setdefault(key, spec)
        return spec

    @property
    def defines(self) -> dict[str, int]:
        """The structural values as the kernels' compile-time macros: ``{"PK_LINKS": 3}``."""
        return {s.define: int(self.structure_values[s.name]) for s in self.structure}

    @property
    def define_options(self) -> tuple[str, ...]:
        """:attr:`defines` as compiler options (``-DPK_LINKS=3``), for the OpenCL and CUDA builds and
        their program caches' keys."""
        return tuple(f"-D{name}={value}" for name, value in sorted(self.defines.items()))

    @property
    def kernel_key(self) -> str:
        """The kernel stem with the structural defines (``chain__PK_LINKS_3``; just the stem without any):
        what a backend keys its compiled programs of this env on, so links=3 and links=5 never share one."""
        return self.kernel + "".join(f"__{name}_{value}" for name, value in sorted(self.defines.items()))

    # ---- shape and action space --------------------------------------------------------------
    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def is_discrete(self) -> bool:
        return self.discrete_actions is not None

    @property
    def action_dtype(self) -> np.dtype:
        return np.dtype(np.int32 if self.is_discrete else np.float32)

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one env's action: ``()`` for a discrete env, ``(action_dim,)`` for a Box."""
        return () if self.is_discrete else (self.action_dim,)

    def random_actions(self, rng: np.random.Generator, n: int, overshoot: float = 1.2) -> np.ndarray:
        """Random valid actions ([N] int32, or [N, action_dim] float32); continuous ones spread to
        ``overshoot`` x the bound (the env clips)."""
        if self.is_discrete:
            return rng.integers(0, self.discrete_actions, n).astype(np.int32)
        hi = overshoot * self.action_high
        return rng.uniform(-hi, hi, (n, self.action_dim)).astype(np.float32)

    # ---- params ------------------------------------------------------------------------------
    @property
    def user_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if isinstance(p, Param))

    @property
    def defaults(self) -> dict[str, float]:
        """Gymnasium's defaults of the params a user may set."""
        return {p.name: p.default for p in self.user_params}

    @property
    def field_names(self) -> tuple[str, ...]:
        """Every field of the kernel params struct, in declaration order."""
        return self._fields

    def param_dtype(self, dtype: np.dtype) -> np.dtype:
        """The NumPy structured dtype of the params struct: one ``dtype`` field per param."""
        return np.dtype([(name, np.dtype(dtype)) for name in self._fields])

    @property
    def struct_name(self) -> str:
        return f"pk_{self.kernel}_params"

    def c_struct(self) -> str:
        """The C struct of the kernel params, one text for OpenCL C and CUDA C++ (fields of type ``REAL``)."""
        width = max(len(n) for n in self._fields)
        lines = [f"/* {self.id}: generated from portkern/envs/{self.kernel}.py (EnvSpec.c_struct) */",
                 f"typedef struct {self.struct_name} {{"]  # fmt: skip
        for p in self.params:
            what = f"default {p.default!r}, {p.domain}" if isinstance(p, Param) else "derived"
            doc = f"; {p.doc}" if p.doc else ""
            lines.append(f"    REAL {p.name + ';':{width + 1}s} /* {what}{doc} */")
        lines.append(f"}} {self.struct_name};")
        return "\n".join(lines) + "\n"

    def resolve_params(self, params: Mapping[str, float] | None) -> dict[str, float]:
        """Gymnasium's defaults overridden by ``params``, checked against each param's domain.

        Unknown names, non-numbers, values outside a domain and violated constraints are
        rejected, naming the param, its domain and the value.
        """
        merged = self.defaults
        if params is None:
            return merged
        if not isinstance(params, Mapping):
            raise TypeError(f"params: expected a dict of name -> float, got {type(params).__name__}")
        declared = {p.name: p for p in self.user_params}
        for name, value in params.items():
            if name not in declared:
                derived = " (a derived constant, computed from the others)" if name in self._fields else ""
                raise ValueError(
                    f"params: {self.id} has no parameter {name!r}{derived}; valid names: "
                    f"{', '.join(sorted(declared))}"
                )
            if isinstance(value, (bool, str, bytes)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
                raise TypeError(f"params[{name!r}]: expected a number, got {type(value).__name__} {value!r}")
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"params[{name!r}]: expected a number, got {value!r}") from None
            except OverflowError:  # an int beyond float's range
                raise ValueError(f"params[{name!r}]: expected a finite number, got an int of {value.bit_length()} bits") from None
            ok, words = DOMAINS[declared[name].domain]
            if not ok(value):
                raise ValueError(f"params[{name!r}]: expected {words} ({declared[name].domain}), got {value!r}")
            merged[name] = value
        for c in self.constraints:
            if not c.holds(merged):
                got = ", ".join(f"{n}={merged[n]!r}" for n in c.names)
                raise ValueError(f"params: {self.id} needs {c.text}, got {got}")
        return merged

    def kernel_values(self, params: Mapping[str, float]) -> dict[str, float]:
        """Every struct field's value: the params, then each derived constant in Python floats."""
        values = dict(params)
        for p in self.params:
            if isinstance(p, Derived):
                values[p.name] = float(p.fn(values))
        return values

    def param_vector(self, params: Mapping[str, float], dtype: np.dtype) -> KernelParams:
        """The kernel params: derived in float64, then cast once to the env dtype."""
        return KernelParams(self, self.kernel_values(params), np.dtype(dtype))


#: make()'s own keywords (VectorEnv's), which no structural keyword may shadow.
MAKE_KEYWORDS = frozenset({"backend", "device", "seed", "dtype", "autoreset", "params", "num_envs", "env_id"})
#: EnvSpec fields a structure may not change: the env's identity, its kernels and params struct, and the
#: structure itself. The reference functions may change (``reset=functools.partial(reset, links=k)``:
#: a reset cannot read K from its [N, 4] draws); backends key what they compile on ``kernel_key``.
STRUCTURE_FIXED = frozenset({"id", "kernel", "params", "gymnasium_id", "discrete_actions", "structure",
                             "specialise", "structure_values"})  # fmt: skip


def step_with(spec: EnvSpec, helpers: Mapping[str, Mapping[str, Callable]], cache: dict[str, Callable]) -> Callable:
    """``spec.step`` with the module-level helpers named in ``helpers[spec.kernel]`` swapped in, in its own copy
    of the env module's globals (the module is untouched): how a backend runs the reference where one of its
    helpers needs another form there (Python control flow on data under a tracer). Cached in ``cache``."""
    over = helpers.get(spec.kernel)
    if not over:
        return spec.step
    fn = cache.get(spec.kernel_key)  # a structural env's step may differ per structure (specialise)
    if fn is None:
        f = spec.step
        fn = cache[spec.kernel_key] = types.FunctionType(f.__code__, {**f.__globals__, **over}, f.__name__,
                                                     f.__defaults__, f.__closure__)  # fmt: skip
    return fn


def params_table(params: Sequence[Param | Derived]) -> list[tuple[str, str, str]]:
    """(name, default or 'derived', domain) rows, for docs."""
    return [
        (p.name, repr(p.default), p.domain) if isinstance(p, Param) else (p.name, "derived", "-")
        for p in params
    ]


#: What a variant keeps from its parent: the kernels it reuses hard-code them (sizes, action space,
#: the params struct, which its declared params lay out) or are checked against them (the reference).
KERNEL_FIELDS = ("kernel", "state_names", "obs_dim", "discrete_actions", "action_high", "action_dim", "reset", "step",
                 "observe", "structure", "specialise")  # fmt: skip


def variant(
    env_id: str,
    parent: EnvSpec,
    *,
    defaults: Mapping[str, float] | None = None,
    domains: Mapping[str, str] | None = None,
    perturb: Mapping[str, float] | None = None,
    **changes: Any,
) -> EnvSpec:
    """A portkern-only env that is ``parent`` with other defaults: ``parent``'s kernels (every API,
    looked up by ``parent.kernel``), params struct and reference dynamics, with its own id.

    ``defaults``, ``domains`` and ``perturb`` change those attributes of the parent's params by name;
    ``changes`` sets other :class:`EnvSpec` fields that no kernel reads (``max_episode_steps``,
    ``obs_low``/``obs_high``, ``test_state_box``, ``parity_states``, ``parity_tolerance``,
    ``constraints``, ...). The fields in :data:`KERNEL_FIELDS` stay the parent's: an env that needs
    other ones is an env module of its own, with its own kernels.

    >>> from portkern.envs import mountain_car
    >>> SPEC = variant("MountainCarSteep-v0", mountain_car.SPEC, defaults={"gravity": 0.0035})
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id: expected a non-empty string, got {env_id!r}")
    if not isinstance(parent, EnvSpec):
        raise TypeError(
            f"parent: expected the parent env's EnvSpec (e.g. `from .mountain_car import SPEC`), got {parent!r}"
        )
    fixed = sorted(set(changes) & {*KERNEL_FIELDS, "id", "params", "gymnasium_id"})
    if fixed:
        raise ValueError(
            f"{env_id}: a variant cannot set {', '.join(fixed)}: it reuses {parent.id}'s kernels, params struct "
            f"and reference (params change through defaults=/domains=/perturb=; other kernels need an env module)"
        )
    settable = {f.name for f in fields(EnvSpec) if f.init}
    unknown = sorted(set(changes) - settable)
    if unknown:
        raise TypeError(f"{env_id}: EnvSpec has no field {', '.join(unknown)}")
    declared = {p.name for p in parent.user_params}
    per_param: dict[str, dict[str, Any]] = {}
    for what, given in (("default", defaults), ("domain", domains), ("perturb", perturb)):
        for name, value in (given or {}).items():
            if name not in declared:
                derived = " (derived: change the params it is computed from)" if name in parent.field_names else ""
                raise ValueError(
                    f"{what}s: {parent.id} has no parameter {name!r}{derived}; valid names: {', '.join(sorted(declared))}"
                )
            if what != "domain":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"{what}s[{name!r}]: expected a number, got {value!r}")
                value = float(value)
            per_param.setdefault(name, {})[what] = value
    try:
        params = tuple(replace(p, **per_param[p.name]) if p.name in per_param else p for p in parent.params)
        spec = replace(parent, id=env_id, params=params, gymnasium_id=None, **changes)
        spec.resolve_params(spec.defaults)  # the new defaults meet every constraint
    except ValueError as exc:
        raise ValueError(f"{env_id} (a variant of {parent.id}): {exc}") from None
    return spec
