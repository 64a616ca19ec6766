"""``portkern port-check``: every kernel builds for the seven GPU targets and SPIR-V on a machine with no GPU
(CI fails when one stops building), the CLI table and JSON, the report section, and a user's own file.

Compile-level only: nothing here runs a kernel on a GPU. A missing compiler is a skip with the install
command as its reason, and a failure where ``CI=true`` (CI installs them: docs/port-check.md).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from portkern import cli
from portkern._kernels import load_source
from portkern.envs import KERNEL_OWNERS
from portkern.portability import port_check, port_check_cli
from portkern.portability.report import port_readiness
from portkern.toolchains import TARGETS, amd, base, intel, nvidia, toolchain_tools
from portkern.toolchains.targets import TOOLCHAIN_API, occupancy

DATA = Path(__file__).parent / "data"
CASES = [(tc, t) for t, spec in TARGETS.items() for tc in spec.toolchains]


def _need(tc: str) -> None:
    tool = toolchain_tools([tc])[tc]
    if not tool:
        why = f"{tc}: {tool.missing()}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def full() -> dict:
    """The whole project check, every target and dtype (cached per build, so a warm run takes seconds). Under
    pytest-xdist each worker running this module's tests asks for it: a lock lets one compile while the others
    wait and then read its cache, instead of all compiling the same builds at once."""
    import fcntl

    lock = port_check.cache_dir().parent / "project-check.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        return port_check.check(port_check.project_jobs(list(TARGETS), list(port_check.DTYPES)))


def test_no_kernel_starts_to_spill_or_loses_occupancy(full: dict) -> None:
    """Regression guard: every kernel, target and dtype the committed baseline shows with 0 spilled registers and
    0 scratch/stack bytes (tests/data/port-check-clean.json, ``port_check.clean_rows`` of the committed check)
    still has both, and its occupancy is no lower. A kernel that got better is fine; remake the baseline
    (docs/port-check.md) to keep it so."""
    for tc in {tc for tc, _ in CASES}:
        _need(tc)
    base = json.loads((DATA / "port-check-clean.json").read_text())
    assert base["schema"] == port_check.CLEAN_SCHEMA and base["mlp_hidden"] == port_check.MLP_HIDDEN
    now = {tuple(r[:5]): r for r in port_check.clean_rows(full)["rows"]}
    every = {(r["toolchain"], r["target"], r["file"], r["kernel"], r["dtype"]): r for r in full["results"]}
    worse = []
    for *key, occ in base["rows"]:
        key = tuple(key)
        if key not in now:
            r = every.get(key)
            why = "no longer checked" if r is None else (
                f"builds={r['builds']} spills={r.get('spills')} scratch={r.get('scratch_bytes')} {r.get('error', '')}")
            worse.append(f"{' '.join(map(str, key))}: {why}")
        elif occ is not None and (now[key][5] or 0) < occ:
            worse.append(f"{' '.join(map(str, key))}: occupancy {now[key][5]} < {occ}")
    assert not worse, "kernels that got worse than the committed baseline:\n" + "\n".join(worse)


@pytest.mark.parametrize("toolchain", sorted(port_check.ROLLOUT_ONLY - {"spirv"}))
def test_the_rollout_alone_has_the_figures_of_the_whole_file(toolchain: str) -> None:
    """The MLP builds of clang and nvcc compile the rollout kernel alone (-DPK_ROLLOUT_ONLY): its figures equal those
    of the whole file's build, what the backends compile (CartPole, float32, both ways built here, uncached)."""
    _need(toolchain)
    target = {"nvcc": "sm_90", "amd-ocl": "gfx942", "amd-hip": "gfx942"}[toolchain]
    job = next(j for j in port_check.project_jobs([target], ["float32"])
               if j.toolchain == toolchain and j.file.startswith("cartpole.") and "-DPK_ROLLOUT_ONLY=1" in j.options)
    whole = port_check.Job(job.file, job.api, job.source, tuple(o for o in job.options if o != "-DPK_ROLLOUT_ONLY=1"),
                           job.dtype, job.toolchain, job.target, job.take)  # fmt: skip
    rows, _ = port_check.run_jobs([job, whole], workers=2, use_cache=False)
    figures = [{k: r[k] for k in ("builds", "registers", "spills", "scratch_bytes", "lds_bytes", "simd", "occupancy")}
               for r in rows]  # fmt: skip
    assert rows[0]["builds"] and figures[0] == figures[1]


