"""RL Zoo PPO on Gymnasium's CartPole-v1 and on portkern/CartPole-v1, same seeds, runs interleaved.

Each run is the README's command, unmodified:

    python -m rl_zoo3.train --algo ppo --env portkern/CartPole-v1 --gym-packages portkern \\
        -conf examples/zoo/ppo.yml --seed S

(Gymnasium's env with the zoo's own hyperparameters, which examples/zoo/ppo.yml copies.) Reported per
run: wall time of the whole command, and the steps to 475: the first total step count at which the mean
return of the last 20 finished training episodes (the zoo's Monitor files, all envs) reaches 475.

    python examples/zoo/compare.py [--seeds 1 2 3] [--logs DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
THRESHOLD = 475.0
WINDOW = 20


def steps_to(log_dir: Path, threshold: float = THRESHOLD, window: int = WINDOW) -> int | None:
    """First total step at which the mean of the last ``window`` finished episodes reaches ``threshold``."""
    monitors = sorted(log_dir.rglob("*.monitor.csv"))
    if not monitors:
        raise FileNotFoundError(f"no Monitor files under {log_dir}")
    n_envs = len(monitors)
    episodes = []  # (total steps when it ended, return)
    for path in monitors:
        with path.open() as f:
            next(f)  # the Monitor's JSON header line
            done = 0
            for row in csv.DictReader(f):
                done += int(row["l"])
                # The zoo's envs step in lockstep, so env j at its own step k is at total step ~k * n_envs.
                episodes.append((done * n_envs, float(row["r"])))
    episodes.sort()
    returns: list[float] = []
    for step, ret in episodes:
        returns.append(ret)
        if len(returns) >= window and sum(returns[-window:]) / window >= threshold:
            return step
    return None


def run(env_id: str, seed: int, logs: Path, threads: int) -> tuple[float, Path]:
    folder = logs / f"{env_id.replace('/', '-')}_s{seed}"
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--algo", "ppo", "--env", env_id, "--gym-packages", "portkern",
           "--seed", str(seed), "--num-threads", str(threads), "--eval-freq", "-1", "-f", str(folder)]  # fmt: skip
    if env_id.startswith("portkern/"):
        cmd += ["-conf", str(HERE / "ppo.yml")]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--logs", type=Path, default=Path("logs-zoo-compare"), help="the zoo's log folders go here")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (the zoo's --num-threads)")
    args = ap.parse_args()
    print(f"{'env':24s} {'seed':>4s} {'wall s':>8s} {'steps to 475':>13s}")
    for seed in args.seeds:
        for env_id in ("CartPole-v1", "portkern/CartPole-v1"):  # interleaved: load drift hits both
            wall, folder = run(env_id, seed, args.logs, args.threads)
            reached = steps_to(folder)
            print(f"{env_id:24s} {seed:4d} {wall:8.1f} {reached if reached is not None else 'not reached':>13}")


if __name__ == "__main__":
    main()
