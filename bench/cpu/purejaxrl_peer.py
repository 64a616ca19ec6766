"""The training peer: PureJaxRL's ``ppo.py``, unmodified, against portkern's stacks, seeds interleaved.

PureJaxRL (luchris429/purejaxrl) is not part of portkern and is not vendored: point ``--purejaxrl`` at a
checkout of it, pinned to the commit it was measured at, and install what its ``ppo.py`` imports:

    git clone https://github.com/luchris429/purejaxrl && git -C purejaxrl checkout 31756b1
    pip install gymnax==0.0.8 flax optax distrax        # check with --dry-run that jax/torch stay put
    python bench/cpu/purejaxrl_peer.py --purejaxrl purejaxrl --seeds 1,2,3

``ppo.py`` imports ``wrappers.py``, which imports brax and navix for wrappers CartPole never uses; they are
stubbed here (empty modules), and ``jax.tree_map`` (removed from newer JAX) is aliased to
``jax.tree_util.tree_map``; nothing else is touched. PureJaxRL trains every update in one compiled
program without a convergence check, so its device-seconds per converged policy are its timed run (compile
excluded, timed apart) pro-rated to the update at which the mean of its last ``solve_window`` finished
episode returns first reached the target: the same criterion as ``portkern train``, computed from the
episode returns its own LogWrapper records. portkern's stacks run the same seeds in between
(``portkern.train.runner.train_one``, its wall time from setup to the converged update, after a prime).

``--config pinned`` uses portkern's pinned CartPole-v1 settings (32 envs x 64 steps, lr 1e-3 annealed over
the pinned budget, 4 epochs x 4 minibatches); ``--config default`` PureJaxRL's own (4 envs x 128 steps,
lr 2.5e-4, 5e5 steps), on PureJaxRL and on every portkern stack (the task's settings overridden alike).
``--stacks`` names the portkern stacks run between PureJaxRL's seeds (default ``jax``; any ``portkern train``
stack: ``torch_compile``, ``opencl+fused@intel``...). One JSON line per run (``--out`` appends them to a file).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

PINNED_COMMIT = "31756b197773a52db763fdbe6d635e4b46522a73"


def _stub_unused_imports() -> None:
    """brax and navix: imported by wrappers.py for environments this benchmark never builds."""
    for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__dict__.update(EpisodeWrapper=object, AutoResetWrapper=object)
            sys.modules[name] = mod


def _restore_removed_jax_names() -> None:
    """PureJaxRL (and gymnax 0.0.8) call ``jax.tree_map``, which JAX removed in 0.6 for ``jax.tree_util.tree_map``
    (the same function): put the old name back so the published code runs on the JAX portkern is measured with."""
    import jax

    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree_util.tree_map


def purejaxrl_config(which: str, task) -> dict:
    if which == "default":
        return {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
                "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
                "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
                "ANNEAL_LR": True, "DEBUG": False}  # fmt: skip
    c = task.ppo
    return {"LR": c.lr, "NUM_ENVS": c.num_envs, "NUM_STEPS": c.num_steps, "TOTAL_TIMESTEPS": task.total_timesteps,
            "UPDATE_EPOCHS": c.update_epochs, "NUM_MINIBATCHES": c.num_minibatches, "GAMMA": c.gamma,
            "GAE_LAMBDA": c.gae_lambda, "CLIP_EPS": c.clip_coef, "ENT_COEF": c.ent_coef, "VF_COEF": c.vf_coef,
            "MAX_GRAD_NORM": c.max_grad_norm, "ACTIVATION": "tanh", "ENV_NAME": task.env_id,
            "ANNEAL_LR": c.anneal_lr, "DEBUG": False}  # fmt: skip


def converged_update(returns, finished, window: int, target: float) -> int | None:
    """First update (1-based) after which the last ``window`` finished returns (step, then env order) average
    >= ``target``; None if never. ``returns``/``finished``: [updates, steps, envs] from PureJaxRL's metrics."""
    import numpy as np

    recent: list[float] = []
    for u in range(returns.shape[0]):
        for t in range(returns.shape[1]):
            recent.extend(returns[u, t][finished[u, t]].tolist())
        recent = recent[-window:]
        if len(recent) == window and float(np.mean(recent)) >= target:
            return u + 1
    return None


