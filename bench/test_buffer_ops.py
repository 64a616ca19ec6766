"""Rollout-buffer op throughput (elements/s or rows/s) over time-major [T, N] buffers."""

from __future__ import annotations


def test_gae(measure) -> None:
    measure("gae")


def test_discounted_returns(measure) -> None:
    measure("discounted_returns")


def test_normalize(measure) -> None:
    measure("normalize")


def test_gather(measure) -> None:
    measure("gather")
