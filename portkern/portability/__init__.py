"""The portability benchmark: kernel cases, metrics, merged reports, re-tune search and the lock-in cost model."""

from __future__ import annotations

from .metrics import (
    application_efficiency, functional_share, pennycook_pp, retune_penalty, workload_ratio,
)  # fmt: skip

__all__ = ["application_efficiency", "functional_share", "pennycook_pp", "retune_penalty", "workload_ratio"]
