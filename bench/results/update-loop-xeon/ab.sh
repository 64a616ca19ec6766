#!/bin/bash
# ABBA, 3 rounds: A = the parent (fdb1434), B = 8e5a2c8 (the update a compiled loop), each a git worktree:
#   git worktree add /tmp/n3/base fdb1434 && git worktree add /tmp/n3/new 8e5a2c8
# Run from the repository root; appends one JSON line per run to ab.jsonl here.
out=$(pwd)/bench/results/update-loop-xeon/ab.jsonl
cd bench/cpu
for round in 1 2 3; do
  for side in A B B A; do
    if [ $side = A ]; then pp=/tmp/n3/base; else pp=/tmp/n3/new; fi
    for st in "opencl+fused@intel" "opencl+fused@pocl" "torch"; do
      PYTHONPATH=$pp python train_per_update.py --task CartPole-v1 --stack "$st" --updates 40 --seed $round 2>/dev/null \
        | sed "s/^/{\"side\":\"$side\",\"round\":$round,\"r\":/; s/$/}/" >> "$out"
    done
    PYTHONPATH=$pp python train_per_update.py --task Pendulum-v1 --stack "opencl+fused@intel" --updates 8 --seed $round \
      2>/dev/null | sed "s/^/{\"side\":\"$side\",\"round\":$round,\"r\":/; s/$/}/" >> "$out"
  done
done
