"""The three rollout data paths, side by side: host round-trip, one launch per step, fused (env-steps/s).

One case per ``rollout:<env>:<path>[:mlp]`` x backend x device x N; each times one T-step rollout into
a preallocated buffer. Parity first: the host path against the NumPy reference, the device and fused
paths against the host path's buffer on the same device.
"""

from __future__ import annotations

import pytest

from portkern.portability import suite


@pytest.mark.pk_kernels(*suite.ROLLOUT_KERNELS)
def test_rollout_paths(measure, case) -> None:
    measure(case.kernel)