def test_the_guard_fails_on_a_spill() -> None:
    """The guard's own check, on a made-up row: a kernel clean in the baseline that spills is not clean now."""
    row = {"builds": True, "spills": 0, "scratch_bytes": 0, "toolchain": "nvcc", "target": "sm_90", "file": "x.cu",
           "kernel": "k", "dtype": "float32", "occupancy": {"resident": 16}}
    assert port_check.clean_rows({"results": [row]})["rows"] == [["nvcc", "sm_90", "x.cu", "k", "float32", 16]]
    for bad in ({"spills": 4}, {"scratch_bytes": 32}, {"builds": False}):
        assert port_check.clean_rows({"results": [{**row, **bad}]})["rows"] == []


@pytest.mark.parametrize(("toolchain", "target"), CASES, ids=[f"{tc}-{t}" for tc, t in CASES])
def test_every_kernel_builds(full: dict, toolchain: str, target: str) -> None:
    _need(toolchain)
    rows = [r for r in full["results"] if r["toolchain"] == toolchain and r["target"] == target]
    api = TOOLCHAIN_API[toolchain]
    # Every env that owns a kernel file of the API appears with its reset, step and both fused rollouts.
    for stem in KERNEL_OWNERS:
        if any(r["file"].startswith(f"{stem}.") for r in rows):
            labels = {r["kernel"] for r in rows if r["file"].startswith(f"{stem}.")}
            assert {f"{stem} reset", f"{stem} step", f"{stem} rollout random",
                    f"{stem} rollout mlp{port_check.MLP_HIDDEN}"} <= labels, (stem, labels)  # fmt: skip
    assert {r["file"] for r in rows} >= {f"{s}{'.cu' if api == 'cuda' else '.cl'}" for s in ("gae", "normalize")}
    failed = [f"{r['file']} {r['kernel']} {r['dtype']}: {r['error']}" for r in rows if not r["builds"]]
    assert not failed, "\n".join(failed)
    if target != "spirv":  # SPIR-V is not machine code: no registers
        assert all(r["registers"] for r in rows), [r["kernel"] for r in rows if not r["registers"]]
        assert all(r["occupancy"] for r in rows)


def test_chain_cu_builds_as_hip(full: dict) -> None:
    _need("amd-hip")
    rows = [r for r in full["results"] if r["toolchain"] == "amd-hip" and r["file"] == "chain.cu"]
    assert rows and all(r["builds"] for r in rows), [r["error"] for r in rows if not r["builds"]]


def test_amd_occupancy_never_exceeds_the_compilers_own(full: dict) -> None:
    # clang reports its own occupancy (it also counts SGPRs and LDS); ours, from the VGPRs and the published
    # register file, must not claim more than the register file allows and never less than clang's figure.
    rows = [r for r in full["results"] if r["toolchain"].startswith("amd") and r["builds"]]
    if not rows:
        pytest.skip("no AMD build here")
    for r in rows:
        theirs = r["extra"].get("compiler_occupancy")
        assert r["occupancy"]["resident"] >= theirs, r
        assert r["occupancy"]["resident"] <= r["occupancy"]["max"]


