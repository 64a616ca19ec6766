"""``portkern port-check``: what a port costs before anyone runs it — every kernel built for every GPU
target on a machine that has none, with the compilers' own resource figures.

Compile-level, not a measurement of speed: a kernel that builds here may still be slow, wrong or
rejected by a driver on the device; one that fails here will not run there. See docs/port-check.md.

The project's kernels come from the registry, never a list kept here: each env that owns a kernel
file (``portkern.envs.KERNEL_OWNERS``, its structural ``-D`` options at their defaults) builds twice,
once as the backends build it for the random policy (its reset, step and fused rollout) and once
for an MLP policy of hidden width :data:`MLP_HIDDEN` (the fused rollout, ``-DPK_MLP_HIDDEN``); every
other kernel file of the API (the buffer ops, the MLP, the validation kernels) builds once per dtype,
its entry points named by ``portkern._abi``. Builds run in parallel, and each result is cached under
``$XDG_CACHE_HOME/portkern/port-check`` keyed by (source hash, target, options, compiler version).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import _abi
from .._kernels import API_NAMES, kernel_dir, load_source, mlp_width_option
from .._paths import cache_root
from ..toolchains import FLAGS, TOOLCHAINS, toolchain_tools
from ..toolchains.base import BuildFailed, KernelResult, cpu_meter
from ..toolchains.targets import TARGETS, TOOLCHAIN_API, occupancy

SCHEMA = "portkern-port-check/1"
LABEL = "compile-level, not a measurement of speed"
#: The MLP policy's hidden width of the checked fused rollouts (the benchmark's and the issue's width).
MLP_HIDDEN = 64
DTYPES = {"float32": ("-DREAL=float",), "float64": ("-DREAL=double", "-DPK_DOUBLE=1")}
#: A kernel asked for that the compiler's output does not have (a misspelt --kernels name).
NOT_IN_OUTPUT = "kernel not in the compiler's output"
_WORD = re.compile(r"\b(pk_\w+)\b")


@dataclass(frozen=True)
class Job:
    """One build: a source for one target by one toolchain; ``take`` maps the kernels kept to their row labels."""

    file: str
    api: str
    source: str
    options: tuple[str, ...]
    dtype: str
    toolchain: str
    target: str
    take: tuple[tuple[str, str], ...]  # (kernel name, row label); empty: every kernel the compiler reports
    expect: tuple[tuple[str, str], ...] = ()  # the rows of a failed build where ``take`` is empty

    def key(self, version: str) -> str:
        h = hashlib.sha256(self.source.encode())
        for part in (self.toolchain, self.target, *self.options, version, SCHEMA):
            h.update(b"\0" + part.encode())
        return h.hexdigest()[:24]


# ---- the project's kernels ----------------------------------------------------------------------
def _entries_in(source: str) -> list[str]:
    known = set(_abi.ENTRIES) | set(_abi.SAME_AS)
    return list(dict.fromkeys(w for w in _WORD.findall(source) if w in known))


def project_units(api: str, dtypes: Sequence[str]) -> list[tuple[str, str, tuple[str, ...], str, tuple, tuple]]:
    """(file, source, options, dtype, take, expect) of every project build of one API. A file other than an
    env's reports every kernel its build has; ``expect`` (its ``_abi`` entry points) names the rows if it fails."""
    from ..envs import KERNEL_OWNERS

    suffix = API_NAMES[api][1]
    units = []
    env_files = set()
    for stem, spec in KERNEL_OWNERS.items():
        name = f"{stem}{suffix}"
        if not (kernel_dir(api) / name).is_file():
            continue  # an env not ported to this API yet (the reference runs it)
        env_files.add(name)
        source = load_source(api, name)
        for dt in dtypes:
            opts = (*DTYPES[dt], *spec.define_options)
            units.append((name, source, opts, dt, tuple(
                (_abi.env_entry(stem, w), f"{stem} {w if w != 'rollout' else 'rollout random'}")
                for w in _abi.ENV_ENTRIES), ()))  # fmt: skip
            units.append((name, source, (*opts, *mlp_width_option(1, MLP_HIDDEN)), dt,
                          ((_abi.env_entry(stem, "rollout"), f"{stem} rollout mlp{MLP_HIDDEN}"),), ()))  # fmt: skip
    for path in sorted(kernel_dir(api).glob(f"*{suffix}")):
        if path.name in env_files:
            continue
        source = load_source(api, path.name)
        entries = _entries_in(source)
        if not entries:
            continue
        extra = mlp_width_option(1, MLP_HIDDEN) if "pk_mlp_forward" in entries else ()
        # A file that never reads REAL (the validation kernels) builds once, whatever the dtype.
        for dt in (dtypes if "REAL" in source else ("any",)):
            units.append((path.name, source, (*DTYPES.get(dt, ()), *extra), dt, (), tuple((e, e) for e in entries)))
    return units


