"""bench/cpu/purejaxrl_peer.py: the convergence criterion it applies to PureJaxRL's metrics, the config it gives
both sides, and its argument errors (PureJaxRL itself is not installed in CI: the runs are not exercised here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from portkern.train import config as train_config

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "cpu" / "purejaxrl_peer.py"


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("purejaxrl_peer", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_converged_update_is_portkern_criterion(peer) -> None:
    # 3 updates x 2 steps x 2 envs; episodes finish at (u0,t1,e0)=10, (u1,t0,e1)=30, (u2,t1,e0)=50, (u2,t1,e1)=70
    returns = np.zeros((3, 2, 2))
    finished = np.zeros((3, 2, 2), bool)
    for (u, t, e), r in {(0, 1, 0): 10, (1, 0, 1): 30, (2, 1, 0): 50, (2, 1, 1): 70}.items():
        returns[u, t, e], finished[u, t, e] = r, True
    assert peer.converged_update(returns, finished, window=2, target=20) == 2  # [10, 30] after update 2: mean 20
    assert peer.converged_update(returns, finished, window=2, target=20.5) == 3  # [50, 70] after update 3
    assert peer.converged_update(returns, finished, window=3, target=100) is None
    assert peer.converged_update(returns, finished, window=1, target=10) == 1


def test_default_config_is_the_same_on_both_sides(peer) -> None:
    pinned = train_config.task("CartPole-v1")
    pjx = peer.purejaxrl_config("default", pinned)
    task = train_config.task("CartPole-v1", **peer.default_overrides(pjx))
    c = task.ppo
    assert (c.num_envs, c.num_steps, c.lr, c.update_epochs, c.num_minibatches) == (4, 128, 2.5e-4, 4, 4)
    assert task.total_timesteps == 500_000
    # the settings PureJaxRL does not override are portkern's pinned ones, and equal to PureJaxRL's
    assert (c.gamma, c.gae_lambda, c.clip_coef, c.ent_coef, c.vf_coef, c.max_grad_norm) == (
        pjx["GAMMA"], pjx["GAE_LAMBDA"], pjx["CLIP_EPS"], pjx["ENT_COEF"], pjx["VF_COEF"], pjx["MAX_GRAD_NORM"])
    pinned_pjx = peer.purejaxrl_config("pinned", pinned)
    assert (pinned_pjx["NUM_ENVS"], pinned_pjx["NUM_STEPS"], pinned_pjx["LR"]) == (32, 64, 1e-3)


def test_arguments_are_checked(peer, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        peer.main(["--purejaxrl", str(tmp_path)])
    assert "no purejaxrl/ppo.py there" in capsys.readouterr().err
    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text("")
    with pytest.raises(SystemExit):
        peer.main(["--purejaxrl", str(tmp_path), "--seeds", "1,x"])
    assert "--seeds: expected comma-separated integers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        peer.main(["--purejaxrl", str(tmp_path), "--stacks", "nonsense+stack"])
    assert "--stacks:" in capsys.readouterr().err
