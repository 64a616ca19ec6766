"""Default values of tuning knobs, from measurements: a per-machine cache, a shipped table, a fallback.

A knob (OpenCL's ``env_vector_width``, ``local_size``, ``reduce_wg``) left at :data:`TUNED` runs,
for the kernel being launched, the first of:

1. the **per-machine cache** written from ``portkern tune`` runs (:func:`write_cache`), keyed by
   the device's identity (backend, platform, device, driver: another driver version is another
   device) and the kernel (``step:CartPole-v1``) or its family (``step``);
2. the **shipped table** ``portkern/data/tuned_defaults.json``: tuned configurations per driver
   family (PoCL on CPUs, Intel's CPU runtime), measured by ``portkern tune`` on the machine each
   row names, matched by backend, platform and device type;
3. a **fallback** the backend documents, chosen to be safe rather than fast; never the width a
   driver advertises (Intel's CPU runtime advertises a preferred float width of 1, and 16 envs per
   work-item is 2.4x faster there).

Where each value came from is part of the answer (:class:`Resolved`), for ``describe()`` and the
benchmark results. Family entries are derived from the measurements too: the configuration whose
worst share of the best, over the family's kernels, is highest (a default has to serve them all).

**Size classes.** The best configuration depends on the launch's size (a layout that gives each
work-item 8192 envs leaves one work-item doing all the work at 512 envs), so ``portkern tune``
measures one size per class of :data:`SIZE_CLASSES` and the cache and the table hold an entry per
class (``classes``: class -> ``kernels`` / ``families``). A launch resolves the class of its own
size and reads, per source, that class's entry, then the source's class-free entry. The size a
class counts is the launch's parallel width, what a layout divides among work-items
(:func:`size_class`): the env count N of a step or rollout, the columns N of a scan over a
[T, N] buffer (``gae``, ``discounted_returns``: its T rows run in sequence inside each work-item,
so T changes the work per work-item, not how many there are), the elements of normalize, the rows
of a gather. The benchmark counts a scan case's size as T*N elements (T = :data:`SCAN_CASE_T`);
:func:`case_class` turns a benchmark size into the class its launches read, and a class's
``sizes`` list the benchmark sizes searched. The class-free ``kernels`` / ``families`` are what
files written before size classes hold (they apply to every class), and in a newer file the tune
run's largest size per kernel (for a class the run did not reach).
"""

from __future__ import annotations

import json
import math
import operator
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ._paths import cache_root
from .runs import load_run

#: A knob attribute holding this value runs the tuned default of the kernel being launched.
TUNED = "tuned"
CACHE_SCHEMA = "portkern-tune-cache/1"
TABLE_SCHEMA = "portkern-tuned-defaults/1"
#: Families whose kernel names start with these prefixes (see portkern.portability.suite.family).
_FAMILY_OF_ROLLOUT_PATH = {"fused": "fused", "host": "rollout", "device": "rollout"}
#: Knobs whose None means "what the driver advertises" (OpenCL's preferred vector width): such a
#: configuration runs the same kernel as one of the explicit values, so it is never made a default.
_ADVERTISED = ("env_vector_width",)

#: Size classes of a launch: (name, the parallel width it stays below; None: no bound). The bounds put
#: one size of each of the suite's step ladder, and of normalize's and gather's, in each class on the
#: development VM (step 2048 / 32768 / 524288 envs, buffers 8192 / 131072 / 2097152 elements or rows;
#: suite.full_sizes). A scan there runs 64 / 1024 / 16384 columns (small, small, medium), and
#: bench/cpu/buffer_peers.py's 128 x 4096 and 128 x 65536 are small and medium.
SIZE_CLASSES: tuple[tuple[str, int | None], ...] = (("small", 1 << 14), ("medium", 1 << 19), ("large", None))
CLASS_NAMES: tuple[str, ...] = tuple(name for name, _ in SIZE_CLASSES)
#: The class of a lookup that names no size (knob_in_force without one, describe()): the size the
#: tuned defaults were measured at before there were classes, the largest.
UNSIZED_CLASS = "large"
#: Resolved.size_class of a value from a class-free entry (see the module's docstring).
ALL_CLASSES = "all"
#: Ops that scan a [T, N] buffer backwards over t: N columns in parallel, T rows in sequence.
SCAN_OPS = ("gae", "discounted_returns")
#: T of the benchmark's [T, N] scan cases (portkern.portability.suite's BUFFER_T, kept equal by a
#: test): a scan case's size counts T*N elements, its launch's parallel width is size // SCAN_CASE_T.
SCAN_CASE_T = 128