#: Toolchains whose compilers generate each kernel of a file on its own (clang's and nvcc's figures for the rollout
#: are the same with or without the file's other kernels; tests/test_port_check.py checks it): an env file's MLP build
#: is compiled with -DPK_ROLLOUT_ONLY there, the reset and step being the random build's. IGC allocates a module at
#: once (its figures move a little without the other kernels), so ocloc builds the whole file as the backends do.
ROLLOUT_ONLY = frozenset({"nvcc", "amd-ocl", "amd-hip", "spirv"})


def _only_rollout(options: tuple[str, ...], toolchain: str, take: tuple) -> tuple[str, ...]:
    mlp_rollout = len(take) == 1 and take[0][1].endswith(f"rollout mlp{MLP_HIDDEN}")
    return (*options, "-DPK_ROLLOUT_ONLY=1") if mlp_rollout and toolchain in ROLLOUT_ONLY else options


def project_jobs(targets: Sequence[str], dtypes: Sequence[str]) -> list[Job]:
    """Every build of the project's kernels for ``targets``; float64 only where the target has it (the backends
    build float32 only on a device without float64)."""
    jobs = []
    for api in ("cuda", "opencl"):
        units = project_units(api, dtypes)
        for target in targets:
            for tc in TARGETS[target].toolchains:
                if TOOLCHAIN_API[tc] == api:
                    jobs += [Job(f, api, s, _only_rollout(o, tc, take), dt, tc, target, take, expect)
                             for f, s, o, dt, take, expect in units
                             if dt != "float64" or TARGETS[target].fp64]  # fmt: skip
    return jobs


def skipped(targets: Sequence[str], dtypes: Sequence[str]) -> list[str]:
    """What :func:`project_jobs` leaves out, and why."""
    return [f"{t} float64: {TARGETS[t].family} has no float64 hardware (no cl_khr_fp64); the OpenCL backend builds "
            "float32 only on such a device" for t in targets if "float64" in dtypes and not TARGETS[t].fp64]


def user_jobs(path: str, targets: Sequence[str], defines: Sequence[str], includes: Sequence[str],
              kernels: Sequence[str], dtypes: Sequence[str] = ()) -> list[Job]:  # fmt: skip
    """The builds of a user's own ``.cl`` / ``.cu`` file (a ValueError naming what is wrong with the input)."""
    p = Path(path)
    api = {".cl": "opencl", ".cu": "cuda"}.get(p.suffix)
    if api is None:
        raise ValueError(f"{path}: expected an OpenCL C .cl or a CUDA C .cu file")
    if not p.is_file():
        raise ValueError(f"{path}: no such file")
    for d in includes:
        if not Path(d).is_dir():
            raise ValueError(f"-I {d}: no such folder")
    source = p.read_text()
    opts = (*(f"-D{d}" for d in defines), *(f"-I{Path(d).resolve()}" for d in includes))
    take = tuple((k, k) for k in kernels)
    jobs = []
    for target in targets:
        for tc in TARGETS[target].toolchains:
            if TOOLCHAIN_API[tc] == api:
                for dt in dtypes or ("as given",):
                    jobs.append(Job(p.name, api, source, (*DTYPES.get(dt, ()), *opts), dt, tc, target, take))
    if not jobs:
        raise ValueError(f"--targets: none of {', '.join(targets)} builds {API_NAMES[api][0]} ({path})")
    return jobs


# ---- running ------------------------------------------------------------------------------------
def cache_dir() -> Path:
    return cache_root() / "port-check" / "builds"


