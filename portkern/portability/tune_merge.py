"""``portkern tune --merge ROW RUN.json [RUN.json ...]``: the winners of finished tune runs written into one row of
the table of tuned defaults (``portkern/data/tuned_defaults.json``, or ``--table FILE``).

Per size class the runs searched, each kernel's entry is its winner as :func:`portkern.tuning.class_entries`
picks it (the fastest configuration, by the median of its interleaved rounds, at the kernel's largest size in
the class), and each family's the configuration that serves the family's kernels best (the highest worst share
of the best, kept in the table as ``_worst_share``). Only the row's ``classes`` -> CLASS entries of the kernels
merged and of their families change (and the class's ``sizes`` gain the sizes searched); the class-free entries,
the other classes, kernels and rows are left as they are, byte for byte.

* The records merged are those of the runs' devices that the row's ``match`` fits (backend, platform, kind, as a
  launch finds its row), one device in all; simulators are never merged.
* ``--kernels K[,K...]``: only these kernels (a name selects itself and the kernels it is a prefix of before a
  ``:``, as ``portkern tune --kernels`` does: ``rollout:CartPole-v1`` selects its fused and device paths). A family
  entry is derived from every kernel of the family the runs timed (one with no entry of its own in the table runs
  the family's, so the family's default has to serve it too).
* A class's family entry is written only when every kernel of the row whose launches read that family (its
  class-free kernels of the family; for ``fused``, the device-path rollouts too) has an entry of its own in the
  class: a class's family entry is read before a kernel's class-free entry, and would shadow it.

Bad input (an unknown row, a file that is not a readable tune run, runs with nothing of the requested kernels)
raises a ValueError naming the argument, before the table is touched; the table is rewritten atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import tuning
from ..runs import Record, RunFileError, load_run
from .names import base_kernel

#: The shipped table of the checkout this module belongs to (what ``--table`` defaults to).
SHIPPED_TABLE = Path(tuning.__file__).parent / "data" / "tuned_defaults.json"


def selects(name: str, kernel: str) -> bool:
    """Whether ``--kernels`` entry ``name`` selects ``kernel``: the kernel itself or a family of it (the name
    is a prefix before a ``:``), a name without structural values selecting the kernel at every value."""
    if kernel == name or kernel.startswith(name + ":"):
        return True
    try:
        base = base_kernel(kernel)
    except ValueError:
        return False
    return base != kernel and (base == name or base.startswith(name + ":"))


def _launch_readers(fam: str, kernels: Iterable[str]) -> list[str]:
    """The kernels (of ``kernels``) whose launches read family ``fam`` when they have no entry of their own:
    their search family, or the family a launch reads (a device-path rollout reads ``fused``)."""
    return [k for k in kernels if tuning.family(k) == fam or tuning.launch_family(k) == fam]


def _platform(device: Mapping[str, Any]) -> str:
    """A run device's platform; runs written before the field had it as the device name's prefix."""
    if device.get("platform"):
        return str(device["platform"])
    name = str(device.get("device") or "")
    return name.split(": ", 1)[0] if ": " in name else ""


def _fits(match: Mapping[str, Any], device: Mapping[str, Any]) -> bool:
    """Whether a table row's ``match`` fits a run device (as tuning.table_row matches a device: case-blind)."""
    have = {"backend": str(device.get("backend") or ""), "platform": _platform(device),
            "kind": str(device.get("kind") or "")}  # fmt: skip
    return all(str(match[k]).lower() == have[k].lower() for k in have if k in match)


def _run_arg(path: str | Path) -> str:
    return f"--merge RUN.json {path}"


@dataclass
class MergeResult:
    """What a merge changed: ``changes`` lines (old -> new), ``notes`` (entries not written and why)."""

    row: str
    table: Path
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: bool = False
    data: dict[str, Any] = field(default_factory=dict)


