"""TorchRL as a client: ``GymEnv("portkern/<id>")`` and ``GymWrapper`` around the vector env pass TorchRL's
``check_env_specs`` and roll out what the portkern env itself returns, as Gymnasium's own envs do."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchrl")
gym = pytest.importorskip("gymnasium")

import torch  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from torchrl.envs import GymEnv, GymWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

import portkern.gym  # noqa: E402,F401 - registers portkern/<id>
from portkern import envs  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "torchrl.md"


class _Replay:
    """A TorchRL policy that plays ``actions`` [T, ...] in order (one-hot for a discrete env, as GymWrapper
    encodes its actions by default)."""

    def __init__(self, actions: np.ndarray, n: int | None) -> None:
        self.actions, self.n, self.t = actions, n, 0

    def __call__(self, td):
        a = torch.as_tensor(self.actions[self.t])
        self.t += 1
        td["action"] = torch.nn.functional.one_hot(a.long(), self.n) if self.n else a.to(torch.float32)
        return td


def _actions(spec, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if spec.is_discrete:
        return rng.integers(0, spec.discrete_actions, shape)
    return rng.uniform(-spec.action_high, spec.action_high, (*shape, spec.action_dim)).astype(np.float32)


@pytest.mark.parametrize("env_id", list(envs.ENVS))
def test_gymenv_passes_check_env_specs_and_rolls_out_the_env_itself(env_id: str) -> None:
    spec = envs.get(env_id)
    env = GymEnv(f"portkern/{env_id}")  # passes frameskip=1, dropped on Python's "unexpected keyword" TypeError
    check_env_specs(env)
    T = 40
    actions = _actions(spec, np.random.default_rng(0), (T,))
    td = env.reset(seed=11)
    out = env.rollout(T, _Replay(actions, spec.discrete_actions if spec.is_discrete else None), auto_reset=False,
                      tensordict=td, break_when_any_done=False)  # fmt: skip
    assert out.batch_size == torch.Size([T])
    mine = gym.make(f"portkern/{env_id}")
    obs, _ = mine.reset(seed=11)
    np.testing.assert_array_equal(out["observation"][0].numpy(), obs)
    for t in range(T):
        obs, reward, term, trunc, _ = mine.step(actions[t])
        np.testing.assert_array_equal(out["next", "observation"][t].numpy(), obs)
        assert float(out["next", "reward"][t]) == pytest.approx(reward)
        assert bool(out["next", "terminated"][t]) == term and bool(out["next", "truncated"][t]) == trunc
        if term or trunc:
            break


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_gymwrapper_on_the_vector_env_rolls_out_its_steps_with_final_obs(env_id: str) -> None:
    """Same-step autoreset, as TorchRL asks of a Gymnasium vector env: where an episode ended, the rollout's next
    observation is the env's ``final_obs`` and the next row starts from the reset obs (CartPole-v1 terminates,
    Pendulum-v1 truncates every env at step 200, where TorchRL calls the batch's ``reset()``)."""
    spec, n, T = envs.get(env_id), 4, 210
    env = GymWrapper(gym.make_vec(f"portkern/{env_id}", n, autoreset_mode=AutoresetMode.SAME_STEP))
    check_env_specs(env)
    actions = _actions(spec, np.random.default_rng(1), (T, n))
    td = env.reset(seed=5)
    out = env.rollout(T, _Replay(actions, spec.discrete_actions if spec.is_discrete else None), auto_reset=False,
                      tensordict=td, break_when_any_done=False)  # fmt: skip
    assert out.batch_size == torch.Size([n, T])
    raw = portkern.gym.make_vec(env_id, n, autoreset="same_step")
    obs, _ = raw.reset(seed=5)
    np.testing.assert_array_equal(out["observation"][:, 0].numpy(), obs)
    ended = 0
    for t in range(T):
        obs, reward, term, trunc, info = raw.step(actions[t])
        done = term | trunc
        want = np.stack([info["final_obs"][i] if done[i] else obs[i] for i in range(n)])
        np.testing.assert_array_equal(out["next", "observation"][:, t].numpy(), want)
        np.testing.assert_allclose(out["next", "reward"][:, t, 0].numpy(), reward, rtol=1e-6)
        np.testing.assert_array_equal(out["next", "terminated"][:, t, 0].numpy(), term)
        np.testing.assert_array_equal(out["next", "truncated"][:, t, 0].numpy(), trunc)
        if done.all():  # TorchRL resets the whole batch itself then (VecGymEnvTransform), as for a SyncVectorEnv
            obs, _ = raw.reset()
        if t + 1 < T:
            np.testing.assert_array_equal(out["observation"][:, t + 1].numpy(), obs)
        ended += int(done.sum())
    assert ended > 0  # the comparison went through autoresets


@pytest.mark.parametrize("make", ["portkern", "gymnasium"])
def test_next_step_autoreset_is_refused_alike(make: str) -> None:
    """TorchRL takes a vector env in same-step (or disabled) autoreset only; Gymnasium's own SyncVectorEnv in
    Gymnasium's default next-step mode meets the same refusal, read from the same ``autoreset_mode``."""
    if make == "portkern":
        vec = gym.make_vec("portkern/CartPole-v1", 2)
    else:
        vec = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    assert vec.autoreset_mode == AutoresetMode.NEXT_STEP
    with pytest.raises(RuntimeError, match="SAME_STEP"):
        GymWrapper(vec)


def test_docs_torchrl_snippet_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, f"{DOC}: no python snippet"
    scope: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), scope)  # noqa: S102 - the page's own example
    assert scope["rollout"].batch_size == torch.Size([8, 100])
