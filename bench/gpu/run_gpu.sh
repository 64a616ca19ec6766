#!/bin/bash
# One prepared run on a lent H200 (../shared/device/README.md), every GPU backend side by side:
#   1. parity on the GPU: cupy (NVRTC), numba (Numba-CUDA, no simulator), opencl (NVIDIA's OpenCL),
#      torch (eager on cuda); torch_compile's own parity tests (Triton) in the same pytest call
#   2. compute-sanitizer memcheck and racecheck over the cupy parity tests
#   3. `portkern bench --quick` on the GPU backends: a results.json `portkern report` merges with
#      the committed CPU runs (bench/results/)
#   4. bench/gpu/gpu_bench.py: copy ceiling, CartPole step and GAE per backend (torch eager and
#      compiled beside cupy, numba and opencl), zero-copy to torch, the rollout data paths, and last, if
#      the budget allows, Chain-v0 stepping at K = 3 and 10 (the physics-heavy env)
#   5. `portkern train` on CartPole-v1, one seed per stack (cupy, cupy+fused, torch@cuda, jax@cuda, opencl on
#      NVIDIA's OpenCL, numba): device-hours per converged policy on the H200. One JSON per stack, so
#      a stack that runs out of time loses only itself; `portkern report` merges them.
# cuda_host, the CUDA C compiled for the CPU, is a correctness harness for machines without a GPU:
# the GPU run has the real thing and leaves it out.
# Here first:  bash bench/gpu/prepare.sh    then run with carry [".device"]:  bash bench/gpu/run_gpu.sh
# Budgeted to finish in under 8 minutes even when every step hits its timeout (sum of the limits: 480 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
source .device/setup.sh
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
unset NUMBA_ENABLE_CUDASIM
export PORTKERN_REQUIRE=numpy,cupy,numba,opencl,torch PORTKERN_TORCH_DEVICE=cuda PORTKERN_TORCH_COMPILE_DEVICE=cuda
start=$SECONDS

parity() {  # name, timeout seconds, -k expression, extra env...
  local name=$1 limit=$2 expr=$3
  shift 3
  # --continue-on-collection-errors: a test module whose optional imports are missing there must
  # not stop the backend's parity tests from running.
  env "$@" timeout "$limit" python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests \
    -k "$expr" --junitxml="$OUT/parity_$name.xml" >"$OUT/parity_$name.log" 2>&1
  echo "parity $name: rc=$? ($(tail -n 1 "$OUT/parity_$name.log"))"
}

parity cupy 40 cupy
parity numba 45 numba          # Numba compiles each kernel on first launch: seconds per kernel
parity opencl 40 "opencl and not oclgrind" PORTKERN_OPENCL_DEVICE=nvidia
parity torch 40 "torch"        # torch eager on cuda, and tests/test_torch_backend.py's torch_compile parity
parity jax 20 "jax"            # XLA on the GPU (the machine's own CUDA build of JAX)
echo "parity done at $((SECONDS - start))s"

sanitizer=$(command -v compute-sanitizer || python3 -c "import nvidia, pathlib; print(next(pathlib.Path(nvidia.__path__[0]).glob('cu*/bin/compute-sanitizer')))" 2>/dev/null)
for tool in memcheck racecheck; do
  if [ -x "${sanitizer:-}" ]; then
    timeout 30 "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 \
      python3 -m pytest -q -p no:cacheprovider tests/test_parity.py -k "cupy and (CartPole or Acrobot or gae or normalize)" \
      >"$OUT/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? ($(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/sanitizer_$tool.log" | tail -n 2 | tr '\n' ' '))"
  else
    echo "compute-sanitizer $tool: not found (bench/gpu/prepare.sh carries the nvidia-cuda-sanitizer-api wheel)" | tee "$OUT/sanitizer_$tool.log"
  fi
done

timeout 60 python3 -m portkern.cli bench --quick --backend cupy --backend numba --backend opencl --backend torch \
  --device "H200" --machine lent-h200 --out "$OUT/bench" >"$OUT/bench.log" 2>&1
echo "portkern bench --quick: rc=$? ($(tail -n 1 "$OUT/bench.log"))"

# Sections that would start after --budget-s are skipped and recorded as such; the rollouts come last.
timeout 70 python3 bench/gpu/gpu_bench.py --out "$OUT" --budget-s 55 2>&1 | tee "$OUT/gpu_bench.log" | tail -n 30

# 5. Training: 105 s in all. jax@cuda is the whole-loop-compiled JAX PPO (the machine's own CUDA build of
#    JAX); torch@cuda runs the compiled minibatch update (the default, CUDA graphs untested until this
#    runs) and torch+eager-update@cuda the eager one. The kernel stacks keep the eager update here so a
#    one-seed run spends its seconds on the kernels, not on compiling the update. --max-seconds caps
#    each run (CartPole converges in ~120k steps).
mkdir -p "$OUT/train"
for spec in "cupy+eager-update:12" "cupy+fused+eager-update:13" "torch@cuda:25" "torch+eager-update@cuda:15" \
    "jax@cuda:20" "opencl+eager-update@nvidia:10" "numba+eager-update:10"; do
  stack=${spec%:*} limit=${spec##*:}
  timeout "$limit" python3 -m portkern.cli train --task CartPole-v1 --stack "$stack" --seeds 1 --max-seconds 12 \
    --no-progress --out "$OUT/train/${stack//[@+]/-}.json" >"$OUT/train/${stack//[@+]/-}.log" 2>&1
  echo "portkern train $stack: rc=$? ($(grep -E 'converged|step budget|time budget|error' "$OUT/train/${stack//[@+]/-}.log" | tail -n 1))"
done
echo "all done at $((SECONDS - start))s"
