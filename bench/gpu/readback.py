"""From a GPU run's archive to the report in one command.

    python bench/gpu/readback.py gpu-run.tar.gz [--cpu bench/results/<cpu run>/results.json ...]

unpacks bench/gpu/run_gpu.sh's archive into bench/results/<device>-<date>/ (the device as the run measured it:
``nvidia-h100-80gb-hbm3-2026-12-06``), merges its per-family gpu_bench_<family>.json files into one
gpu_bench.json, and runs `portkern report` over it, the quick bench's results.json (the GPU's rows in the
cross-device table), the training files and any CPU runs named with --cpu, into <that folder>/report/. It prints
where the lease's time went (timings/*.json: declared limit, used seconds, exit code) and which steps failed.
A rehearsal's archive (run_gpu.sh --rehearse) lands in rehearsal-<cpu>-<date>/; --results puts it elsewhere.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Written by each family process, merged here; every other key of theirs is a section.
_META = ("schema", "family", "backends", "started", "finished", "timings", "machine", "device", "copy_bandwidth",
         "process_seconds")  # fmt: skip


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def merge_gpu_bench(run: Path) -> Path | None:
    """The family files (gpu_bench_cuda.json, ...) as one gpu_bench.json: one section of the report, every backend
    in one table; the device's own ceilings (device.json) on top."""
    files = sorted(run.glob("gpu_bench_*.json"))
    if not files:
        return None
    device = _json(run / "device.json") or {}
    merged: dict[str, Any] = {"schema": "portkern-gpu-bench/1", "families": [], "machine": {}, "device": device,
                              "copy_bandwidth": device.get("copy") or {"skipped": "no device.json"},
                              "timings": []}  # fmt: skip
    starts, ends = [], []
    for f in files:
        data = _json(f)
        if not isinstance(data, dict):
            continue
        merged["families"].append({"family": data.get("family"), "backends": data.get("backends"),
                                   "finished": data.get("finished"), "process_seconds": data.get("process_seconds")})  # fmt: skip
        merged["machine"].update(data.get("machine") or {})
        merged["timings"] += [{"family": data.get("family"), **t} for t in data.get("timings") or []]
        starts.append(data.get("started"))
        ends.append(data.get("finished"))
        merged.update({k: v for k, v in data.items() if k not in _META})
    merged["started"] = min((s for s in starts if s), default=None)
    merged["finished"] = max(ends) if ends and all(ends) else None
    out = run / "gpu_bench.json"
    out.write_text(json.dumps(merged, indent=2, default=str))
    return out


def _extract(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Python < 3.11.4: the archive is our own, but check its names anyway
            bad = [m.name for m in tar.getmembers() if m.name.startswith("/") or ".." in Path(m.name).parts]
            if bad:
                raise ValueError(f"{archive}: unsafe member names {bad[:3]}")
            tar.extractall(into)  # noqa: S202 - names checked above
    run = into / "gpu-run"
    if not run.is_dir():
        raise ValueError(f"{archive}: no gpu-run/ folder inside (is it bench/gpu/run_gpu.sh's archive?)")
    return run


def _run_info(run: Path) -> dict[str, str]:
    info: dict[str, str] = {}
    tsv = run / "run.tsv"
    if tsv.exists():
        for line in tsv.read_text().splitlines():
            key, _, value = line.replace("\\t", "\t").partition("\t")
            info[key.strip()] = value.strip()
    return info


def folder_name(run: Path) -> str:
    info = _run_info(run)
    device = (_json(run / "device.json") or {}).get("name")
    if not device:
        cuda = _json(run / "gpu_bench_cuda.json") or {}
        smi = str((cuda.get("machine") or {}).get("nvidia_smi", ""))
        device = smi.split(",")[0] if smi and not smi.startswith("unavailable") else "unknown-gpu"
    device = re.sub(r"\(host CPU stand-in.*?\)", "", device)
    date = (info.get("started") or "")[:10] or "undated"
    prefix = "rehearsal-" if info.get("mode") == "rehearse" else ""
    return f"{prefix}{slug(device)}-{date}"


def timings(run: Path) -> list[dict[str, Any]]:
    return [t for t in (_json(p) for p in sorted((run / "timings").glob("*.json"))) if isinstance(t, dict)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archive", type=Path, help="gpu-run.tar.gz as the device tool brought it back")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results",
                    help="where the run's folder goes (default: bench/results)")  # fmt: skip
    ap.add_argument("--cpu", action="append", default=[], metavar="RUN.json",
                    help="a CPU bench run to report beside the GPU's (repeatable)")
    ap.add_argument("--name", help="the folder's name (default: <device>-<date> as the run recorded them)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every step exited 0 and wrote its files, and the report has the GPU "
                         "measurements and the GPU's rows in the cross-device table (the rehearsal's check)")  # fmt: skip
    args = ap.parse_args(argv)
    from portkern.portability import report  # after argparse: --help stays fast

    with tempfile.TemporaryDirectory() as tmp:
        run = _extract(args.archive, Path(tmp))
        name = args.name or folder_name(run)
        dest = args.results / name
        i = 2
        while dest.exists():
            dest, i = args.results / f"{name}-{i}", i + 1
        args.results.mkdir(parents=True, exist_ok=True)
        shutil.copytree(run, dest)
    problems: list[str] = []
    rows = timings(dest)
    print(f"{dest}: {len(rows)} step(s)")
    for t in rows:
        flag = "" if t.get("exit_code") == 0 and not t.get("missing") else "  <- " + (
            f"exit {t.get('exit_code')}" + (f", missing {t['missing']}" if t.get("missing") else ""))
        print(f"  {t.get('step', '?'):<20} limit {t.get('limit_s')} s, used {t.get('used_s')} s{flag}")
        if flag:
            problems.append(f"step {t.get('step')}: {flag.strip('<- ')}")
    gpu = merge_gpu_bench(dest)
    benches = sorted(dest.glob("bench-*/results.json"))
    trains = sorted(dest.glob("train/*.json"))
    inputs = ([str(gpu)] if gpu else []) + [str(p) for p in [*benches, *trains]] + [str(Path(c)) for c in args.cpu]
    if not inputs:
        print("nothing to report (no gpu_bench, bench or training file in the archive)", file=sys.stderr)
        return 1
    rep = report.write(inputs, dest / "report")
    print(f"wrote {dest / 'report' / 'report.md'} from {len(inputs)} file(s)")
    if args.check:
        md = (dest / "report" / "report.md").read_text()
        if gpu and "## GPU measurements" not in md:
            problems.append("report.md has no GPU measurements section")
        devices = (rep.get("cross_device") or {}).get("devices") or {}
        if benches and not any(str(d.get("machine", "")).startswith("lent-") for d in devices.values()):
            problems.append("the report's cross-device table has no row of the lent machine (lent-*)")
        if not rows:
            problems.append("no timings/*.json in the archive")
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    sys.exit(main())