def test_occupancy_follows_the_published_limits() -> None:
    # CUDA occupancy calculator, CC 9.0, 256-thread blocks: 128 regs -> 2 blocks -> 16 of 64 warps; 32 -> 64.
    assert occupancy("sm_90", {"regs": 128}, 0)["resident"] == 16
    assert occupancy("sm_90", {"regs": 32}, 0)["resident"] == 64
    # CDNA3: 512 VGPRs per lane, granule 8: 240 -> 2 waves; 64 -> 8 (the cap). RDNA3: 1536 / 24-granule.
    assert occupancy("gfx942", {"VGPR": 240}, 0)["resident"] == 2
    assert occupancy("gfx942", {"VGPR": 64}, 0)["resident"] == 8
    assert occupancy("gfx1100", {"VGPR": 100}, 0)["resident"] == 1536 // 120
    # Xe: 8 threads per EU with 128 GRF, 4 with 256.
    assert occupancy("pvc", {"GRF": 256}, 0)["resident"] == 4


def test_parsers_read_the_compilers_reports() -> None:
    text = ("ptxas info    : Compiling entry function 'pk_x' for 'sm_90'\n"
            "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
            "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n")  # fmt: skip
    (k,) = nvidia.parse_ptxas(text)
    assert (k.kernel, k.registers, k.spills, k.scratch_bytes, k.lds_bytes) == ("pk_x", {"regs": 40}, 8, 16, 2048)
    text = "\n".join(f"a.cl:1:1: remark: {line} [-Rpass-analysis=kernel-resource-usage]" for line in (
        "Function Name: pk_y", "    SGPRs: 30", "    VGPRs: 41", "    AGPRs: 0", "    ScratchSize [bytes/lane]: 4",
        "    SGPRs Spill: 2", "    VGPRs Spill: 1", "    LDS Size [bytes/block]: 512"))  # fmt: skip
    (k,) = amd.parse_remarks(text, 64)
    assert (k.registers, k.spills, k.scratch_bytes, k.lds_bytes) == ({"SGPR": 30, "VGPR": 41, "AGPR": 0}, 1, 4, 512)
    assert k.extra["sgprs_spill"] == 2  # into VGPR lanes, not memory: kept apart from the spills


def test_intel_private_memory_counts_as_scratch() -> None:
    """An array IGC cannot keep in registers: Xe-HPG puts it in private memory (per lane), which the figures
    count as scratch per thread (private bytes x SIMD width), so such a kernel is never called clean."""
    _need("ocloc")
    src = ("__kernel void k(__global float *o, int i) { float a[512];"
           " for (int j = 0; j < 512; ++j) a[j] = o[j] * 2.0f; o[0] = a[i & 511]; }")  # fmt: skip
    (k,) = intel.build(src, "private.cl", "dg2", ())
    assert k.extra["private_bytes"] >= 2048
    assert k.scratch_bytes >= k.extra["private_bytes"] * k.simd
    assert [] == port_check.clean_rows({"results": [{"builds": True, "spills": 0, "scratch_bytes": k.scratch_bytes,
                                                      "toolchain": "ocloc", "target": "dg2", "file": "private.cl",
                                                      "kernel": "k", "dtype": "float32"}]})["rows"]  # fmt: skip


def test_intel_register_file_option() -> None:
    """An MLP policy's kernels get 256 registers a thread on Xe-HPC, and on Xe-HPG for the envs that spill at 128;
    everything else 128."""
    from portkern._kernels import intel_gpu_options

    mlp, large, auto = ("-DREAL=float", "-DPK_MLP_HIDDEN=64"), ("-cl-intel-256-GRF-per-thread",), ()
    assert intel_gpu_options(True, mlp, "cartpole.cl") == large
    assert intel_gpu_options(False, mlp, "acrobot.cl") == large
    assert intel_gpu_options(False, mlp, "cartpole.cl") == auto
    assert intel_gpu_options(True, ("-DREAL=float",), "acrobot.cl") == auto
    assert intel_gpu_options(True, ("-DPK_MLP_RUNTIME_WIDTH=1",), "cartpole.cl") == auto


