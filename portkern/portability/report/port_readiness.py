"""The report's "Port readiness: compiled, not run" section, from a ``portkern port-check --json`` file.

Kept apart from everything that ran: a kernel that builds for a GPU here has not run on it, so the
section never enters the functional matrix's shares, PP or any ratio. The functional table only
gains a "builds" column per vendor beside its "runs and passes parity" columns, never merged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ..port_check import LABEL, SCHEMA

TITLE = "Port readiness: compiled, not run"
#: The vendors whose GPUs get a "builds" column in the functional table, and their port-check toolchains.
BUILD_COLUMNS = {"AMD GPU": ("amd-ocl",), "Intel GPU": ("ocloc",)}


def is_port_check_file(path: str | Path) -> bool:
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        with p.open() as f:
            head = f.read(200)
    except OSError:
        return False
    return f'"schema": "{SCHEMA}"' in head


def summarise(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The section's data: the newest file's results, summary and toolchains (one port-check is one machine)."""
    docs = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        if d.get("schema") != SCHEMA:
            raise ValueError(f"{p}: not a port-check file (schema {d.get('schema')!r}, expected {SCHEMA!r})")
        docs.append((str(p), d))
    src, doc = max(docs, key=lambda x: x[1].get("created", ""))
    keep = ("file", "kernel", "entry", "dtype", "toolchain", "target", "builds", "registers", "spills", "occupancy")
    return {"source": src, "created": doc.get("created"), "summary": doc["summary"], "toolchains": doc["toolchains"],
            "mlp_hidden": doc.get("mlp_hidden"), "targets": doc["targets"],
            "results": [{k: r.get(k) for k in keep} for r in doc["results"]]}  # the report's own figures only


def _mlp_rollouts(sec: dict[str, Any]) -> list[list[str]]:
    """Headline rows: each target's fused MLP rollouts (float32): registers, spills, occupancy, range over envs."""
    want = f"rollout mlp{sec.get('mlp_hidden')}"
    rows = []
    for s in sec["summary"].values():
        rs = [r for r in sec["results"] if r["toolchain"] == s["toolchain"] and r["target"] == s["target"]
              and r["kernel"].endswith(want) and r["dtype"] == "float32" and r["builds"]]  # fmt: skip
        if not rs or s["target"] == "spirv":
            continue
        regs = [max(r["registers"].values(), default=0) for r in rs]
        spill = [r["spills"] or 0 for r in rs]
        occ = [r["occupancy"] for r in rs if r.get("occupancy")]
        occ_text = (f"{min(o['resident'] for o in occ)}–{max(o['resident'] for o in occ)} of {occ[0]['max']} "
                    f"{occ[0]['unit']}" if occ else "–")  # fmt: skip
        rows.append([s["toolchain"], s["target"], f"{min(regs)}–{max(regs)}",
                     f"{sum(1 for x in spill if x)}/{len(rs)}", str(max(spill)), occ_text])  # fmt: skip
    return rows


def markdown(sec: dict[str, Any]) -> list[str]:
    out = ["", f"## {TITLE}", "",
           f"**{LABEL[0].upper() + LABEL[1:]}.** Every kernel built for GPUs this machine does not have ({sec['source']}, "
           f"{sec['created']}); the figures are the compilers' own resource reports. Nothing here ran: no timing, "
           "no driver behaviour, no parity: whether a kernel runs and passes parity on a device is only in the "
           "functional matrix, from bench runs there. See docs/port-check.md.", ""]  # fmt: skip
    rows = []
    for s in sec["summary"].values():
        tool = sec["toolchains"].get(s["toolchain"], {})
        if not tool.get("available", True):
            rows.append([s["toolchain"], s["target"], "not available here: " + tool.get("install", ""), "–", "–"])
            continue
        rows.append([s["toolchain"], s["target"], f"{s['builds']}/{s['kernels']}", str(s["spilling"]),
                     s["failures"][0] if s["failures"] else "–"])  # fmt: skip
    out += _table(["toolchain", "target", "kernels that build", "spilling", "first failure"], rows)
    mlp = _mlp_rollouts(sec)
    if mlp:
        out += ["", f"Fused rollouts with the MLP policy (hidden width {sec.get('mlp_hidden')}, float32), over the "
                "envs: registers per thread (NVIDIA regs, AMD VGPRs, Intel GRF), how many spill, the most "
                "spilled (AMD/Intel: registers; NVIDIA: bytes of spill stores), occupancy the registers allow:",
                ""]  # fmt: skip
        out += _table(["toolchain", "target", "registers", "spilling", "most spilled", "occupancy"], mlp)
    out += ["", "Compilers: " + "; ".join(f"{tc}: {t['version']}" for tc, t in sec["toolchains"].items()
                                         if t.get("available"))]  # fmt: skip
    notes = [n for t in sec["toolchains"].values() for n in t.get("notes", [])]
    if notes:
        out += ["", "Substituted device libraries: " + "; ".join(dict.fromkeys(notes))]
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in esc]


def builds_cell(sec: dict[str, Any], vendor: str, kernel: str) -> str:
    """The functional table's "<vendor> (builds, not run)" cell of a benchmark kernel: compile-level, over the
    vendor's targets (the OpenCL C builds: the backend that would run there)."""
    from ...envs import ENVS

    parts = kernel.split(":")
    if parts[0] in ("step", "rollout") and len(parts) > 1:
        spec = ENVS.get(parts[1].split("/")[0])
        if spec is None:
            return "–"
        prefix = f"{spec.kernel} {'step' if parts[0] == 'step' else 'rollout'}"
        match = lambda r: r["kernel"].startswith(prefix)  # noqa: E731
    else:
        match = lambda r: r["entry"].startswith(f"pk_{parts[0]}")  # noqa: E731
    rs = [r for r in sec["results"] if r["toolchain"] in BUILD_COLUMNS[vendor] and match(r)]
    if not rs:
        return "–"
    targets = sorted({r["target"] for r in rs})
    bad = sorted({r["target"] for r in rs if not r["builds"]})
    n = len(targets)
    return f"builds ({n} target{'s' if n != 1 else ''})" if not bad else f"fails on {', '.join(bad)}"