def read_table(path: str | Path) -> dict[str, Any]:
    """The table file at ``path``, checked (tuning.check_table); a ValueError naming ``--table`` otherwise."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"--table {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--table {path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                         "truncated?") from None  # fmt: skip
    try:
        return tuning.check_table(data, str(path))
    except ValueError as exc:
        raise ValueError(f"--table {exc}") from None


def row_records(run_paths: Sequence[str | Path], row_name: str, row: Mapping[str, Any],
                kernels: Sequence[str] = ()) -> list[Record]:  # fmt: skip
    """The records of the tune runs' device that ``row`` matches, every kernel's but ``copy``'s (a family entry
    is derived from every kernel of the family: :func:`merge_row`); a ValueError naming the argument when a run
    cannot be read, is not a tune run, or holds no passing record of the kernels ``kernels`` select (of any
    kernel without), when one of ``kernels`` selects nothing, or when the runs' matching devices are several."""
    match = row.get("match", {})
    out: list[Record] = []
    devices: set[tuple[str, str]] = set()
    for path in run_paths:
        try:
            run = load_run(str(path))
        except RunFileError as exc:
            raise ValueError(f"{_run_arg(path)}: {str(exc).removeprefix(f'{path}: ')}") from None
        if not any(m.get("tune") for m in run.meta.values()):
            raise ValueError(f"{_run_arg(path)}: not a tune run (a benchmark run times each kernel's defaults only); "
                             "give the results.json of `portkern tune` or of `pytest bench --pk-tune`")  # fmt: skip
        # load_run keeps what reports group by; the platform and the timed flag are in the raw entries.
        raw = json.loads(Path(path).read_text())["machine_info"]["portkern"]["devices"]
        fit = {(str(d.get("backend")), str(d.get("device_key"))) for d in raw
               if isinstance(d, dict) and d.get("kind") != "simulator" and d.get("timed", True) is not False
               and _fits(match, d)}  # fmt: skip
        got = [r for r in run.records if (r.backend, r.device_key) in fit and r.kernel != "copy"]
        if not any(r.status == "pass" and (not kernels or any(selects(k, r.kernel) for k in kernels)) for r in got):
            what = f"of the kernels {','.join(kernels)} " if kernels else ""
            where = ", ".join(f"{k}={v}" for k, v in match.items()) or "any device"
            timed = sorted({f"{d.get('backend')} {d.get('device')}" for d in raw if isinstance(d, dict)
                            and d.get("kind") != "simulator"})  # fmt: skip
            raise ValueError(f"{_run_arg(path)}: no passing record {what}on a device of row {row_name} ({where}); "
                             f"its devices: {'; '.join(timed) or 'none'}")  # fmt: skip
        devices |= {(r.backend, r.device_key) for r in got}
        out += got
    if len(devices) > 1:
        raise ValueError(f"--merge RUN.json: the runs hold {len(devices)} devices that row {row_name} matches "
                         f"({'; '.join(f'{b} {k}' for b, k in sorted(devices))}): merge one device's runs at a time")
    for name in kernels:
        if not any(selects(name, r.kernel) and r.status == "pass" for r in out):
            found = sorted({r.kernel for r in out if r.status == "pass"})
            raise ValueError(f"--kernels {name}: no passing record of it in the runs; they have "
                             f"{', '.join(found)}")  # fmt: skip
    return out


def _text(config: Mapping[str, Any] | None) -> str:
    return "none" if config is None else json.dumps(config)