def test_intel_mlp_kernels_width_and_registers(full: dict) -> None:
    """The MLP's kernels on Intel GPUs (kernels/opencl/pk_policy.h, PK_MLP_SIMD): Xe-HPC SIMD16 with 256 registers,
    Xe-HPG SIMD8 (32-byte registers: at SIMD16 the first layer alone filled 128), with 256 for the envs listed."""
    from portkern._kernels import XEHPG_LARGE_GRF_MLP

    _need("ocloc")
    rows = [r for r in full["results"] if r["toolchain"] == "ocloc" and r["dtype"] == "float32"
            and ("mlp64" in r["kernel"] or r["kernel"] == "pk_mlp_forward")]  # fmt: skip
    assert len(rows) == 14
    for r in rows:
        if r["target"] == "pvc":
            want = (16, 256)
        else:
            want = (8, 256 if r["file"] in XEHPG_LARGE_GRF_MLP else 128)
        assert (r["simd"], r["registers"]["GRF"]) == want, r


@pytest.mark.parametrize("filename", ["acrobot.cl", "chain.cl"])
def test_the_xehpg_large_register_envs_still_need_them(monkeypatch: pytest.MonkeyPatch, filename: str) -> None:
    """XEHPG_LARGE_GRF_MLP is not stale: built with 128 registers on Xe-HPG, those MLP rollouts spill."""
    from portkern._kernels import XEHPG_LARGE_GRF_MLP

    _need("ocloc")
    assert filename in XEHPG_LARGE_GRF_MLP
    (job,) = [j for j in port_check.project_jobs(["dg2"], ["float32"])
              if j.file == filename and any(o.startswith("-DPK_MLP_HIDDEN=") for o in j.options)]  # fmt: skip
    monkeypatch.setattr(intel, "intel_gpu_options", lambda *a: ())
    got = {k.kernel: k for k in intel.build(job.source, job.file, "dg2", job.options)}
    rollout = got[f"pk_{filename[:-3]}_rollout"]
    assert rollout.registers["GRF"] == 128 and rollout.spills > 0


def test_isa_version_substitution_is_recorded() -> None:
    _need("amd-ocl")
    assert amd.isa_number("gfx942") == 9402 and amd.isa_number("gfx90a") == 9010
    tool = amd.find()
    have = {f.name for f in amd.system_device_libs().glob("oclc_isa_version_*.bc")}
    for t in ("gfx942", "gfx1100"):
        substituted = any(n.startswith(f"{t}:") for n in tool.notes)
        assert substituted == (f"oclc_isa_version_{t[3:]}.bc" not in have)


# ---- what makes a cold check cheaper must not change a figure --------------------------------------------------
def _hip(options: tuple[str, ...], pch: bool | None, source: str | None = None) -> list[dict]:
    src = source if source is not None else load_source("cuda", "gae.cu")
    return [k.as_dict() for k in amd.build(src, "gae.cu", "gfx942", options, "cuda", pch=pch)]


def test_hip_precompiled_header_gives_the_same_figures() -> None:
    _need("amd-hip")
    opts = (*port_check.DTYPES["float64"], "-DPK_UNUSED_BY_HEADERS=1")
    tool = amd.find()
    libs, _ = amd.device_libs(tool.path, tuple(amd.WAVE))
    made = amd.hip_pch(tool.path, "gfx942", libs, opts, force=True)
    assert made is not None and made[0].is_file()  # the precompiled path is the one taken below
    plain, pre = _hip(opts, pch=False), _hip(opts, pch=True)
    assert plain and pre == plain
    assert all(k["builds"] and k["registers"]["VGPR"] for k in pre)


