"""Benchmark cases: targets (backend x device), kernels, sizes, parity against the reference, knobs and the copy ceiling.

Modules: kernels (names, families, sizes), knobs, prepared (a case and its parity check), cases and rollouts
(making cases ready), timing (interleaved rounds), runinfo; targets and device identity come from
portkern.identity, which training runs share.
"""

from __future__ import annotations

from ...identity import (
    SIMULATOR_MARKERS, Target, canonical_vendor, cpu_model, device_info, machine_label, open_backend, slug, targets,
)  # fmt: skip
from ...runs import SCHEMA
from ..names import PATHS
from .cases import (
    BUFFER_T, EPS, GAMMA, GATHER_FEATURES, LAM, copy_bandwidth, device_copy, prepare, prepare_copy,
)  # fmt: skip
from .kernels import (
    DEVICE_PATH_IS_FUSED, KERNELS, MLP_ENVS, QUICK_ROLLOUT_T, QUICK_SIZES, ROLLOUT_KERNELS, ROLLOUT_T, SIM_ROLLOUT_T,
    SIM_SIZES, RolloutKernel, case_stack_class, comparison_kernel, family, full_sizes, quick_left_out, rollout_kernel,
    size_family,
)  # fmt: skip
from .knobs import (
    CASE_KNOBS, KNOBS, all_configs, applied, config_id, config_origin, current_config, knobs, resolved_config,
    tune_sizes,
)  # fmt: skip
from .prepared import ATOL, PARITY_STEPS, RATE_BASIS, RTOL, SEED, Parity, Prepared, rates
from .rollouts import DRIFT_ATOL, DRIFT_RTOL, FIELDS, MLP_FLIP_SHARE, MLP_HIDDEN, _compare_paths
from .runinfo import code_fingerprint, cpu_steal, cpu_ticks, cpu_ticks_each, run_info, worst_cpu_steal
from .timing import (
    CHUNKS, COLD_RETRY, GROUP_BUDGET_S, MAX_REPS, MIN_ROUNDS, MIN_RUN, QUICK_GROUP_BUDGET_S, QUICK_ROUNDS, QUICK_SLOT_S, QUICK_VISITS,
    ROUNDS, SLOT_S, STEAL_BURST, STEAL_MIN_TICKS, STEAL_RETIME, VISITS, _plan, calibrate, calibrate_launch, interleave, make_slot,
    round_summary, timed_undisturbed,
)  # fmt: skip

__all__ = [
    "ATOL", "BUFFER_T", "CASE_KNOBS", "CHUNKS", "COLD_RETRY", "DEVICE_PATH_IS_FUSED", "DRIFT_ATOL", "DRIFT_RTOL", "EPS",
    "FIELDS", "GAMMA", "GATHER_FEATURES", "GROUP_BUDGET_S", "KERNELS", "KNOBS", "LAM", "MAX_REPS", "MIN_ROUNDS", "MIN_RUN",
    "MLP_ENVS", "MLP_FLIP_SHARE", "MLP_HIDDEN", "PARITY_STEPS", "PATHS", "Parity", "Prepared",
    "QUICK_GROUP_BUDGET_S", "QUICK_ROLLOUT_T", "QUICK_ROUNDS", "QUICK_SIZES", "QUICK_SLOT_S", "QUICK_VISITS",
    "RATE_BASIS", "ROLLOUT_KERNELS", "ROLLOUT_T", "ROUNDS", "RTOL", "RolloutKernel", "SCHEMA", "SEED",
    "SIMULATOR_MARKERS", "SIM_ROLLOUT_T", "SIM_SIZES", "SLOT_S", "STEAL_BURST", "STEAL_MIN_TICKS", "STEAL_RETIME", "Target", "VISITS", "_compare_paths", "_plan",
    "all_configs", "applied", "calibrate", "calibrate_launch", "canonical_vendor", "case_stack_class", "code_fingerprint",
    "comparison_kernel", "config_id", "config_origin", "copy_bandwidth", "cpu_model", "cpu_steal", "cpu_ticks", "cpu_ticks_each", "current_config",
    "device_copy", "device_info", "family", "full_sizes", "interleave", "knobs", "machine_label", "make_slot",
    "open_backend", "prepare", "prepare_copy", "quick_left_out", "rates", "resolved_config", "rollout_kernel",
    "round_summary", "run_info", "size_family", "slug", "targets", "timed_undisturbed", "tune_sizes", "worst_cpu_steal",
]  # fmt: skip