def size_class(items: int) -> str:
    """The size class (a name in :data:`CLASS_NAMES`) of a launch whose parallel width is ``items``: the
    env count N of a step or rollout, the columns N of a [T, N] scan (not T*N: its rows are sequential),
    the elements of normalize, the rows of a gather. A benchmark size goes through :func:`case_class`."""
    try:
        n = operator.index(items)  # an int or a NumPy integer (sizes come from array shapes); never a float
    except TypeError:
        n = -1
    if isinstance(items, bool) or n < 0:
        raise ValueError(f"items: expected an int >= 0 (the launch's size), got {items!r}")
    for name, below in SIZE_CLASSES:
        if below is None or n < below:
            return name
    raise AssertionError("the last size class has no bound")  # pragma: no cover - SIZE_CLASSES ends unbounded


def case_items(kernel: str, size: int) -> int:
    """The parallel width (:func:`size_class`'s items) of a benchmark case of ``kernel`` at ``size``, the
    size as the suite and the tune records count it: a scan's T*N elements hold N = size // SCAN_CASE_T
    columns (at least 1, as the suite builds the case); any other kernel's size is its width already."""
    if kernel in SCAN_OPS and not isinstance(size, bool):
        try:
            n = operator.index(size)
        except TypeError:
            return size  # not a count: size_class refuses it, naming it
        if n > 0:
            return max(1, n // SCAN_CASE_T)
    return size


def case_class(kernel: str, size: int) -> str:
    """The size class whose entries a benchmark case of ``kernel`` at ``size`` launches with (:func:`case_items`)."""
    return size_class(case_items(kernel, size))


def classes_text() -> str:
    """The size classes in words, for describe() and docs: "small < 16384 items, medium < 524288, large"."""
    parts = [f"{name} < {below}" + (" items" if i == 0 else "") if below is not None else name
             for i, (name, below) in enumerate(SIZE_CLASSES)]  # fmt: skip
    return ", ".join(parts)


def sizes_per_class(sizes: Iterable[int], kernel: str | None = None) -> dict[str, int]:
    """class -> the largest of ``sizes`` in it (classes none of them reach are left out), largest class
    first: the one size per class a tune run times (the largest, as the search timed before classes).
    With ``kernel``, ``sizes`` are benchmark sizes of that kernel's cases (:func:`case_class`)."""
    out: dict[str, int] = {}
    for s in sorted(set(sizes), reverse=True):
        out.setdefault(size_class(s) if kernel is None else case_class(kernel, s), s)
    return dict(sorted(out.items(), key=lambda kv: -CLASS_NAMES.index(kv[0])))


def env_label(spec: Any) -> str:
    """An env's name in benchmark kernel names and tuned entries: its id, then ``/<name>=<value>`` for each
    structural value (EnvSpec.structure) away from its default, in declaration order (``Chain-v0/links=10``;
    plain ``Chain-v0`` at links=3). A K-link chain is compiled for its K, so its launches read entries
    tuned for that K and never another K's (portkern.portability.names parses these names)."""
    values = getattr(spec, "structure_values", {}) or {}
    return spec.id + "".join(f"/{s.name}={int(values[s.name])}" for s in getattr(spec, "structure", ())
                             if s.name in values and int(values[s.name]) != s.default)  # fmt: skip


def family(kernel: str) -> str:
    """The knob family of a benchmark kernel name (``step:<env>``, ``rollout:<env>:<path>[:mlp]``, buffer ops)."""
    if kernel.startswith("step:"):
        return "step"
    if kernel.startswith("rollout:"):
        parts = kernel.split(":")
        return _FAMILY_OF_ROLLOUT_PATH.get(parts[2] if len(parts) > 2 else "", "rollout")
    return kernel


def launch_family(kernel: str) -> str:
    """The family whose entry a launch of ``kernel`` reads when the kernel has none of its own: its search
    :func:`family`, but for the device path (``rollout:<env>:device``), which is searched with the rollout knobs
    (one step per launch: no ``steps_per_launch``) and launches the fused kernel, reading family "fused"."""
    parts = kernel.split(":")
    if parts[0] == "rollout" and len(parts) > 2 and parts[2] == "device":
        return "fused"
    return family(kernel)


@dataclass(frozen=True)
class Identity:
    """What a tuned configuration belongs to: one driver on one device (the program cache's key too)."""

    backend: str
    platform: str
    device: str
    driver: str
    kind: str  # "cpu", "gpu", "accelerator": the API's device type

    @property
    def key(self) -> str:
        return f"{self.backend} | {self.platform} | {self.device} | {self.driver}"


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str  # "cache", "table <row>" or "fallback"
    entry: str  # the kernel or family whose entry gave it ("" for the fallback)
    #: The size class whose entry gave it; ALL_CLASSES for a class-free entry, "" for the fallback or an
    #: attribute. Not part of equality: two lookups that read the same entry agree whatever class asked.
    size_class: str = field(default="", compare=False)

    def origin(self) -> str:
        """``source (entry[, class])``, as a benchmark case records it: the class named when its own entry gave it."""
        if not self.entry:
            return self.source
        cls = f", {self.size_class}" if self.size_class and self.size_class != ALL_CLASSES else ""
        return f"{self.source} ({self.entry}{cls})"


def cache_path() -> Path:
    """``PORTKERN_TUNE_CACHE``, else ``$XDG_CACHE_HOME/portkern/tuned-defaults.json`` (``~/.cache``)."""
    given = os.environ.get("PORTKERN_TUNE_CACHE")
    if given:
        return Path(given)
    return cache_root() / "tuned-defaults.json"


_DELETE_IT = "delete it (the next portkern tune writes a new one)"


def _read_json(path: Path, schema: str, fix: str = _DELETE_IT) -> dict[str, Any]:
    """The file's contents, {} when there is none; a ValueError naming the file, and ending in
    ``fix``, when it is not a ``schema`` file (the cache: ``devices`` mapping identity keys to
    entries whose kernels and families map to configurations)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable {schema} file ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a {schema} file (a JSON {type(data).__name__}, not an object); {fix}")
    if data.get("schema") != schema:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {schema!r}; {fix}")
    problem = _cache_problem(data.get("devices")) if schema == CACHE_SCHEMA else ""
    if problem:
        raise ValueError(f"{path}: a malformed {schema} file ({problem}); {fix}")
    return data


def _cache_problem(devices: Any) -> str:
    """What is wrong with a cache's ``devices`` ("" for nothing): entries are read at every launch."""
    if not isinstance(devices, dict):
        return "'devices' is not a mapping"
    for key, entry in devices.items():
        problem = _entry_problem(entry)
        if problem:
            return f"devices[{key!r}] {problem}"
    return ""


def _entry_problem(entry: Any) -> str:
    """What is wrong with one device's (or table row's) entry: its class-free part and its classes."""
    def configs_ok(part: Any) -> bool:
        sections = [part.get(s, {}) for s in ("kernels", "families")] if isinstance(part, dict) else [None]
        return all(isinstance(sec, dict) and all(isinstance(c, dict) for c in sec.values()) for sec in sections)

    if not configs_ok(entry):
        return "is not a mapping of kernels and families to configurations"
    classes = entry.get("classes", {})
    if not isinstance(classes, dict):
        return "has 'classes' that is not a mapping of size classes"
    for name, part in classes.items():
        if name not in CLASS_NAMES:
            return f"has size class {name!r}; the size classes are {', '.join(CLASS_NAMES)}"
        if not configs_ok(part):
            return f"has size class {name!r} that is not a mapping of kernels and families to configurations"
    return ""


#: The shipped table, as its errors name it.
TABLE_NAME = "portkern/data/tuned_defaults.json"


def check_table(data: Any, name: str = TABLE_NAME) -> dict[str, Any]:
    """``data`` when it is a table of tuned defaults (schema, ``rows`` mapping names to well-formed rows);
    else a ValueError naming ``name`` (the file) and what is wrong. The shipped table and a copy that
    ``portkern tune --merge --table FILE`` rewrites are checked alike, before and after the merge."""
    if not isinstance(data, dict):
        raise ValueError(f"{name}: not a {TABLE_SCHEMA} file (a JSON {type(data).__name__}, not an object)")
    if data.get("schema") != TABLE_SCHEMA:
        raise ValueError(f"{name}: schema {data.get('schema')!r}, expected {TABLE_SCHEMA!r}")
    rows = data.get("rows", {})
    if not isinstance(rows, dict):
        raise ValueError(f"{name}: 'rows' is not a mapping of row names to rows")
    for row_name, row in rows.items():
        problem = _entry_problem(row)
        if problem:
            raise ValueError(f"{name}: row {row_name!r} {problem}")
    return data


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The shipped table of tuned defaults (rows per driver family)."""
    text = resources.files("portkern").joinpath("data", "tuned_defaults.json").read_text()
    return check_table(json.loads(text))


def _cache_entry(identity: Identity) -> dict[str, Any] | None:
    if os.environ.get("PORTKERN_NO_TUNE_CACHE") == "1":
        return None
    return _read_json(cache_path(), CACHE_SCHEMA).get("devices", {}).get(identity.key)


def table_row(identity: Identity) -> tuple[str, dict[str, Any]] | None:
    """(name, row) of the first table row whose ``match`` fits: backend, platform, kind (all that it names)."""
    for name, row in table()["rows"].items():
        m = row.get("match", {})
        if all(str(m[k]).lower() == str(getattr(identity, k)).lower() for k in ("backend", "platform", "kind") if k in m):
            return name, row
    return None


class Defaults:
    """Tuned defaults of one device, resolved per (kernel, family, knob, size class).

    ``fallback``: family -> knob -> value, the backend's documented safe values; ``valid(knob, value)``
    rejects a measured value this device cannot run (a work-group over its limit), which then falls
    through to the next source.
    """

    def __init__(self, identity: Identity, fallback: Mapping[str, Mapping[str, Any]],
                 valid: Callable[[str, Any], bool] = lambda knob, value: True) -> None:  # fmt: skip
        self.identity = identity
        self.fallback = fallback
        self.valid = valid
        self.sources: list[tuple[str, dict[str, Any]]] = []
        self.problems: list[str] = []
        try:
            entry = _cache_entry(identity)
        except ValueError as exc:  # a broken cache must not take the backend down: warned, and said in origin()
            entry, self.problems = None, [str(exc)]
            warnings.warn(f"tuned defaults: {exc}. Meanwhile the shipped table applies", RuntimeWarning, stacklevel=3)
        if entry:
            self.sources.append(("cache", entry))
        row = table_row(identity)
        if row:
            self.sources.append((f"table {row[0]}", row[1]))
        self._memo: dict[tuple[str | None, str, str, str], Resolved] = {}

    def resolve(self, knob: str, family_name: str, kernel: str | None = None,
                size_class: str = UNSIZED_CLASS) -> Resolved:  # fmt: skip
        """The knob's value for a launch of ``kernel`` (family ``family_name``) in ``size_class``."""
        key = (kernel, family_name, knob, size_class)
        found = self._memo.get(key)  # the launch path: one dict hit
        if found is None:
            if size_class not in CLASS_NAMES:
                raise ValueError(f"size_class: expected one of {', '.join(CLASS_NAMES)}, got {size_class!r}")
            found = self._memo[key] = self._resolve(knob, family_name, kernel, size_class)
        return found

    def _resolve(self, knob: str, family_name: str, kernel: str | None, size_class: str) -> Resolved:
        # Per source, the launch's own class first, then the class-free entry; a source is finished
        # before the next is read (the device's own tune run, at whatever size, beats another machine's).
        for source, entry in self.sources:
            for part, cls in ((entry.get("classes", {}).get(size_class, {}), size_class), (entry, ALL_CLASSES)):
                for section, name in (("kernels", kernel), ("families", family_name)):
                    config = part.get(section, {}).get(name) if name else None
                    if config and knob in config and self.valid(knob, config[knob]):
                        return Resolved(config[knob], source, name, cls)
        if knob not in self.fallback.get(family_name, {}):
            raise KeyError(f"no fallback for knob {knob!r} of kernel family {family_name!r}")
        return Resolved(self.fallback[family_name][knob], "fallback", "")

    def summary(self) -> dict[str, str]:
        """family -> "knob=value [source], ..." of the family-level defaults (kernels may refine them),
        once when every size class reads the same, else per class ("small: ...; medium: ...; large: ...")."""
        out = {}
        for fam, knobs in self.fallback.items():
            own = fam if fam not in _FAMILY_OF_ROLLOUT_PATH.values() and fam != "step" else None  # a buffer op's entry
            per_class = {}
            for cls in CLASS_NAMES:
                parts = []
                for knob in knobs:
                    r = self.resolve(knob, fam, own, cls)
                    where = r.source + (f", {r.size_class}" if r.size_class not in ("", ALL_CLASSES) else "")
                    parts.append(f"{knob}={'auto' if r.value is None else r.value} [{where}]")
                per_class[cls] = ", ".join(parts)
            refined = sorted({k for _, e in self.sources
                              for part in (e, *e.get("classes", {}).values()) for k in part.get("kernels", {})
                              if launch_family(k) == fam})  # fmt: skip
            if len(set(per_class.values())) == 1:
                text = per_class[UNSIZED_CLASS]
            else:
                text = "; ".join(f"{cls}: {t}" for cls, t in per_class.items())
            out[fam] = text + (f"; per kernel: {len(refined)}" if refined else "")
        return out

    def origin(self) -> str:
        """Where the defaults come from, in one line, and the size classes a launch picks from."""
        if not self.sources:
            return "fallback (no tuned entry for this device)" + "".join(f"; {p}" for p in self.problems)

        def classes(e: Mapping[str, Any]) -> str:
            have = [c for c in CLASS_NAMES if c in e.get("classes", {})]
            return f"classes {', '.join(have)}" if have else "one entry for every class"

        return "".join(f"{p}; " for p in self.problems) + ", then ".join(
            f"cache {cache_path()}" if s == "cache" else f"{s} ({e.get('measured', '')}; {classes(e)})"
            for s, e in self.sources
        ) + f", then fallback; size classes by the launch's items: {classes_text()}" + "".join(
            f"; the cache has {classes(e)}" for s, e in self.sources if s == "cache")  # fmt: skip


# ---- from tune runs: the cache and the table -----------------------------------------------------
def _share_of_best(records: Iterable[Any]) -> dict[str, dict[str, tuple[dict[str, Any], float]]]:
    """kernel -> config key -> (config, rate / best rate of that kernel), at each kernel's largest size."""
    by_kernel: dict[str, list[Any]] = {}
    for r in records:
        by_kernel.setdefault(r.kernel, []).append(r)
    out: dict[str, dict[str, tuple[dict[str, Any], float]]] = {}
    for kernel, group in by_kernel.items():
        size = max(r.size for r in group)
        ok = [r for r in group if r.size == size and r.status == "pass" and r.items_per_s
              and not any(k in r.config and r.config[k] is None for k in _ADVERTISED)]
        if not ok:
            continue
        best = max(r.items_per_s for r in ok)
        out[kernel] = {r.config_key: (r.config, r.items_per_s / best) for r in ok}
    return out


def entries_from_records(records: Iterable[Any]) -> dict[str, Any]:
    """``{"kernels": {kernel: config}, "families": {family: config}}`` from one device's tune records.

    A kernel's entry is its fastest configuration; a family's is the one whose worst share of the
    best over the family's kernels is highest (ties: the higher geometric mean), among the
    configurations measured for every kernel of the family.
    """
    shares = _share_of_best(records)
    kernels = {k: max(v.values(), key=lambda cs: cs[1])[0] for k, v in sorted(shares.items())}
    families: dict[str, Any] = {}
    by_family: dict[str, list[str]] = {}
    for k in shares:
        # A family's entry is what launches without an entry of their own read: derived from the kernels whose
        # launches read it. The device path is searched as a "rollout" but launches read "fused", whose other
        # kernels are searched with steps_per_launch: it has a kernel entry only, and joins neither family.
        if launch_family(k) == family(k):
            by_family.setdefault(family(k), []).append(k)
    for fam, ks in sorted(by_family.items()):
        common = set.intersection(*(set(shares[k]) for k in ks))
        if not common:
            continue

        def score(ck: str, ks: list[str] = ks) -> tuple[float, float]:
            s = [shares[k][ck][1] for k in ks]
            return min(s), math.exp(sum(math.log(x) for x in s) / len(s))

        best = max(sorted(common), key=score)
        families[fam] = dict(shares[ks[0]][best][0], _worst_share=round(score(best)[0], 3))
    return {"kernels": kernels, "families": families}


def class_entries(records: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """size class -> :func:`entries_from_records` of the records in it (each kernel at its largest size
    in the class), for each class where some kernel was searched (more than one configuration timed);
    a kernel timed at its default only in a class tells nothing about that class's best."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        groups.setdefault((case_class(r.kernel, r.size), r.kernel), []).append(r)
    searched: dict[str, list[Any]] = {}
    for (cls, _), group in groups.items():
        top = max(r.size for r in group)
        if len({r.config_key for r in group if r.size == top}) > 1:
            searched.setdefault(cls, []).extend(group)
    out: dict[str, dict[str, Any]] = {}
    for cls in CLASS_NAMES:
        entries = entries_from_records(searched.get(cls, []))
        if entries["kernels"]:
            out[cls] = dict(entries, sizes=sorted({r.size for r in searched[cls]}))
    return out


def strip_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration without its bookkeeping keys (``_worst_share`` and any other ``_``-prefixed key):
    the knobs only, as a kernel's entry in the cache and the table holds them."""
    return {k: v for k, v in config.items() if not k.startswith("_")}


def _stripped(entries: Mapping[str, Any], worst_share: bool = False) -> dict[str, Any]:
    """The ``kernels`` / ``families`` of ``entries`` without bookkeeping keys (the table keeps a family's
    worst share: it says how well the default serves the family)."""
    return {"kernels": {k: strip_config(c) for k, c in entries["kernels"].items()},
            "families": {f: dict(c) if worst_share else strip_config(c) for f, c in entries["families"].items()}}  # fmt: skip


def _classes(entries: Mapping[str, Any], worst_share: bool = False) -> dict[str, Any]:
    """The ``classes`` section of a cache entry or table row: per class, its entries and the sizes measured."""
    return {cls: {**_stripped(e, worst_share), "sizes": e["sizes"]} for cls, e in entries.get("classes", {}).items()}


def device_entries(run_path: str | Path | Sequence[str | Path]) -> list[tuple[Identity, dict[str, Any]]]:
    """(identity, entries) for each timed device of a tune run (a ``portkern tune`` results.json), or of
    several runs together (searches of one device split over runs, e.g. one size class or kernel each):
    the class-free entries (each kernel at its largest size) and, under ``classes``, each size class's."""
    paths = [run_path] if isinstance(run_path, (str, Path)) else list(run_path)
    found: dict[Identity, list[Any]] = {}
    for path in paths:
        run = load_run(str(path))
        # load_run keeps what reports group by; the identity (device name, driver) is in the raw entries.
        raw = json.loads(Path(path).read_text())["machine_info"]["portkern"]["devices"]
        for d in raw:
            if d.get("kind") == "simulator" or not d.get("timed", True):
                continue
            ident = Identity(str(d["backend"]), str(d.get("platform", "")), str(d.get("device", "")).split(": ", 1)[-1],
                             str(d.get("driver", "")), str(d.get("kind", "")))  # fmt: skip
            found.setdefault(ident, []).extend(
                r for r in run.records if r.device_key == d["device_key"] and r.backend == d["backend"]
                and r.kernel != "copy")  # fmt: skip
    out = []
    for ident, recs in found.items():
        configs: dict[str, set[str]] = {}
        for r in recs:
            configs.setdefault(r.kernel, set()).add(r.config_key)
        if not any(len(c) > 1 for c in configs.values()):
            continue  # no kernel searched on this device (a bench run: its defaults only): nothing tuned
        out.append((ident, dict(entries_from_records(recs), classes=class_entries(recs))))
    return out


def write_cache(run_path: str | Path, path: str | Path | None = None) -> list[str]:
    """Add a tune run's best configurations to the per-machine cache (default :func:`cache_path`);
    returns the identities written, [] (and the cache untouched) when the run tuned no device.

    A cache that cannot be read (corrupt, another schema) is moved aside to ``<name>.unreadable``
    with a warning and a new one is written: the run's measurements must not be lost to it.
    """
    path = Path(path) if path is not None else cache_path()
    found = device_entries(run_path)  # the run is checked before the cache is touched
    if not found:
        return []
    kept = path.with_name(path.name + ".unreadable")
    try:
        data = _read_json(path, CACHE_SCHEMA, f"moved to {kept}, and a new cache written")
        data = data or {"schema": CACHE_SCHEMA, "devices": {}}
    except ValueError as exc:
        path.replace(kept)
        warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        data = {"schema": CACHE_SCHEMA, "devices": {}}
    written = []
    for ident, entries in found:
        data["devices"][ident.key] = {
            "backend": ident.backend, "platform": ident.platform, "device": ident.device,
            "driver": ident.driver, "kind": ident.kind, "run": str(Path(run_path).resolve()),
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            # Class-free: each kernel at the run's largest size, for a class the run did not reach
            # (and what a portkern from before size classes reads); then one entry per class measured.
            **_stripped(entries), "classes": _classes(entries),
        }  # fmt: skip
        written.append(ident.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)
    return written


def table_row_from_run(run_path: str | Path | Sequence[str | Path], device: str, measured: str) -> dict[str, Any]:
    """A table row (``match``, ``measured``, ``kernels``, ``families``, ``classes``) from the tune run's
    (or runs', :func:`device_entries`) device whose label contains ``device``; for making
    ``portkern/data/tuned_defaults.json``."""
    found = [(i, e) for i, e in device_entries(run_path) if device.lower() in f"{i.platform}: {i.device}".lower()]
    if len(found) != 1:
        raise ValueError(f"device {device!r}: expected one tuned device in {run_path}, found {len(found)}")
    ident, entries = found[0]
    return {
        "match": {"backend": ident.backend, "platform": ident.platform, "kind": ident.kind},
        "measured": f"{measured}; {ident.device}, driver {ident.driver}",
        **_stripped(entries, worst_share=True), "classes": _classes(entries, worst_share=True),
    }  # fmt: skip
