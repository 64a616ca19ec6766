"""The pinned training tasks (``portkern/data/train_configs.json``): what a "converged policy" is."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from .._jsonfile import read_json

CONFIG_SCHEMA = "portkern-train-configs/1"
#: The schema of the training files ``portkern train`` writes (runner.py) and the report reads
#: (portkern.portability.training); declared here, where reading it needs no torch.
TRAIN_SCHEMA = "portkern-train/1"


class ConfigError(ValueError):
    """A training config file or override that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class PPOConfig:
    """CleanRL's PPO hyperparameters for one task (``examples/ppo.py`` documents each)."""

    num_envs: int
    num_steps: int
    lr: float
    anneal_lr: bool
    gamma: float
    gae_lambda: float
    num_minibatches: int
    update_epochs: int
    norm_adv: bool
    clip_coef: float
    clip_vloss: bool
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    hidden: int
    torch_threads: int
    solve_window: int

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps


@dataclass(frozen=True)
class TaskConfig:
    """One pinned task: converged when the mean return of the last ``ppo.solve_window`` finished
    episodes reaches ``target``; a run stops unconverged after ``total_timesteps`` env steps or
    ``max_seconds`` of wall time."""

    env_id: str
    target: float
    total_timesteps: int
    max_seconds: float
    default: bool
    ppo: PPOConfig
    version: int
    doc: str = ""

    @property
    def num_updates(self) -> int:
        return max(1, self.total_timesteps // self.ppo.batch_size)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_INT = ("num_envs", "num_steps", "num_minibatches", "update_epochs", "hidden", "torch_threads", "solve_window")
_BOOL = ("anneal_lr", "norm_adv", "clip_vloss")
_POSITIVE = ("lr", "clip_coef", "max_grad_norm")
_UNIT = ("gamma", "gae_lambda")
_NONNEG = ("ent_coef", "vf_coef")


def _check_ppo(where: str, values: Mapping[str, Any]) -> PPOConfig:
    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = set(values) - fields
    if unknown:
        raise ConfigError(f"{where}: unknown PPO settings {sorted(unknown)}; valid: {', '.join(sorted(fields))}")
    missing = fields - set(values)
    if missing:
        raise ConfigError(f"{where}: missing PPO settings {sorted(missing)}")
    for k, v in values.items():
        if k in _INT:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{where}.{k}: expected an integer >= 1, got {v!r}")
        elif k in _BOOL:
            if not isinstance(v, bool):
                raise ConfigError(f"{where}.{k}: expected true or false, got {v!r}")
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{where}.{k}: expected a finite number, got {v!r}")
            if k in _POSITIVE and v <= 0:
                raise ConfigError(f"{where}.{k}: expected a number > 0, got {v!r}")
            if k in _UNIT and not 0 <= v <= 1:
                raise ConfigError(f"{where}.{k}: expected a number in [0, 1], got {v!r}")
            if k in _NONNEG and v < 0:
                raise ConfigError(f"{where}.{k}: expected a number >= 0, got {v!r}")
    ppo = PPOConfig(**{k: (float(v) if k not in _INT and k not in _BOOL else v) for k, v in values.items()})
    if ppo.batch_size % ppo.num_minibatches:
        raise ConfigError(
            f"{where}: num_envs x num_steps = {ppo.batch_size} must divide into num_minibatches = "
            f"{ppo.num_minibatches} equal minibatches"
        )
    if ppo.hidden > 64:
        raise ConfigError(f"{where}.hidden: expected at most 64 (the in-kernel MLP's widest layer), got {ppo.hidden}")
    return ppo


def _check_steps(where: str, steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"{where}: expected an integer >= 1, got {steps!r}")
    return steps


def _check_seconds(where: str, secs: Any) -> float:
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not secs > 0:
        raise ConfigError(f"{where}: expected a number > 0, got {secs!r}")
    return float(secs)


def parse(data: Any, source: str) -> dict[str, TaskConfig]:
    """Validate a config document (the JSON object) and return its tasks by env id."""
    from .. import envs

    if not isinstance(data, dict) or data.get("schema") != CONFIG_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{source}: expected a training config of schema {CONFIG_SCHEMA!r}, got {got!r}")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"{source}: 'version' must be an integer >= 1, got {version!r}")
    defaults = data.get("ppo_defaults", {})
    tasks = data.get("tasks")
    if not isinstance(defaults, dict):
        raise ConfigError(f"{source}: 'ppo_defaults' must be an object, got {type(defaults).__name__}")
    if not isinstance(tasks, dict) or not tasks:
        raise ConfigError(f"{source}: 'tasks' must be a non-empty object of env id -> task settings")
    out = {}
    task_keys = {"target", "total_timesteps", "max_seconds", "default", "doc", "ppo"}
    for env_id, t in tasks.items():
        where = f"{source}: tasks.{env_id}"
        if env_id not in envs.ENVS:
            raise ConfigError(f"{where}: not a portkern env; expected one of {', '.join(envs.ENVS)}")
        if not isinstance(t, dict):
            raise ConfigError(f"{where}: expected an object, got {type(t).__name__}")
        unknown = set(t) - task_keys
        if unknown:
            raise ConfigError(f"{where}: unknown settings {sorted(unknown)}; valid: {', '.join(sorted(task_keys))}")
        target = t.get("target")
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target):
            raise ConfigError(f"{where}.target: expected a finite number, got {target!r}")
        steps = _check_steps(f"{where}.total_timesteps", t.get("total_timesteps"))
        secs = _check_seconds(f"{where}.max_seconds", t.get("max_seconds", math.inf))
        ppo_over = t.get("ppo", {})
        if not isinstance(ppo_over, dict):
            raise ConfigError(f"{where}.ppo: expected an object, got {type(ppo_over).__name__}")
        ppo = _check_ppo(f"{where}.ppo", {**defaults, **ppo_over})
        out[env_id] = TaskConfig(env_id, float(target), steps, secs, bool(t.get("default", False)), ppo,
                                 version, str(t.get("doc", "")))  # fmt: skip
    return out


