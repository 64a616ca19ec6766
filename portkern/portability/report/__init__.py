"""The merged portability report: summary, which device runs each kernel and workload fastest (and at what price),
functional matrix, efficiencies and ratios with intervals, PP, workload penalties, the stack-class spectrum, data
paths and re-tune penalties.

Modules, lowest first: format (figures as text), definitions, mixes, rounds (per-round arithmetic), sections
(spectrum, data paths, re-tune), crossdevice (devices side by side, prices), summary, model (:func:`build`),
render (report.md), plots, compare (two runs), gpu_bench (bench/gpu/gpu_bench.py's figures), files (:func:`write`).
"""

from __future__ import annotations

from ...runs import Record, Run, load_run, merge
from ..names import KERNEL_ORDER, functional_kernel, rollout_parts
from ..training.mixes import check_mixes
from . import gpu_bench
from .compare import compare, compare_markdown, write_comparison
from .crossdevice import cross_device, parse_prices
from .definitions import DEFINITIONS
from .files import build_all, write
from .mixes import DEFAULT_MIXES, DEFAULT_MIXES_SOURCE, DEFAULT_MIXES_SOURCES, MIXES_FILE, MIXES_FILES, mix_origin, parse_mix
from .model import REPORT_SCHEMA, build, report_devices, workload
from .render import (
    CROSS_DEVICE_TITLE, DATA_PATHS_TITLE, SUMMARY_TITLE, data_paths_table, headline, markdown, mix_note, spectrum_table, training_tables,
)  # fmt: skip
from .rounds import _compare
from .sections import data_paths, retune, spectrum
from .summary import summary

__all__ = [
    "gpu_bench",
    "CROSS_DEVICE_TITLE", "DATA_PATHS_TITLE", "DEFAULT_MIXES", "DEFAULT_MIXES_SOURCE", "DEFAULT_MIXES_SOURCES", "DEFINITIONS",
    "KERNEL_ORDER", "MIXES_FILE", "MIXES_FILES",
    "REPORT_SCHEMA", "SUMMARY_TITLE", "Record", "Run", "_compare", "build", "build_all", "check_mixes", "compare",
    "compare_markdown", "cross_device", "data_paths", "data_paths_table", "functional_kernel", "headline", "load_run", "markdown",
    "merge", "mix_note", "mix_origin", "parse_mix", "parse_prices", "report_devices", "retune", "rollout_parts", "spectrum",
    "spectrum_table", "summary", "training_tables", "workload", "write", "write_comparison",
]  # fmt: skip
