"""EnvSpec: what every backend needs to know about an environment, plus its NumPy reference dynamics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

State = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class EnvSpec:
    """One environment: names, sizes, Gymnasium defaults and the reference dynamics (the specification).

    Reference functions operate on structure-of-arrays state, in the dtype of the arrays they get:

    * ``kernel_params(params) -> list[float]``: the ordered vector passed to kernels as ``params``
      (user-settable params plus derived constants, computed in float64 as Gymnasium does).
    * ``reset(sym, kp) -> State``: initial state from ``sym`` ([N, 4] uniform in [-1, 1), see rng.symmetric).
    * ``step(state, action, kp) -> (State, reward, terminated)``.
    * ``observe(state) -> obs [N, obs_dim]``.
    """

    id: str
    kernel: str  # kernel file stem and name stem: kernels/<api>/<kernel>.{cl,cu}, pk_<kernel>_step
    state_names: tuple[str, ...]
    obs_dim: int
    obs_low: tuple[float, ...]  # observation space bounds, as Gymnasium declares them
    obs_high: tuple[float, ...]
    discrete_actions: int | None  # number of actions, or None for a Box action
    action_high: float  # Box action bound (symmetric), ignored for discrete actions
    #: |state| limits that set_state enforces (Acrobot's angle wrap loops once per 2*pi), or None
    state_limit: tuple[float, ...] | None
    max_episode_steps: int
    defaults: Mapping[str, float]
    param_names: tuple[str, ...]  # names of the kernel param vector entries, for docs and errors
    kernel_params: Callable[[Mapping[str, float]], Sequence[float]]
    reset: Callable[[np.ndarray, np.ndarray], State]
    step: Callable[[State, np.ndarray, np.ndarray], tuple[State, np.ndarray, np.ndarray]]
    observe: Callable[[State], np.ndarray]

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def is_discrete(self) -> bool:
        return self.discrete_actions is not None

    def resolve_params(self, params: Mapping[str, float] | None) -> dict[str, float]:
        """Gymnasium's defaults overridden by ``params``; unknown names and non-finite values are rejected."""
        merged = dict(self.defaults)
        if params is None:
            return merged
        if not isinstance(params, Mapping):
            raise TypeError(f"params: expected a dict of name -> float, got {type(params).__name__}")
        for name, value in params.items():
            if name not in self.defaults:
                raise ValueError(
                    f"params: {self.id} has no parameter {name!r}; valid names: "
                    f"{', '.join(sorted(self.defaults))}"
                )
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"params[{name!r}]: expected a number, got {value!r}") from None
            if not np.isfinite(value):
                raise ValueError(f"params[{name!r}]: expected a finite number, got {value!r}")
            merged[name] = value
        return merged

    def param_vector(self, params: Mapping[str, float], dtype: np.dtype) -> np.ndarray:
        """The kernel ``params`` argument: derived in float64, then cast once to the env dtype."""
        return np.asarray(self.kernel_params(params), dtype=np.float64).astype(dtype)
