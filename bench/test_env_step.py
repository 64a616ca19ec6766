"""Env stepping throughput (env steps/s), one case per env x backend x device x size."""

from __future__ import annotations

import pytest

from portkern.envs import ENVS


@pytest.mark.parametrize("env_id", list(ENVS))
def test_env_step(measure, env_id: str) -> None:
    measure(f"step:{env_id}")
