#!/bin/bash
# One prepared run on a lent H200 (../shared/device/README.md), every GPU backend side by side:
#   1. parity on the GPU (tests/test_parity.py, one process): cupy (NVRTC), numba (Numba-CUDA, no
#      simulator), torch (eager on cuda), jax (XLA); then opencl on NVIDIA's OpenCL
#   2. compute-sanitizer memcheck and racecheck over bench/gpu/sanitize.py (every CuPy kernel once)
#   3. `portkern bench --quick` on each GPU backend: results.json files `portkern report` merges with
#      the committed CPU runs (bench/results/)
#   4. bench/gpu/gpu_bench.py: copy ceiling, CartPole step and GAE per backend (torch eager and
#      compiled and jax beside cupy, numba and opencl), zero-copy to torch, the rollout data paths (the
#      MLP policy's width and run-time-width builds side by side), and last, if
#      the budget allows, Chain-v0 stepping at K = 3 and 10 (the physics-heavy env)
#   5. `portkern train` on CartPole-v1, one seed per stack (cupy, cupy+fused, torch@cuda, jax@cuda, opencl on
#      NVIDIA's OpenCL, numba): device-hours per converged policy on the H200. One JSON per stack, so
#      a stack that runs out of time loses only itself; `portkern report` merges them.
# cuda_host, the CUDA C compiled for the CPU, is a correctness harness for machines without a GPU:
# the GPU run has the real thing and leaves it out.
# Here first:  bash bench/gpu/prepare.sh && bash bench/gpu/slim_tree.sh stash  (the device tool carries at most
# 64 MiB of working tree), then run with carry [".device"]:  bash bench/gpu/run_gpu.sh; after it, here:
# bash bench/gpu/slim_tree.sh restore.
# Budgeted to finish in under 8 minutes even when every step hits its timeout (sum of the limits: 480 s).
# Everything it writes ends in one archive, $OUT/gpu-run.tar.gz: the device tool brings back only a few
# files (the first run lost the logs of the sanitizer, the bench and every training run that way).
set -uo pipefail
cd "$(dirname "$0")/../.."
source .device/setup.sh
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
unset NUMBA_ENABLE_CUDASIM
export PORTKERN_REQUIRE=numpy,cupy,numba,opencl,torch PORTKERN_TORCH_DEVICE=cuda PORTKERN_TORCH_COMPILE_DEVICE=cuda
start=$SECONDS

# pytest -n 0: on the first H200 run (2026-12-04), `-n auto` brought up 16 workers that each imported
# torch, JAX, CuPy and Numba and initialised CUDA; every parity step hit its timeout with F's and no
# tracebacks. In one process (-n 0), the same tests passed: cupy, numba, torch 44 each (test_parity.py).
# The suite's imports take ~17 s there, so the CUDA backends share one pytest call.
parity() {  # name, timeout seconds, -k expression, extra env...
  local name=$1 limit=$2 expr=$3
  shift 3
  env "$@" timeout "$limit" python3 -m pytest -q -n 0 -p no:cacheprovider --tb=short tests/test_parity.py \
    -k "$expr" --junitxml="$OUT/parity_$name.xml" >"$OUT/parity_$name.log" 2>&1
  echo "parity $name: rc=$? ($(tail -n 1 "$OUT/parity_$name.log"))"
}

parity cuda 65 "cupy or numba or (torch and not compile) or jax"  # NVRTC, Numba-CUDA, torch eager, XLA
parity opencl 25 "opencl and not oclgrind" PORTKERN_OPENCL_DEVICE=nvidia
echo "parity done at $((SECONDS - start))s"

# The sanitizer runs bench/gpu/sanitize.py (CuPy and NumPy imports only; every kernel once, checked
# against the reference): pytest under it spent 30 s importing on the first run and printed nothing.
sanitizer=$(command -v compute-sanitizer || python3 -c "import nvidia, pathlib; print(next(pathlib.Path(nvidia.__path__[0]).glob('cu*/bin/compute-sanitizer')))" 2>/dev/null)
for tool in memcheck racecheck; do
  if [ -x "${sanitizer:-}" ]; then
    timeout 25 "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 python3 bench/gpu/sanitize.py cupy \
      >"$OUT/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? ($(grep -E 'ERROR SUMMARY|sanitize.py' "$OUT/sanitizer_$tool.log" | tail -n 2 | tr '\n' ' '))"
  else
    echo "compute-sanitizer $tool: not found (bench/gpu/prepare.sh carries the nvidia-cuda-sanitizer-api wheel)" | tee "$OUT/sanitizer_$tool.log"
  fi
done

# One bench per backend, each its own results.json (`portkern report` merges them), so a backend that
# runs out of time loses only itself: on the first run cupy alone wrote its results within 20 s of
# starting (the report it prints after may be cut short); the four together ran past 60 s and lost all.
# Numba compiles each kernel on first launch (~20 s for the parity set); torch eager on a GPU dispatches
# ~520 ops per rollout step (~9 us each on the H200), so both get more.
for spec in "cupy:25" "numba:42" "opencl:25" "torch:35"; do
  backend=${spec%:*} limit=${spec##*:}
  timeout "$limit" python3 -m portkern.cli bench --quick --backend "$backend" --device "H200" --machine lent-h200 \
    --out "$OUT/bench-$backend" >"$OUT/bench-$backend.log" 2>&1
  echo "portkern bench --quick --backend $backend: rc=$? ($(ls "$OUT/bench-$backend/results.json" 2>/dev/null || echo 'no results.json'))"
done

# Sections that would start after --budget-s are skipped and recorded as such; the rollouts come last.
timeout 40 python3 bench/gpu/gpu_bench.py --out "$OUT" --budget-s 33 2>&1 | tee "$OUT/gpu_bench.log" | tail -n 30

# 5. Training: 173 s in all. jax@cuda is the whole-loop-compiled JAX PPO (the machine's own CUDA build of
#    JAX); torch@cuda runs the compiled minibatch update (the default, CUDA graphs untested until this
#    runs) and torch+eager-update@cuda the eager one. The kernel stacks keep the eager update here so a
#    one-seed run spends its seconds on the kernels, not on compiling the update. --max-seconds caps
#    each run (CartPole converges in ~80k steps). On the first run every limit (10-25 s) ran out: a run
#    spends ~10 s importing before it trains (cupy then converged in 3.0 s of device time, 15 s wall).
#    numba+eager-update is left out for time (its parity runs above).
mkdir -p "$OUT/train"
for spec in "cupy+eager-update:22" "cupy+fused+eager-update:22" "torch@cuda:40" "torch+eager-update@cuda:22" \
    "jax@cuda:45" "opencl+eager-update@nvidia:22"; do
  stack=${spec%:*} limit=${spec##*:}
  timeout "$limit" python3 -m portkern.cli train --task CartPole-v1 --stack "$stack" --seeds 1 --max-seconds 12 \
    --no-progress --out "$OUT/train/${stack//[@+]/-}.json" >"$OUT/train/${stack//[@+]/-}.log" 2>&1
  echo "portkern train $stack: rc=$? ($(grep -E 'converged|step budget|time budget|error' "$OUT/train/${stack//[@+]/-}.log" | tail -n 1))"
done
echo "all done at $((SECONDS - start))s"
archive=$(mktemp -d)/gpu-run.tar.gz
tar czf "$archive" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "$archive" "$OUT/" && ls -l "$OUT"
