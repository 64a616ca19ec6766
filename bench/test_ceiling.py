"""The architectural ceiling: device-to-device copy bandwidth (bytes read + written per second)."""

from __future__ import annotations

import pytest


@pytest.mark.pk_kernels("copy")
def test_copy_bandwidth(measure, case) -> None:
    measure(case.kernel)
