"""What every toolchain module shares: a located compiler, one build's result, and running a compiler.

A build here is compile-level only: the compiler's own resource report (registers, spills, scratch,
LDS/shared memory, SIMD width) for one source, target and option set. Nothing runs, so nothing here
is a measurement of speed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

#: How the project's CI installs the compilers (Debian 12, root): one apt line for every toolchain.
APT_PACKAGES = ("clang-19", "lld-19", "rocm-device-libs", "intel-opencl-icd", "hipcc", "clang-15",
                "llvm-spirv-15", "spirv-tools")  # fmt: skip
APT_INSTALL = "apt-get install --no-install-recommends " + " ".join(APT_PACKAGES)
#: A compiler that hangs must not hang the whole check (the slowest build here takes about 15 s).
TIMEOUT_S = 600


@dataclass(frozen=True)
class Tool:
    """A compiler found (``path`` set, ``version`` its own words) or not (``path`` None, ``install`` says how)."""

    name: str
    path: str | None
    version: str = ""
    install: str = ""
    notes: tuple[str, ...] = ()  # what was substituted and why (AMD device libraries)

    def __bool__(self) -> bool:
        return self.path is not None

    def missing(self) -> str:
        return f"not available here: {self.install}"


@dataclass
class KernelResult:
    """One kernel of one build: whether it built, and the compiler's resource figures (None: not reported)."""

    kernel: str
    builds: bool
    error: str = ""
    registers: dict[str, int] = field(default_factory=dict)  # VGPR/SGPR/AGPR (AMD), GRF (Intel), regs (NVIDIA)
    spills: int | None = None  # registers (AMD, Intel "around N") or bytes (NVIDIA spill stores) spilled
    scratch_bytes: int | None = None  # per lane (AMD), per thread (Intel, NVIDIA stack frame)
    lds_bytes: int | None = None  # LDS (AMD), SLM (Intel), static shared memory (NVIDIA)
    simd: int | None = None  # SIMD width (Intel), wave size (AMD)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "builds": self.builds, "error": self.error, "registers": self.registers,
                "spills": self.spills, "scratch_bytes": self.scratch_bytes, "lds_bytes": self.lds_bytes,
                "simd": self.simd, "extra": self.extra}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KernelResult":
        return cls(**{k: d.get(k) for k in ("kernel", "builds", "error", "registers", "spills", "scratch_bytes",
                                             "lds_bytes", "simd")}, extra=d.get("extra") or {})  # fmt: skip


class BuildFailed(Exception):
    """A build failed: ``line`` is the compiler's first error line."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def which(*names: str) -> str | None:
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


_local = threading.local()


@contextmanager
def cpu_meter() -> Iterator[list[float]]:
    """The CPU seconds (user + system) of every compiler :func:`run` starts in this thread inside the block, in
    ``box[0]``: one build's own cost, apart from the other builds running beside it (wall time under load is not)."""
    outer = getattr(_local, "box", None)
    box = _local.box = [0.0]
    try:
        yield box
    finally:
        _local.box = outer
        if outer is not None:
            outer[0] += box[0]


def run(cmd: list[str], cwd: str | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a compiler, output kept as text (its report comes on stderr for clang and ptxas, stdout for ocloc).

    As ``subprocess.run(capture_output=True)``, and the process's CPU seconds (its own and its waited-for
    children's: nvcc's cicc and ptxas) go to the thread's :func:`cpu_meter`."""
    if not hasattr(os, "wait4"):  # not POSIX: no per-process CPU figure
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace")  # fmt: skip
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        box = getattr(_local, "box", None)
        if box is not None:
            box[0] += usage.ru_utime + usage.ru_stime
        out.seek(0)
        err.seek(0)
        # As text=True reads them: universal newlines.
        stdout, stderr = (f.read().decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")
                          for f in (out, err))  # fmt: skip
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


_ERROR = re.compile(r"(?:fatal )?error\b[^:]*:", re.IGNORECASE)


def first_error(text: str) -> str:
    """The compiler's first error line (or its first non-empty line), trimmed to one line, paths shortened."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if _ERROR.search(ln):
            return _short(ln)
    return _short(lines[0]) if lines else "failed without a message"


def _short(line: str) -> str:
    line = re.sub(r"(/[^\s:]+/)+", "", line)  # the temp folder each build runs in says nothing
    return line[:200]


def version_line(path: str, *args: str) -> str:
    try:
        out = run([path, *args], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


@contextmanager
def staged(tool: Tool, source: str, filename: str) -> Iterator[Path]:
    """``source`` written as ``filename`` in a fresh temporary folder (removed afterwards), for ``tool`` to
    compile there: the path of the file. A compiler that is not here raises BuildFailed saying how to
    install it, before anything is written."""
    if not tool:
        raise BuildFailed(tool.missing())
    # A folder name without spaces: first_error() drops the whole path from a compiler's message.
    with tempfile.TemporaryDirectory(prefix=f"portkern-{re.sub(r'[^A-Za-z0-9]+', '-', tool.name)}-") as tmp:
        src = Path(tmp) / filename
        src.write_text(source)
        yield src