def merge_row(data: dict[str, Any], row_name: str, records: Sequence[Record], kernels: Sequence[str] = ()
              ) -> tuple[list[str], list[str]]:  # fmt: skip
    """Merge the winners of ``records`` into ``data["rows"][row_name]`` in place: (change lines, notes)."""
    row = data["rows"][row_name]
    chosen = [r for r in records if not kernels or any(selects(k, r.kernel) for k in kernels)]
    new = tuning.class_entries(chosen)
    # Families from every kernel of their family the runs timed (not the selected kernels only): a family entry
    # is what a kernel without an entry of its own runs, so it has to serve the kernels measured.
    fams = {tuning.family(r.kernel) for r in chosen}
    fam_new = tuning.class_entries([r for r in records if tuning.family(r.kernel) in fams])
    if not new:
        searched = sorted({r.kernel for r in chosen})
        raise ValueError(f"--merge RUN.json: no kernel was searched in any size class (each of {', '.join(searched)} "
                         "timed at one configuration per class): nothing to merge")  # fmt: skip
    changes, notes = [], []
    classes = row.setdefault("classes", {})
    for cls, entries in new.items():
        if cls not in classes:
            classes[cls] = {"kernels": {}, "families": {}, "sizes": []}
            # the classes in their order (small, medium, large), whatever order they were added in
            row["classes"] = classes = {c: classes[c] for c in tuning.CLASS_NAMES if c in classes}
        part = classes[cls]
        old_part = json.loads(json.dumps(part))
        part_k = part.setdefault("kernels", {})
        part_f = part.setdefault("families", {})
        for k, c in entries["kernels"].items():
            part_k[k] = tuning.strip_config(c)
        have = set(part_k)
        for fam, c in fam_new.get(cls, {}).get("families", {}).items():
            missing = sorted(set(_launch_readers(fam, row.get("kernels", {}))) - have)
            if missing:
                notes.append(f"{row_name} {cls}: family {fam} not written (it would shadow the class-free entries "
                             f"of {', '.join(missing)}, which have no {cls} entry)")  # fmt: skip
                continue
            part_f[fam] = dict(c)
        part["kernels"] = dict(sorted(part_k.items()))
        part["families"] = dict(sorted(part_f.items()))
        part["sizes"] = sorted(set(part.get("sizes", [])) | set(entries["sizes"]))
        for section in ("kernels", "families"):
            for name, c in part[section].items():
                before = old_part.get(section, {}).get(name)
                if before != c:
                    what = "kernel" if section == "kernels" else "family"
                    changes.append(f"{row_name} {cls} {what} {name}: {_text(before)} -> {_text(c)}")
        if old_part.get("sizes", []) != part["sizes"]:
            changes.append(f"{row_name} {cls} sizes: {old_part.get('sizes', [])} -> {part['sizes']}")
    for cls in tuning.CLASS_NAMES:
        if cls not in new and any(tuning.case_class(r.kernel, r.size) == cls for r in chosen):
            notes.append(f"{row_name} {cls}: not written (no kernel searched there: one configuration timed)")
    return changes, notes


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` afterwards, or (on any error) what it held before: a temporary file beside it,
    with its mode, replaces it in one rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def merge(row_name: str, run_paths: Sequence[str | Path], kernels: Sequence[str] = (),
          table: str | Path | None = None) -> MergeResult:  # fmt: skip
    """Merge the tune runs' winners into row ``row_name`` of ``table`` (default: the checkout's shipped table)
    and write it back, atomically, when something changed. Everything is checked before the file is touched."""
    path = Path(table) if table is not None else SHIPPED_TABLE
    data = read_table(path)
    rows = data.get("rows", {})
    if row_name not in rows:
        raise ValueError(f"--merge ROW {row_name!r}: no such row in {path}; the rows are {', '.join(rows) or 'none'}")
    if not run_paths:
        raise ValueError("--merge: expected ROW RUN.json [RUN.json ...], got no run file after the row")
    records = row_records(run_paths, row_name, rows[row_name], kernels)
    changes, notes = merge_row(data, row_name, records, kernels)
    tuning.check_table(data, str(path))  # the merged row is read at every launch: never write a malformed one
    result = MergeResult(row_name, path, changes, notes, data=data)
    if changes:
        write_atomically(path, json.dumps(data, indent=1) + "\n")
        result.written = True
        if path.resolve() == SHIPPED_TABLE.resolve():
            tuning.table.cache_clear()  # this process reads the new table from now on
    return result


# ---- the command line: options of `portkern tune`, and its --merge mode --------------------------------
#: Options of `portkern tune` that shape a run, with their defaults: --merge runs nothing, so none applies.
_RUN_ONLY = (("--backend", "backend", []), ("--device", "device", None), ("--quick", "quick", False),
             ("--rounds", "rounds", None), ("--sizes", "sizes", None), ("--rollout-steps", "rollout_steps", None),
             ("--machine", "machine", None), ("--out", "out", "out/bench"), ("--mix", "mix", []),
             ("--links", "links", None), ("--resume", "resume", False))  # fmt: skip


def add_options(p: argparse.ArgumentParser) -> None:
    """``--merge`` and ``--table`` of ``portkern tune`` (its ``--kernels`` limits a merge too)."""
    p.add_argument("--merge", nargs="+", default=None, metavar=("ROW RUN.json", "RUN.json"),
                   help="run nothing: write the winners of finished tune runs (their results.json files) into "
                        "row ROW of the table of tuned defaults, per size class searched and per kernel and family; "
                        "every other entry is left as it is; prints what changed (--kernels limits it; see "
                        "docs/tuning.md)")  # fmt: skip
    p.add_argument("--table", default=None, metavar="FILE",
                   help=f"with --merge: the table to rewrite (default: this checkout's {tuning.TABLE_NAME})")


def command(args: argparse.Namespace) -> int:
    """``portkern tune --merge``: print what changed in the table (or that nothing did)."""
    if not args.merge:
        raise ValueError("--table: goes with --merge ROW RUN.json [RUN.json ...] (the table a merge rewrites)")
    given = [opt for opt, name, default in _RUN_ONLY if getattr(args, name, default) != default]
    if given:
        raise ValueError(f"--merge: merges finished runs and runs nothing; drop {', '.join(given)}")
    kernels = [k for ks in getattr(args, "kernels", None) or [] for k in ks]
    result = merge(args.merge[0], args.merge[1:], kernels, args.table)
    for line in result.changes:
        print(line)
    for line in result.notes:
        print(f"note: {line}")
    if result.written:
        print(f"wrote row {result.row} of {result.table} ({len(result.changes)} change(s))")
    else:
        print(f"row {result.row} of {result.table} unchanged: the runs' winners are its entries already")
    return 0


__all__ = ["MergeResult", "add_options", "command", "merge", "merge_row", "read_table", "row_records", "selects"]