def run_purejaxrl(ppo, config: dict, seed: int, window: int, target: float) -> dict:
    import jax
    import numpy as np

    cfg = dict(config)
    train = jax.jit(ppo.make_train(cfg))  # make_train adds NUM_UPDATES and MINIBATCH_SIZE to cfg
    rng = jax.random.PRNGKey(seed)
    t0 = time.perf_counter()
    compiled = train.lower(rng).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(rng))
    run_s = time.perf_counter() - t0
    info = out["metrics"]
    rets, fin = np.asarray(info["returned_episode_returns"]), np.asarray(info["returned_episode"])
    updates = int(cfg["NUM_UPDATES"])
    u = converged_update(rets, fin, window, target)
    return {"peer": "purejaxrl", "commit": PINNED_COMMIT, "seed": seed, "compile_s": round(compile_s, 4),
            "run_s": round(run_s, 4), "updates": updates, "converged_update": u,
            "env_steps_per_s": round(updates * cfg["NUM_STEPS"] * cfg["NUM_ENVS"] / run_s, 1),
            "device_seconds_per_policy": None if u is None else round(run_s * u / updates, 4)}  # fmt: skip


def default_overrides(pjx: dict) -> dict:
    """PureJaxRL's own defaults as overrides of portkern's CartPole-v1 task, so portkern's stacks train the
    same config: envs, steps, lr (annealed over the same budget), epochs, minibatches; the rest is equal
    already (gamma, lambda, clip, coefficients, grad-norm, 64-unit tanh networks)."""
    return {"num_envs": pjx["NUM_ENVS"], "num_steps": pjx["NUM_STEPS"], "lr": pjx["LR"],
            "update_epochs": pjx["UPDATE_EPOCHS"], "num_minibatches": pjx["NUM_MINIBATCHES"],
            "total_timesteps": int(pjx["TOTAL_TIMESTEPS"])}  # fmt: skip


def portkern_record(r, config: str) -> dict:
    """One portkern run as a line beside PureJaxRL's: device-seconds per converged policy (its wall time from
    setup to the converged update) and the time per update (wall less setup, / updates)."""
    setup = r.phases.get("setup", 0.0)
    return {"peer": f"portkern {r.stack}", "config": config, "seed": r.seed, "converged": r.converged,
            "device_seconds_per_policy": r.wall_s if r.converged else None, "updates": r.updates,
            "ms_per_update": round((r.wall_s - setup) / max(r.updates, 1) * 1e3, 3),
            "update_share": round(r.phases.get("update", 0.0) / r.wall_s, 4) if r.wall_s else None,
            "update": r.update, "compile_s": r.compile_s}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--purejaxrl", required=True, help="a checkout of luchris429/purejaxrl (the repository root)")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--config", choices=("pinned", "default"), default="pinned",
                   help="pinned: portkern's CartPole-v1 settings on both; default: PureJaxRL's own (4 envs x 128 "
                        "steps, lr 2.5e-4, 5e5 steps) on both")  # fmt: skip
    p.add_argument("--stacks", default="jax",
                   help="portkern stacks run between PureJaxRL's seeds (comma-separated `portkern train` stack "
                        "specs, e.g. jax,torch_compile,opencl+fused@intel; default: jax)")  # fmt: skip
    p.add_argument("--no-portkern", action="store_true", help="run the peer only")
    p.add_argument("--out", help="also append the JSON lines to this file")
    args = p.parse_args(argv)
    src = Path(args.purejaxrl) / "purejaxrl"
    if not (src / "ppo.py").is_file():
        p.error(f"--purejaxrl {args.purejaxrl}: no purejaxrl/ppo.py there; clone luchris429/purejaxrl")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    from portkern.train import config as train_config
    from portkern.train import runner
    from portkern.train.stacks import parse_stack

    task = train_config.task("CartPole-v1")
    pjx = purejaxrl_config(args.config, task)
    if args.config == "default":
        task = train_config.task("CartPole-v1", **default_overrides(pjx))
    try:
        specs = [] if args.no_portkern else [parse_stack(s) for s in args.stacks.split(",") if s.strip()]
    except ValueError as exc:
        p.error(f"--stacks: {exc}")
    _stub_unused_imports()
    _restore_removed_jax_names()
    sys.path.insert(0, str(src))  # ppo.py imports its sibling as a top-level `wrappers`
    import ppo  # PureJaxRL's ppo.py, as published

    out = open(args.out, "a") if args.out else None  # noqa: SIM115 - closed below

    def emit(rec: dict) -> None:
        line = json.dumps(rec)
        print(line, flush=True)
        if out is not None:
            out.write(line + "\n")
            out.flush()

    for spec in specs:  # compile every stack once, untimed, at its runs' thread count, as `portkern train` does
        emit({"prime": spec.label, "config": args.config, "seconds": round(runner.prime(task, spec), 3)})
    for seed in seeds:  # interleaved: each seed on every implementation, so a shared machine's drift hits all
        emit({**run_purejaxrl(ppo, pjx, seed, task.ppo.solve_window, task.target), "config": args.config})
        for spec in specs:
            r, _ = runner.train_one(task, spec, seed)
            emit(portkern_record(r, args.config))
    if out is not None:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