def _run_job(job: Job, versions: dict[str, str], use_cache: bool) -> tuple[list[dict[str, Any]], bool]:
    """The job's kernel rows and whether they came from the cache."""
    f = cache_dir() / f"{job.key(versions[job.toolchain])}.json"
    if use_cache and f.is_file():
        try:
            return _rows(job, json.loads(f.read_text())), True
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    with cpu_meter() as cpu:
        try:
            built: dict[str, Any] = {"kernels": [k.as_dict() for k in TOOLCHAINS[job.toolchain](job)]}
        except BuildFailed as exc:
            built = {"error": exc.line}
        except Exception as exc:  # a crashed or timed-out compiler is this build's failure, not the check's
            built = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    # The compile's wall time (under load, other work's too) and its compilers' CPU seconds (its own cost); a
    # HIP build that made the shared precompiled header counts it (toolchains/amd.py: hip_pch).
    built["seconds"] = round(time.perf_counter() - t0, 2)
    built["cpu_seconds"] = round(cpu[0], 2)
    if use_cache and not built.get("error", "").startswith("not available here"):
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(built))
        tmp.replace(f)
    return _rows(job, built), False


def _rows(job: Job, built: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"file": job.file, "api": job.api, "dtype": job.dtype, "toolchain": job.toolchain, "target": job.target,
            "options": list(job.options), "build_seconds": built.get("seconds"),
            "build_cpu_seconds": built.get("cpu_seconds")}  # fmt: skip
    if "error" in built:
        names = job.take or job.expect or (("*", "*"),)
        return [{**base, **KernelResult(name, False, built["error"]).as_dict(), "kernel": label, "entry": name,
                 "occupancy": None} for name, label in names]  # fmt: skip
    got = {k["kernel"]: KernelResult.from_dict(k) for k in built["kernels"]}
    wanted = job.take or tuple((n, n) for n in got)
    rows = []
    for name, label in wanted:
        k = got.get(name) or KernelResult(name, False, NOT_IN_OUTPUT)
        occ = occupancy(job.target, k.registers, k.lds_bytes) if k.builds else None
        rows.append({**base, **k.as_dict(), "kernel": label, "entry": name, "occupancy": occ})
    return rows


#: A build's compilers' CPU seconds per 100 kB of source, and the factor for an MLP build (the median of each
#: over the project's builds on the 2-core development VM); ocloc's float64 builds cost about 1.4 times more.
_TOOL_COST = {"ocloc": (1.9, 6.0), "nvcc": (1.8, 2.7), "amd-hip": (1.0, 2.9), "amd-ocl": (1.0, 3.1),
              "spirv": (0.7, 1.4)}  # fmt: skip


def _cost(job: Job) -> float:
    per_byte, mlp_factor = _TOOL_COST.get(job.toolchain, (1.0, 3.0))
    mlp = any(o.startswith("-DPK_MLP_HIDDEN") for o in job.options)
    wide = job.toolchain == "ocloc" and "-DPK_DOUBLE=1" in job.options
    return per_byte * len(job.source) * (mlp_factor if mlp else 1.0) * (1.4 if wide else 1.0)


#: ``progress(done, total, cached)``: builds finished of all, and how many of those came from the cache.
Progress = Callable[[int, int, int], None]


