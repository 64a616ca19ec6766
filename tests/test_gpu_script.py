"""bench/gpu/run_gpu.sh, checked here before a lent GPU's minutes are spent on it.

The first H200 run lost most of its 8 minutes to limits too short for what they ran; a typo in a stack
name or a budget past 480 s would cost a whole run the same way. The script's own commands cannot run
here (no CUDA device), so this checks what can be: its syntax, that every stack and backend it names
parses, that its limits sum to at most 480 s, and that its sanitizer script runs (on cuda_host, the same
CUDA C on the CPU).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from portkern.backends import registry
from portkern.train.stacks import parse_stack

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu" / "run_gpu.sh"
TEXT = SCRIPT.read_text()
BUDGET_S = 480  # ../shared/device: 15 device-minutes a session, starts included; a rerun must fit too


def _loop_specs(first_item: str) -> list[tuple[str, int]]:
    """The "name:seconds" items of the for loop whose list starts with ``first_item``."""
    m = re.search(r'for spec in ("' + re.escape(first_item) + r".*?); do", TEXT, re.DOTALL)
    assert m, f"run_gpu.sh: no loop over specs starting with {first_item!r}"
    return [(name, int(limit)) for name, limit in re.findall(r'"([^"]+):(\d+)"', m.group(1))]


def test_the_script_parses():
    bash = shutil.which("bash")
    assert bash, "bash is needed to check run_gpu.sh"
    for script in (SCRIPT, SCRIPT.parent / "slim_tree.sh", SCRIPT.parent / "prepare.sh"):
        result = subprocess.run([bash, "-n", str(script)], check=False, capture_output=True, text=True)
        assert result.returncode == 0, f"{script.name}: {result.stderr}"


def test_every_training_stack_parses():
    specs = _loop_specs("cupy+eager-update")
    assert len(specs) >= 5
    for stack, _ in specs:
        parse_stack(stack)  # raises, naming the stack, on a typo


def test_every_bench_backend_exists():
    backends = [name for name, _ in _loop_specs("cupy:")]
    assert set(backends) <= set(registry.names()), backends


def test_the_limits_sum_to_the_budget():
    parity = sum(int(s) for s in re.findall(r"^parity \w+ (\d+) ", TEXT, re.MULTILINE))
    tools = re.search(r"for tool in ([\w ]+); do", TEXT).group(1).split()
    sanitizer = len(tools) * int(re.search(r'timeout (\d+) "\$sanitizer"', TEXT).group(1))
    gpu_bench = int(re.search(r"timeout (\d+) python3 bench/gpu/gpu_bench.py", TEXT).group(1))
    bench = sum(s for _, s in _loop_specs("cupy:"))
    train = sum(s for _, s in _loop_specs("cupy+eager-update"))
    total = parity + sanitizer + gpu_bench + bench + train
    assert 0 < total <= BUDGET_S, f"run_gpu.sh's limits sum to {total} s (budget {BUDGET_S} s)"
    # every timed command of the script is one of those counted above
    timed = re.findall(r'^[^#\n]*\btimeout ("\$limit"|\d+) ', TEXT, re.MULTILINE)
    assert len(timed) == 5, f"run_gpu.sh has {len(timed)} timed commands; this test counts 5 (update both)"


def test_the_sanitizer_script_runs_on_the_cuda_harness():
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu" / "sanitize.py"), "cuda_host"],
                            check=False, capture_output=True, text=True, timeout=600)  # fmt: skip
    if "cuda_host" in result.stderr and "unavailable" in result.stderr:
        pytest.fail(f"cuda_host is unavailable here: {result.stderr[-500:]}")
    assert result.returncode == 0 and "every kernel matched the reference" in result.stdout, (
        result.stdout[-2000:] + result.stderr[-2000:]
    )
