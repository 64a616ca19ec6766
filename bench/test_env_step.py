"""Env stepping throughput (env steps/s), one case per env x backend x device x size."""

from __future__ import annotations

import pytest

from portkern.envs import ENVS


@pytest.mark.pk_kernels(*(f"step:{e}" for e in ENVS))
def test_env_step(measure, case) -> None:
    measure(case.kernel)