def test_a_precompiled_header_clang_refuses_falls_back_to_the_plain_build(tmp_path: Path) -> None:
    _need("amd-hip")
    opts = ("-DREAL=float", f"-I{tmp_path}")  # -I: pinned, so this header is this test's own
    tool = amd.find()
    libs, _ = amd.device_libs(tool.path, tuple(amd.WAVE))
    path, _ = amd.hip_pch(tool.path, "gfx942", libs, opts, force=True)
    path.write_bytes(b"not a precompiled header")
    assert _hip(opts, pch=True) == _hip(opts, pch=False)
    assert amd.hip_pch(tool.path, "gfx942", libs, opts, force=True) is None  # not offered again
    # A source error is reported as the plain build reports it, and a good header stays.
    opts = ("-DREAL=float", f"-I{tmp_path / 'other'}")
    broken = 'extern "C" __global__ void f(float *x) { x[0] = ; }\n'
    assert amd.hip_pch(tool.path, "gfx942", libs, opts, force=True) is not None
    with pytest.raises(amd.BuildFailed) as with_pch:
        _hip(opts, pch=True, source=broken)
    with pytest.raises(amd.BuildFailed) as without:
        _hip(opts, pch=False, source=broken)
    assert with_pch.value.line == without.value.line == "gae.cu:1:49: error: expected expression"
    assert amd.hip_pch(tool.path, "gfx942", libs, opts, force=True) is not None


def test_only_macros_the_headers_never_spell_are_left_out_of_the_header() -> None:
    words = frozenset({"M_PI", "WIDTH", "__HIP__"})
    pinned, free = amd.split_macros(("-DREAL=float", "-DWIDTH=4", "-UM_PI", "-Ufoo", "-I/inc", "-DPK_X", "-D"),
                                    words)  # fmt: skip
    assert free == ("-DREAL=float", "-Ufoo", "-DPK_X")
    assert pinned == ("-DWIDTH=4", "-UM_PI", "-I/inc", "-D")


def test_run_counts_each_compilers_cpu_seconds() -> None:
    code = "import sys; sum(range(3 * 10**6)); print('out'); print('err', file=sys.stderr); sys.exit(3)"
    burn = [sys.executable, "-c", code]
    with base.cpu_meter() as outer:
        with base.cpu_meter() as inner:
            res = base.run(burn)
        base.run([sys.executable, "-c", "pass"])
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert 0 < inner[0] < outer[0]
    with pytest.raises(subprocess.TimeoutExpired):
        base.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_progress_lines_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    bar, progress = port_check_cli._progress(out)
    assert bar is None
    progress(1, 10, 0)
    assert out.getvalue() == ""  # a run shorter than PLAIN_EVERY_S (a warm one) prints nothing
    monkeypatch.setattr(port_check_cli, "PLAIN_EVERY_S", 0.0)
    progress(4, 10, 1)
    progress(10, 10, 1)  # done: the table follows
    assert out.getvalue().startswith("port-check: 4/10 builds done (1 cached) after ")
    assert len(out.getvalue().splitlines()) == 1


# ---- the command line ---------------------------------------------------------------------------------
def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_table_fits_100_columns_and_json_has_every_figure(capsys, tmp_path: Path) -> None:
    for tc in ("nvcc", "amd-ocl", "ocloc", "spirv"):
        _need(tc)
    out_json = tmp_path / "pc.json"
    rc, out, _ = _cli(capsys, "port-check", "--targets", "sm_90,gfx942,pvc,spirv", "--dtypes", "float32",
                      "--json", str(out_json))  # fmt: skip
    assert rc == 0
    assert max(len(ln) for ln in out.splitlines()) <= port_check_cli.WIDTH
    assert "compile-level, not a measurement of speed" in out
    doc = json.loads(out_json.read_text())
    assert doc["schema"] == port_check.SCHEMA and doc["label"] == port_check.LABEL
    assert set(doc["targets"]) == {"sm_90", "gfx942", "pvc", "spirv"}
    mlp = [r for r in doc["results"] if r["kernel"].endswith(f"rollout mlp{port_check.MLP_HIDDEN}")]
    assert {r["target"] for r in mlp} == {"sm_90", "gfx942", "pvc", "spirv"}
    for r in mlp:
        if r["target"] != "spirv":
            assert r["registers"] and r["spills"] is not None and r["occupancy"]["table"]
    assert all(t["version"] for t in doc["toolchains"].values() if t["available"])
    # Wall time and the compilers' own CPU time, of the check and of each build.
    assert doc["seconds"] >= 0 and doc["cpu_seconds"] >= 0
    assert all("build_cpu_seconds" in r for r in doc["results"])  # None: cached by a portkern that did not measure
    assert all("compile_cpu_seconds" in s for s in doc["summary"].values())


