"""Training runs (``portkern train``, schema portkern-train/1) in the report and the cost model.

* :func:`load_train` reads and checks one training file.
* :func:`summarise` turns training files into the report's ``training`` section: per task and hardware,
  device-hours per converged policy (H) per stack, env steps to converge, env-steps/s, phase shares and the
  factor between the fastest and the slowest stack.
* :func:`cost_from_train` picks H (locked stack) and the throughput ratio (portable / locked env-steps/s)
  for ``portkern cost --train``.
* :func:`mixes_from_train` derives the report's default workload mixes from the measured phases;
  ``python -m portkern.portability.training derive-mixes TRAIN.json --stack numpy --out FILE`` writes them.

Modules: files (load), summary, render (report.md), cost, mixes. Nothing here imports torch or a backend: a report is built anywhere from the files alone.
"""

from __future__ import annotations

from .cost import cost_from_train, select
from .files import TRAIN_SCHEMA, TrainFileError, is_train_file, load_train
from .mixes import MIX_EXCLUDED, MIXES_SCHEMA, check_mixes, main, mixes_from_train, read_mixes, source_name
from .render import (
    DEFINITIONS, FUSED_NOTE, PLOT_PHASES, SHARE_PHASES, TITLE, finding, k_table, markdown, not_converged_text,
    plot_name, safe_name, table,
)  # fmt: skip
from .summary import (
    basis, factor, h_against_k, per_policy_s, phase_shares, pooled, stack_figures, summarise, throughput_factor,
)  # fmt: skip

__all__ = [
    "DEFINITIONS", "FUSED_NOTE", "MIXES_SCHEMA", "MIX_EXCLUDED", "PLOT_PHASES", "SHARE_PHASES", "TITLE", "TRAIN_SCHEMA",
    "TrainFileError", "basis", "check_mixes", "cost_from_train", "factor", "finding", "h_against_k", "is_train_file",
    "k_table", "load_train", "main", "markdown", "mixes_from_train", "not_converged_text", "per_policy_s", "phase_shares", "plot_name", "pooled",
    "read_mixes", "safe_name", "select", "source_name", "stack_figures", "summarise", "table", "throughput_factor",
]  # fmt: skip
