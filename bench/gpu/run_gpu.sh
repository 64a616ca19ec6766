#!/bin/bash
# One prepared run on a lent H200 (see /work/shared/device/README.md): parity for cupy, numba and
# opencl, then copy bandwidth, CartPole step, GAE, zero-copy to torch and the rollout data paths
# (host / device / fused, random and MLP policies, CartPole then Acrobot). Results land in $OUT.
# Prepare on the dev machine first (the GPU machine has no hypothesis, rich or matplotlib):
#   ../shared/device/prepare.sh hypothesis sortedcontainers rich markdown-it-py mdurl pygments
# then run from the repository root with .device carried:  bash bench/gpu/run_gpu.sh
# Budgeted to finish in under 8 minutes even when every step hits its timeout.
set -uo pipefail
cd "$(dirname "$0")/../.."
source .device/setup.sh
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
unset NUMBA_ENABLE_CUDASIM
start=$SECONDS

parity() {  # name, timeout seconds, extra env...
  local name=$1 limit=$2
  shift 2
  # --continue-on-collection-errors: a test module whose optional imports (matplotlib for the
  # report tests) are missing there must not stop the backend's parity tests from running.
  env "$@" timeout "$limit" python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests -k "$name" \
    --junitxml="$OUT/parity_$name.xml" >"$OUT/parity_$name.log" 2>&1
  echo "parity $name: rc=$? ($(tail -n 1 "$OUT/parity_$name.log"))"
}

parity cupy 80
parity numba 130   # Numba compiles each kernel on first launch: seconds per kernel
parity opencl 70 PORTKERN_DEVICE=nvidia
echo "parity done at $((SECONDS - start))s"

# Sections that would start after --budget-s are skipped and recorded as such; the rollouts come last.
timeout 170 python3 bench/gpu/gpu_bench.py --out "$OUT" --budget-s 150 2>&1 | tee "$OUT/gpu_bench.log" | tail -n 30
echo "all done at $((SECONDS - start))s"
