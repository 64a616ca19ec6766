#!/bin/bash
# ABBA, 2 rounds: A = 8e5a2c8 (the update a compiled loop), B = 4132dca (bootstrap values), each a git worktree:
#   git worktree add /tmp/n3/new 8e5a2c8 && git worktree add /tmp/n3/boot 4132dca
# Run from the repository root; appends one JSON line per run to ab.jsonl here.
out=$(pwd)/bench/results/bootstrap-values-xeon/ab.jsonl
cd bench/cpu
for round in 1 2; do
  for side in A B B A; do
    if [ $side = A ]; then pp=/tmp/n3/new; else pp=/tmp/n3/boot; fi
    for st in "opencl+fused@intel" "opencl+fused@pocl" "torch" "numpy"; do
      PYTHONPATH=$pp python train_per_update.py --task CartPole-v1 --stack "$st" --updates 40 --seed $round 2>/dev/null \
        | sed "s/^/{\"side\":\"$side\",\"round\":$round,\"r\":/; s/$/}/" >> "$out"
    done
    PYTHONPATH=$pp python train_per_update.py --task Pendulum-v1 --stack "opencl+fused@intel" --updates 8 --seed $round \
      2>/dev/null | sed "s/^/{\"side\":\"$side\",\"round\":$round,\"r\":/; s/$/}/" >> "$out"
  done
done
