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
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

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


def family(kernel: str) -> str:
    """The knob family of a benchmark kernel name (``step:<env>``, ``rollout:<env>:<path>[:mlp]``, buffer ops)."""
    if kernel.startswith("step:"):
        return "step"
    if kernel.startswith("rollout:"):
        parts = kernel.split(":")
        return _FAMILY_OF_ROLLOUT_PATH.get(parts[2] if len(parts) > 2 else "", "rollout")
    return kernel


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


def cache_path() -> Path:
    """``PORTKERN_TUNE_CACHE``, else ``$XDG_CACHE_HOME/portkern/tuned-defaults.json`` (``~/.cache``)."""
    given = os.environ.get("PORTKERN_TUNE_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "portkern" / "tuned-defaults.json"


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
        sections = [entry.get(s, {}) for s in ("kernels", "families")] if isinstance(entry, dict) else [None]
        if not all(isinstance(sec, dict) and all(isinstance(c, dict) for c in sec.values()) for sec in sections):
            return f"devices[{key!r}] is not a mapping of kernels and families to configurations"
    return ""


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The shipped table of tuned defaults (rows per driver family)."""
    text = resources.files("portkern").joinpath("data", "tuned_defaults.json").read_text()
    data = json.loads(text)
    if data.get("schema") != TABLE_SCHEMA:
        raise ValueError(f"portkern/data/tuned_defaults.json: schema {data.get('schema')!r}, expected {TABLE_SCHEMA!r}")
    return data


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
    """Tuned defaults of one device, resolved per (kernel, family, knob).

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
        self._memo: dict[tuple[str | None, str, str], Resolved] = {}

    def resolve(self, knob: str, family_name: str, kernel: str | None = None) -> Resolved:
        key = (kernel, family_name, knob)
        if key not in self._memo:
            self._memo[key] = self._resolve(knob, family_name, kernel)
        return self._memo[key]

    def _resolve(self, knob: str, family_name: str, kernel: str | None) -> Resolved:
        for source, entry in self.sources:
            for section, name in (("kernels", kernel), ("families", family_name)):
                config = entry.get(section, {}).get(name) if name else None
                if config and knob in config and self.valid(knob, config[knob]):
                    return Resolved(config[knob], source, name)
        if knob not in self.fallback.get(family_name, {}):
            raise KeyError(f"no fallback for knob {knob!r} of kernel family {family_name!r}")
        return Resolved(self.fallback[family_name][knob], "fallback", "")

    def summary(self) -> dict[str, str]:
        """family -> "knob=value [source], ..." of the family-level defaults (kernels may refine them)."""
        out = {}
        for fam, knobs in self.fallback.items():
            parts = []
            for knob in knobs:
                r = self.resolve(knob, fam)
                parts.append(f"{knob}={'auto' if r.value is None else r.value} [{r.source}]")
            refined = sorted({k for _, e in self.sources for k in e.get("kernels", {}) if family(k) == fam})
            out[fam] = ", ".join(parts) + (f"; per kernel: {len(refined)}" if refined else "")
        return out

    def origin(self) -> str:
        """Where the defaults come from, in one line."""
        if not self.sources:
            return "fallback (no tuned entry for this device)" + "".join(f"; {p}" for p in self.problems)
        return "".join(f"{p}; " for p in self.problems) + ", then ".join(
            f"cache {cache_path()}" if s == "cache" else f"{s} ({e.get('measured', '')})" for s, e in self.sources
        ) + ", then fallback"


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


def _strip(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if not k.startswith("_")}


def device_entries(run_path: str | Path) -> list[tuple[Identity, dict[str, Any]]]:
    """(identity, entries) for each timed device of a tune run (a ``portkern tune`` results.json)."""
    run = load_run(str(run_path))
    # load_run keeps what reports group by; the identity (device name, driver) is in the raw entries.
    raw = json.loads(Path(run_path).read_text())["machine_info"]["portkern"]["devices"]
    out = []
    for d in raw:
        if d.get("kind") == "simulator" or not d.get("timed", True):
            continue
        recs = [r for r in run.records
                if r.device_key == d["device_key"] and r.backend == d["backend"] and r.kernel != "copy"]  # fmt: skip
        configs: dict[str, set[str]] = {}
        for r in recs:
            configs.setdefault(r.kernel, set()).add(r.config_key)
        if not any(len(c) > 1 for c in configs.values()):
            continue  # no kernel searched on this device (a bench run: its defaults only): nothing tuned
        ident = Identity(str(d["backend"]), str(d.get("platform", "")), str(d.get("device", "")).split(": ", 1)[-1],
                         str(d.get("driver", "")), str(d.get("kind", "")))  # fmt: skip
        out.append((ident, entries_from_records(recs)))
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
            "kernels": {k: _strip(c) for k, c in entries["kernels"].items()},
            "families": {f: _strip(c) for f, c in entries["families"].items()},
        }  # fmt: skip
        written.append(ident.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)
    return written


def table_row_from_run(run_path: str | Path, device: str, measured: str) -> dict[str, Any]:
    """A table row (``match``, ``measured``, ``kernels``, ``families``) from the tune run's device
    whose label contains ``device``; for making ``portkern/data/tuned_defaults.json``."""
    found = [(i, e) for i, e in device_entries(run_path) if device.lower() in f"{i.platform}: {i.device}".lower()]
    if len(found) != 1:
        raise ValueError(f"device {device!r}: expected one tuned device in {run_path}, found {len(found)}")
    ident, entries = found[0]
    return {
        "match": {"backend": ident.backend, "platform": ident.platform, "kind": ident.kind},
        "measured": f"{measured}; {ident.device}, driver {ident.driver}",
        "kernels": {k: _strip(c) for k, c in entries["kernels"].items()},
        "families": entries["families"],
    }