def test_report_section_is_apart_from_what_ran(capsys, tmp_path: Path) -> None:
    _need("amd-ocl")
    pc = tmp_path / "pc.json"
    assert _cli(capsys, "port-check", "--targets", "gfx942,spirv", "--dtypes", "float32", "--json", str(pc))[0] == 0
    out = tmp_path / "report"
    run = DATA / "synthetic-xeon-two-drivers-run.json"
    rc, _, err = _cli(capsys, "report", str(run), "--port-check", str(pc), "--out", str(out))
    assert rc == 0, err
    md = (out / "report.md").read_text()
    assert f"## {port_readiness.TITLE}" in md
    section = md.split(f"## {port_readiness.TITLE}", 1)[1]
    assert "not a measurement of speed" in section and "gfx942" in section
    # The functional table keeps its run columns and share row; the builds column sits beside them.
    func = md.split("## Functional portability", 1)[1].split("\n## ", 1)[0]
    header = func.strip().splitlines()[0]
    assert "AMD GPU (builds, not run)" in header and "Intel GPU (builds, not run)" in header
    assert "builds (1 target)" in func
    rep = json.loads((out / "report.json").read_text())
    assert rep["port_readiness"]["summary"] and "AMD GPU" not in json.dumps(rep["functional"])


# ---- a user's own kernels -------------------------------------------------------------------------------
USER_CL = """#include "scale.h"
__kernel void scale(__global float *x, int n) { int i = get_global_id(0); if (i < n) x[i] = x[i] * FACTOR; }
__kernel void shift(__global float *x, int n) { int i = get_global_id(0); if (i < n) x[i] += sin(x[i]); }
"""
USER_CU = """extern "C" __global__ void twice(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = SCALE * sinf(x[i]); }
"""


def test_a_user_file_gets_the_same_table(capsys, tmp_path: Path) -> None:
    _need("amd-ocl")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define FACTOR 2.0f\n")
    src = tmp_path / "my_kernels.cl"
    src.write_text(USER_CL)
    out_json = tmp_path / "mine.json"
    rc, out, err = _cli(capsys, "port-check", str(src), "-I", str(tmp_path / "inc"), "--kernels", "scale",
                        "--targets", "gfx942,gfx1100,spirv", "--json", str(out_json))  # fmt: skip
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert {r["kernel"] for r in doc["results"]} == {"scale"}
    assert all(r["builds"] for r in doc["results"])
    assert "scale" in out and max(len(ln) for ln in out.splitlines()) <= port_check_cli.WIDTH


def test_a_user_cu_file_with_a_define(capsys, tmp_path: Path) -> None:
    _need("nvcc")
    _need("amd-hip")
    src = tmp_path / "mine.cu"
    src.write_text(USER_CU)
    out_json = tmp_path / "mine.json"
    rc, _, err = _cli(capsys, "port-check", str(src), "-D", "SCALE=2.0f", "--targets", "sm_90,gfx942",
                      "--json", str(out_json))  # fmt: skip
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert {(r["kernel"], r["target"], r["builds"]) for r in doc["results"]} == {("twice", "sm_90", True),
                                                                               ("twice", "gfx942", True)}


