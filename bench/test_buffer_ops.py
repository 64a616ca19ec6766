"""Rollout-buffer op throughput (elements/s or rows/s) over time-major [T, N] buffers."""

from __future__ import annotations

import pytest


@pytest.mark.pk_kernels("gae", "discounted_returns", "normalize", "gather")
def test_buffer_ops(measure, case) -> None:
    measure(case.kernel)