def load(path: str | Path | None = None) -> dict[str, TaskConfig]:
    """The tasks of ``path``, or of the shipped ``portkern/data/train_configs.json``."""
    if path is None:
        file = resources.files("portkern").joinpath("data/train_configs.json")
        source = "portkern/data/train_configs.json"
    else:
        file, source = path, str(path)
    where = source if path is None else f"--config {source}"  # a user's file: name the option too
    return parse(read_json(file, lambda what: ConfigError(f"{where}: {what}")), source)


def task(env_id: str, path: str | Path | None = None, **overrides: Any) -> TaskConfig:
    """One task, with PPO settings or task fields overridden (``num_envs=8``, ``total_timesteps=4096``)."""
    tasks = load(path)
    if env_id not in tasks:
        raise ConfigError(f"task: {env_id!r} has no pinned config; configured: {', '.join(tasks)}")
    t = tasks[env_id]
    ppo_fields = {f.name for f in dataclasses.fields(PPOConfig)}
    task_fields = {"target", "total_timesteps", "max_seconds"}
    unknown = set(overrides) - ppo_fields - task_fields
    if unknown:
        raise ConfigError(f"overrides: unknown settings {sorted(unknown)}")
    ppo = _check_ppo("overrides", {**dataclasses.asdict(t.ppo), **{k: v for k, v in overrides.items() if k in ppo_fields}})
    rest = {k: v for k, v in overrides.items() if k in task_fields}
    if "total_timesteps" in rest:
        rest["total_timesteps"] = _check_steps("total_timesteps", rest["total_timesteps"])
    if "max_seconds" in rest:
        rest["max_seconds"] = _check_seconds("max_seconds", rest["max_seconds"])
    return dataclasses.replace(t, ppo=ppo, **rest)
