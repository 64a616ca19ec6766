"""Stable-Baselines3 ``VecEnv`` over ``portkern.step``: ``stable_baselines3.PPO("MlpPolicy", env)`` trains on it as is.

>>> from stable_baselines3 import PPO
>>> from portkern.sb3 import make_vec_env
>>> env = make_vec_env("CartPole-v1", n_envs=8, seed=0)        # VecMonitor(PortkernVecEnv(...))
>>> PPO("MlpPolicy", env, seed=0).learn(10_000)                 # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

try:
    from stable_baselines3.common.vec_env import VecEnv, VecMonitor
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError:
    raise ImportError("portkern.sb3 needs Stable-Baselines3: pip install 'portkern[sb3]'") from None

from . import step
from ._validate import int_arg
from .backends import Backend

__all__ = ["PortkernVecEnv", "make_vec_env"]


#: step_wait()'s "no step_async since the last step" (None is an action value, which env.step rejects by name).
_NO_ACTIONS = object()


class PortkernVecEnv(VecEnv):
    """A ``portkern.step.VectorEnv`` behind SB3's ``VecEnv`` API, with SB3's conventions (as ``DummyVecEnv``):

    * same-step autoreset: a finished env's returned obs is already its reset obs, and
      ``infos[i]["terminal_observation"]`` holds the obs it finished with;
    * ``infos[i]["TimeLimit.truncated"]`` is ``truncated and not terminated``, so SB3 bootstraps
      only truncated episodes; rewards are float32, dones bool, everything host NumPy copies.

    Seeding: ``seed(s)`` (what ``PPO(..., seed=s)`` calls) applies at the next ``reset()`` and keys
    env *i*'s Philox stream by ``(s, i)``, so the envs already differ and SB3's per-env ``s + i`` is not
    used: ``seed`` returns ``[s] * num_envs``. ``reset()`` without a pending seed starts every env's
    next episode.

    The envs are one batch, so ``get_attr`` returns the batch's attribute (``self.env``'s, or the
    single-env ``observation_space``/``action_space``/``render_mode``/``metadata``) for each index,
    ``env_method`` calls the batch's method once (all indices only) and gives its result for each
    env, and ``set_attr`` is not supported (the batch is configured by ``portkern.step.make``).
    """

    def __init__(self, env: step.VectorEnv) -> None:
        if not isinstance(env, step.VectorEnv):
            raise TypeError(f"env: expected a portkern.step.VectorEnv (portkern.step.make), got {type(env).__name__}")
        if env.autoreset != "same_step":
            raise ValueError(
                f"env: SB3 VecEnvs reset a finished env in the same step (terminal_observation in its info); "
                f"make the env with autoreset='same_step', got {env.autoreset!r}"
            )
        self.env = env
        self._actions: Any = _NO_ACTIONS
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    # ---- the loop ----------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        if any(self._options):
            options = next(o for o in self._options if o)
            # Partial or parametrised resets would need a masked reset kernel that portkern lacks.
            raise ValueError(f"options: not supported by portkern envs, got keys {sorted(options)}")
        obs = self.env.reset(self._seeds[0])
        self._reset_seeds()  # a seed applies to one reset, as in DummyVecEnv
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return self._host(obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is _NO_ACTIONS:
            raise RuntimeError("step_wait() called without step_async(actions)")
        actions, self._actions = self._actions, _NO_ACTIONS  # taken even when env.step rejects them
        obs, reward, terminated, truncated = self.env.step(actions)
        # Copies: the env reuses these device buffers on the next call.
        obs, term, trunc = self._host(obs), self._host(terminated), self._host(truncated)
        rewards = self._host(reward).astype(np.float32, copy=False)
        dones = term | trunc
        infos: list[dict[str, Any]] = [{"TimeLimit.truncated": False} for _ in range(self.num_envs)]
        if dones.any():
            final = self._host(self.env.final_obs)
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = final[i].copy()
                infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
        return obs, rewards, dones, infos

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        if seed is None:  # as VecEnv.seed: a random seed, so unseeded runs differ
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        seed = int_arg("seed", seed, 0, 2**32 - 1)
        self._seeds = [seed] * self.num_envs
        return list(self._seeds)

    def close(self) -> None:
        pass  # device buffers are freed with the env; nothing to shut down

    # ---- attributes and methods --------------------------------------------------------------
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        idx = self._indices(indices)
        single = {
            "render_mode": None, "metadata": {"render_modes": []},
            "observation_space": self.env.single_observation_space, "action_space": self.env.single_action_space,
        }  # fmt: skip
        if attr_name in single:
            value = single[attr_name]
        elif hasattr(self.env, attr_name):
            value = getattr(self.env, attr_name)
        else:
            raise AttributeError(f"get_attr: portkern's {self.env.spec.id} env has no attribute {attr_name!r}")
        return [value for _ in idx]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise NotImplementedError(
            f"set_attr: cannot set {attr_name!r}: portkern's {self.num_envs} envs are one batch configured by "
            "portkern.step.make (make a new env instead)"
        )

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:  # fmt: skip
        idx = self._indices(indices)
        if sorted(idx) != list(range(self.num_envs)):
            raise ValueError(
                f"indices: portkern steps its envs as one batch, so env_method calls the batch's method once "
                f"for all {self.num_envs} envs; pass indices=None, got {list(idx)}"
            )
        method = getattr(self.env, method_name, None)
        if not callable(method):
            raise AttributeError(f"env_method: portkern's {self.env.spec.id} env has no method {method_name!r}")
        result = method(*method_args, **method_kwargs)
        return [result for _ in idx]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._indices(indices)]  # no gymnasium.Wrapper inside the batch

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]  # portkern envs do not render

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is not None and not isinstance(indices, (int, np.integer)) and not hasattr(indices, "__iter__"):
            raise TypeError(f"indices: expected None, an env index or an iterable of them, got {type(indices).__name__}")
        idx = list(self._get_indices(indices))
        bad = [i for i in idx if isinstance(i, bool) or not isinstance(i, (int, np.integer))
               or not 0 <= i < self.num_envs]  # fmt: skip
        if bad:
            raise ValueError(f"indices: expected env indices in [0, {self.num_envs}), got {bad}")
        return [int(i) for i in idx]

    def _host(self, a: Any) -> np.ndarray:
        return self.env.backend.to_host(a)

    def __repr__(self) -> str:
        return f"PortkernVecEnv({self.env!r})"


def make_vec_env(
    env_id: str,
    n_envs: int = 1,
    seed: int | None = None,
    *,
    backend: str | Backend = "numpy",
    device: str | None = None,
    dtype: str | np.dtype = "float32",
    params: Mapping[str, float] | None = None,
    monitor: bool = True,
    info_keywords: Iterable[str] = (),
) -> VecEnv:
    """``n_envs`` portkern ``env_id`` envs as an SB3 ``VecEnv``, like ``stable_baselines3.common.env_util.make_vec_env``.

    ``monitor=True`` wraps it in SB3's ``VecMonitor`` (episode returns and lengths in ``infos`` and in
    the training logs), as SB3's ``make_vec_env`` wraps each env in a ``Monitor``.
    ``seed=None`` draws a fresh 32-bit seed from OS entropy.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id: expected a portkern env id such as 'CartPole-v1', got {type(env_id).__name__} {env_id!r}")
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    env = step.make(env_id.removeprefix("portkern/"), n_envs, backend=backend, device=device, seed=seed,
                    dtype=dtype, autoreset="same_step", params=params)  # fmt: skip
    vec: VecEnv = PortkernVecEnv(env)
    return VecMonitor(vec, info_keywords=tuple(info_keywords)) if monitor else vec
