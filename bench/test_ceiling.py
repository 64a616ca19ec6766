"""The architectural ceiling: device-to-device copy bandwidth (bytes read + written per second)."""

from __future__ import annotations


def test_copy_bandwidth(measure) -> None:
    measure("copy")