def run_jobs(jobs: Sequence[Job], workers: int | None = None, use_cache: bool = True,
             progress: Progress | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every job's rows (in job order) and the toolchains used; compilers run ``workers`` at a time."""
    tools = toolchain_tools(sorted({j.toolchain for j in jobs}))
    versions = {tc: (t.version if t else "missing") + " ".join(FLAGS[tc]) for tc, t in tools.items()}
    out: list[list[dict[str, Any]]] = [[] for _ in jobs]
    hits = 0
    if not workers:  # one compiler per CPU this process may use
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # Longest first (by a rough cost), so a long compile does not start last while the other workers idle. With
    # hundreds of builds on two workers the order hardly matters; with many workers the longest build (about
    # 20 CPU-seconds) is the floor, and it has to start first.
    order = sorted(range(len(jobs)), key=lambda i: -_cost(jobs[i]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_run_job, jobs[i], versions, use_cache): i for i in order}
        for n, fut in enumerate(as_completed(futures), 1):
            out[futures[fut]], hit = fut.result()
            hits += hit
            if progress:
                progress(n, len(jobs), hits)
    meta = {tc: {"name": t.name, "available": bool(t), "version": t.version, "path": t.path,
                 "install": t.install, "notes": list(t.notes)} for tc, t in tools.items()}  # fmt: skip
    return [r for rows in out for r in rows], {"toolchains": meta, "cache_hits": hits, "builds": len(jobs),
                                                "workers": workers}  # fmt: skip


def _children_cpu() -> float:
    try:
        import resource  # POSIX only
    except ImportError:
        return 0.0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def check(jobs: Sequence[Job], workers: int | None = None, use_cache: bool = True,
          progress: Progress | None = None, left_out: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """The port-check document (the JSON of ``--json``); ``left_out``: builds not made, and why (:func:`skipped`).

    ``seconds`` is the check's wall time (cache reads, waits on a loaded machine and all); ``cpu_seconds`` the
    CPU time of every compiler it ran (each build's own share is its rows' ``build_cpu_seconds``)."""
    t0, c0 = time.perf_counter(), _children_cpu()
    rows, meta = run_jobs(jobs, workers, use_cache, progress)
    meta["left_out"] = list(left_out)
    return {"schema": SCHEMA, "label": LABEL, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "mlp_hidden": MLP_HIDDEN,
            "targets": {t: TARGETS[t].__dict__ for t in dict.fromkeys(j.target for j in jobs)},
            "seconds": round(time.perf_counter() - t0, 2), "cpu_seconds": round(_children_cpu() - c0, 2), **meta,
            "results": rows, "summary": summarise(rows)}  # fmt: skip


#: The regression guard's baseline (tests/data/port-check-clean.json): what :func:`clean_rows` keeps of a check.
CLEAN_SCHEMA = "portkern-port-check-clean/1"


def clean_rows(doc: dict[str, Any]) -> dict[str, Any]:
    """The rows of a check document whose kernel built with 0 spilled registers and 0 scratch/stack bytes, as
    (toolchain, target, file, kernel, dtype, occupancy or None) lists: the baseline a later check must not fall
    below (tests/test_port_check.py). SPIR-V rows carry no figures and are left out."""
    rows = []
    for r in doc["results"]:
        if r["builds"] and r.get("spills") == 0 and r.get("scratch_bytes") == 0:
            occ = (r.get("occupancy") or {}).get("resident")
            rows.append([r["toolchain"], r["target"], r["file"], r["kernel"], r["dtype"], occ])
    return {"schema": CLEAN_SCHEMA, "label": LABEL, "from": doc.get("created"), "mlp_hidden": doc.get("mlp_hidden"),
            "rows": sorted(rows, key=lambda x: [str(v) for v in x])}


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per (toolchain, target): kernels built of all, kernels that spill, and the failures' first errors."""
    out: dict[str, Any] = {}
    seen = set()
    for r in rows:
        s = out.setdefault(f"{r['toolchain']}:{r['target']}", {"toolchain": r["toolchain"], "target": r["target"],
                                                                 "kernels": 0, "builds": 0, "spilling": 0,
                                                                 "failures": [], "missing": False,
                                                                 "compile_seconds": 0.0,
                                                                 "compile_cpu_seconds": 0.0})  # fmt: skip
        build = (r["file"], tuple(r["options"]), r["toolchain"], r["target"])
        if build not in seen:  # one compile makes every kernel of its file: count its time once
            seen.add(build)
            s["compile_seconds"] = round(s["compile_seconds"] + (r.get("build_seconds") or 0.0), 2)
            s["compile_cpu_seconds"] = round(s["compile_cpu_seconds"] + (r.get("build_cpu_seconds") or 0.0), 2)
        s["kernels"] += 1
        s["builds"] += bool(r["builds"])
        s["spilling"] += bool(r["builds"] and r.get("spills"))
        if not r["builds"]:
            s["missing"] = s["missing"] or r["error"].startswith("not available here")
            if len(s["failures"]) < 20:
                s["failures"].append(f"{r['file']} {r['kernel']} {r['dtype']}: {r['error']}")
    return out