def _bad(tmp_path: Path, *argv: str) -> tuple[int, str]:
    # A subprocess: exit code and stderr exactly as a user sees them (no traceback).
    res = subprocess.run([sys.executable, "-m", "portkern.cli", "port-check", *argv], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600, check=False)  # fmt: skip
    return res.returncode, res.stderr


def test_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    rc, err = _bad(tmp_path, str(tmp_path / "nope.cl"), "--targets", "spirv")
    assert rc == 2 and "nope.cl: no such file" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_a_syntax_error_is_one_line_naming_the_file(tmp_path: Path) -> None:
    _need("amd-ocl")
    src = tmp_path / "broken.cl"
    src.write_text("__kernel void f(__global float *x) { x[0] = ; }\n")
    rc, err = _bad(tmp_path, str(src), "--targets", "gfx942,spirv", "--no-cache")
    assert rc == 2 and "broken.cl: builds for no target" in err and "error" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_unknown_target_is_one_line_naming_it(tmp_path: Path) -> None:
    src = tmp_path / "ok.cl"
    src.write_text(USER_CL)
    rc, err = _bad(tmp_path, str(src), "--targets", "gfx942,sm_12")
    assert rc == 2 and "unknown target sm_12" in err and len(err.strip().splitlines()) == 1


def test_an_unknown_kernel_is_one_line_naming_it(tmp_path: Path) -> None:
    _need("amd-ocl")
    src = tmp_path / "ok.cl"
    src.write_text(USER_CL)
    (tmp_path / "scale.h").write_text("")  # FACTOR comes from -D
    rc, err = _bad(tmp_path, str(src), "-D", "FACTOR=2.0f", "-I", str(tmp_path), "--targets", "gfx942",
                   "--kernels", "nothere")  # fmt: skip
    assert rc == 2 and "nothere" in err and len(err.strip().splitlines()) == 1


def test_a_missing_compiler_is_a_row_not_a_crash(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setattr(intel, "which", lambda *names: None)
    intel.find.cache_clear()
    try:
        doc = port_check.check(port_check.project_jobs(["dg2"], ["float32"]), use_cache=False)
    finally:
        intel.find.cache_clear()
    assert not doc["toolchains"]["ocloc"]["available"]
    assert all(r["error"].startswith("not available here: apt-get install") for r in doc["results"])
    lines = port_check_cli.table_lines(doc)
    assert any("not available here: apt-get install" in ln and "ocloc" in ln for ln in lines)


def test_the_opencl_backend_passes_the_intel_register_option() -> None:
    """The backend builds with intel_gpu_options on an Intel GPU only (the same option the port-check's ocloc rows
    carry), Xe-HPC told apart by its float64."""
    from types import SimpleNamespace

    cl = pytest.importorskip("pyopencl")
    from portkern.backends._opencl_build import OpenCLPrograms

    def opts(kind: int, vendor: str, fp64: bool, options: tuple[str, ...], filename: str) -> tuple[str, ...]:
        fake = SimpleNamespace(device=SimpleNamespace(type=kind, vendor=vendor), supports_float64=fp64)
        return OpenCLPrograms._intel_options(fake, options, filename)

    gpu, cpu, mlp = cl.device_type.GPU, cl.device_type.CPU, ("-DREAL=float", "-DPK_MLP_HIDDEN=64")
    assert opts(gpu, "Intel(R) Corporation", True, mlp, "cartpole.cl") == ("-cl-intel-256-GRF-per-thread",)
    assert opts(gpu, "Intel(R) Corporation", False, mlp, "cartpole.cl") == ()
    assert opts(gpu, "Intel(R) Corporation", False, mlp, "chain.cl") == ("-cl-intel-256-GRF-per-thread",)
    assert opts(cpu, "Intel(R) Corporation", True, mlp, "cartpole.cl") == ()
    assert opts(gpu, "Advanced Micro Devices, Inc.", True, mlp, "cartpole.cl") == ()
