"""Reproduce the check behind ``collect.STEPS_PER_CALL_CAP``: one env's compiled collection at K steps per
compiled call against the eager loop (``+eager-act``), one 64-step rollout of the pinned config from one seed.

    python bench/results/collect-steps-per-call-xeon/steps_per_call_check.py Acrobot-v1 4

Prints, per stored field, whether the discrete fields are equal and the largest float difference with the rows
that differ by more than 1e-4. With torch 2.13 on the development VM, Acrobot-v1 at K = 4 printed ``values`` off
by up to 0.64 in rows 3, 7, 11, ... (each call's fourth step holding its first step's value); at K = 2 and 1 every
field matched (K = 2 still went wrong over whole training runs: see NOTES.md). CartPole-v1 and Pendulum-v1 at
K = 4 give what K = 1 gives. The cap is overridden for the check (``MAX_STEPS_PER_CALL`` and the env's cap).
"""

from __future__ import annotations

import sys

import torch

from portkern.train import collect as C
from portkern.train import config
from portkern.train import stacks as S
from portkern.train.ppo import Agent, PhaseTimer


def rollout(stack_name: str, task: config.TaskConfig, seed: int) -> dict[str, torch.Tensor]:
    cfg = task.ppo
    torch.manual_seed(seed)
    stack = S.build(S.parse_stack(stack_name), task, seed)
    obs = stack.setup()
    agent = Agent(stack.obs_dim, stack.n_actions, cfg.hidden, stack.action_dim)
    with torch.no_grad():
        for p in agent.actor[-1].parameters():  # orthogonal init's last layer is tiny: make the policy matter
            p.add_(0.5 * torch.randn_like(p))
    stack.warm_up(agent)
    store = S.Storage.zeros(cfg.num_steps, cfg.num_envs, stack.obs_dim, stack.discrete, stack.agent_device,
                            stack.action_dim)  # fmt: skip
    next_obs = stack.collect(agent, store, PhaseTimer(), obs)
    print(f"{stack_name}: collect {stack.collect_kind}")
    return {k: v.clone() for k, v in vars(store).items()} | {"next_obs": next_obs.clone()}


def main(argv: list[str]) -> int:
    env_id, k = argv[0], int(argv[1])
    C.MAX_STEPS_PER_CALL = k
    C.STEPS_PER_CALL_CAP = {}
    task = config.task(env_id)
    torch.set_num_threads(task.ppo.torch_threads)
    eager = rollout("torch+eager-act", task, 2)
    compiled = rollout("torch", task, 2)
    print(f"{env_id}: {C.steps_per_call(C.envs.get(env_id), task.ppo.num_steps)} steps per compiled call")
    for name, want in eager.items():
        got = compiled[name]
        if not want.is_floating_point():
            print(f"  {name}: equal {torch.equal(got, want)}")
            continue
        diff = (got - want).abs().reshape(want.shape[0], -1)
        rows = (diff > 1e-4).any(1).nonzero().flatten().tolist()
        print(f"  {name}: max abs diff {float(diff.max()):.3g}, rows off by > 1e-4: {rows[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
