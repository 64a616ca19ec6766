"""Device-hours per converged policy: a pinned PPO (PyTorch) trained to convergence on several stacks.

Needs PyTorch (and Gymnasium for the ``gymnasium`` stack): ``pip install 'portkern[train]'``.
"""

from __future__ import annotations

from .config import ConfigError, PPOConfig, TaskConfig, load, task

__all__ = ["ConfigError", "PPOConfig", "TaskConfig", "load", "task"]
