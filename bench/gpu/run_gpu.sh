#!/bin/bash
# One prepared run on a lent GPU (an H100 by default, an H200 when asked; nothing here assumes either), every
# GPU backend side by side, ordered by value, each step bounded, every step's files archived as it ends.
# How to prepare, carry, run, read back and give back: docs/gpu-runs.md.
#
#   bash bench/gpu/run_gpu.sh              # on the GPU machine, with carry [".device"]; writes $OUT/gpu-run.tar.gz
#   bash bench/gpu/run_gpu.sh --rehearse   # here, on the CPU: the same steps, commands, logs and archive against
#                                          # CPU stand-ins at tiny sizes; fails naming any step that failed or
#                                          # did not write the files it promises, then reads the archive back
#
# Steps (name, declared limit in seconds), in this order, the figures no other machine can give first:
#   setup             install the carried wheels (.device/setup.sh)
#   gpu_cuda          bench/gpu/gpu_bench.py, one process for cupy and numba: the device (name, memory, clocks,
#                     copy ceiling, fp32/fp64 peaks, measured), pk_common.cuh's float sin and cos against CUDA's
#                     bit for bit (bench/gpu/trig_bits.py: a mismatch fails the step), the CartPole step kernel's
#                     bytes against the copy ceiling, GAE, the fused rollouts (random and MLP policy), Chain-v0 at
#                     K = 3 and 10, then the lower-value sections while its budget lasts
#   gpu_opencl        the same on NVIDIA's OpenCL; gpu_torch: torch and torch.compile on cuda; gpu_jax: JAX (XLA)
#   parity_cuda       tests/test_parity.py, one pytest process (-n 0): cupy, numba, torch eager, jax
#   parity_opencl     the same on NVIDIA's OpenCL
#   sanitize_memcheck, sanitize_racecheck   compute-sanitizer over bench/gpu/sanitize.py (every CUDA kernel once)
#   train_cupy_fused, train_jax             `portkern train` on CartPole-v1, one seed each
#   bench_cupy        `portkern bench --quick --backend cupy`: the rows of the report's cross-device table
# The declared limits sum to at most PLAN_S - (steps x KILL_GRACE_S) (tests/test_gpu_script.py checks it): the
# whole script fits 7 minutes of a 15-minute lease (a machine's start takes a few), a rerun included if need be.
#
# Every step writes logs/<step>.log and timings/<nn>-<step>.json (declared limit, used seconds, exit code,
# missing files) in the run folder, and the archive $OUT/gpu-run.tar.gz is rewritten after every step (and by
# gpu_bench.py after every section), so a lease cut short keeps everything before the cut.
#
# Knobs (environment): PK_GPU_ONLY=step,step runs only those steps; PK_GPU_BREAK=step appends a flag no command
# takes to that step (the rehearsal's own test: it must fail naming the step); PK_GPU_LIMIT_SCALE multiplies the
# limits (default 1 on a GPU, 2 in the rehearsal: two shared CPU cores import torch and JAX slower than a GPU
# machine's host); PYTHON, the interpreter (python3 on the GPU; the project's .venv in the rehearsal).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
MODE=gpu
case "${1:-}" in
  --rehearse) MODE=rehearse ;;
  "") ;;
  *) echo "usage: bash bench/gpu/run_gpu.sh [--rehearse]" >&2; exit 2 ;;
esac
PLAN_S=420        # 7 minutes, imports and archiving included
KILL_GRACE_S=2    # timeout -k: a step that ignores SIGTERM is killed this much after its limit

# --- the steps, in order: name, declared limit (s) -------------------------------------------------------------
STEPS=(setup:30 gpu_cuda:75 gpu_opencl:28 gpu_torch:50 gpu_jax:32 parity_cuda:50 parity_opencl:18
       sanitize_memcheck:18 sanitize_racecheck:18 train_cupy_fused:22 train_jax:30 bench_cupy:25)

declared_total=0
for s in "${STEPS[@]}"; do declared_total=$((declared_total + ${s##*:})); done
if [ $((declared_total + ${#STEPS[@]} * KILL_GRACE_S)) -gt "$PLAN_S" ]; then
  echo "run_gpu.sh: the declared limits sum to ${declared_total} s + ${#STEPS[@]} x ${KILL_GRACE_S} s grace," \
       "over the ${PLAN_S} s plan" >&2
  exit 2
fi

# --- what differs between the GPU and its rehearsal: backends, devices, sizes; never the commands -------------
if [ "$MODE" = gpu ]; then
  PY=${PYTHON:-python3}
  SETUP=$ROOT/.device/setup.sh
  LIMIT_SCALE=${PK_GPU_LIMIT_SCALE:-1}
  CUDA_BACKENDS=cupy,numba
  unset NUMBA_ENABLE_CUDASIM
  export PORTKERN_OPENCL_DEVICE=nvidia PORTKERN_TORCH_DEVICE=cuda PORTKERN_TORCH_COMPILE_DEVICE=cuda
  export PORTKERN_REQUIRE=numpy,cupy,numba,opencl,torch
  SIZES=()                                        # gpu_bench.py's defaults: 2^24 envs a step, 2^20 a rollout
  PARITY_CUDA_K="cupy or numba or (torch and not compile) or jax"
  PARITY_OPENCL_K="opencl and not oclgrind"
  # The simplest env and the heaviest (Chain-v0), plus every buffer op: under the tool every launch is slow
  SANITIZE_BACKEND=cupy SANITIZE_ARGS=(--envs CartPole-v1,Chain-v0)
  TORCH_ARGS=() JAX_ARGS=()
  TRAIN_CUPY=cupy+fused+eager-update TRAIN_JAX=jax@cuda
  TRAIN_ARGS=(--max-seconds 12)
  BENCH_BACKEND=cupy BENCH_ARGS=()
else
  PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || command -v python3)}
  SETUP=$ROOT/bench/gpu/rehearse_setup.sh        # stands in for .device/setup.sh (no wheels to install here)
  LIMIT_SCALE=${PK_GPU_LIMIT_SCALE:-2}
  CUDA_BACKENDS=cuda_host,numba                   # the CUDA C on the CPU; Numba-CUDA in its simulator
  export NUMBA_ENABLE_CUDASIM=1
  export PORTKERN_OPENCL_DEVICE=pocl PORTKERN_TORCH_DEVICE=cpu PORTKERN_TORCH_COMPILE_DEVICE=cpu
  export PORTKERN_REQUIRE=numpy
  SIZES=(--envs-log2 6 --gae-t 4 --gae-n-log2 6 --copy-mib 8 --fma-iters 64 --steps 2 --rollout-t 4
         --rollout-n-log2 5 --rollout-host-n-log2 4 --chain-n-log2 3 --chain-steps 2 --no-extras --strict)
  PARITY_CUDA_K="(cuda_host or numba or (torch and not compile) or jax) and CartPole and float32"
  PARITY_OPENCL_K="(opencl and not oclgrind) and CartPole and float32"
  SANITIZE_BACKEND=cuda_host SANITIZE_ARGS=(--envs CartPole-v1)
  # Inductor and XLA compile for tens of seconds each on two CPU cores: the compiled frameworks run a few sections
  TORCH_ARGS=(--compiled-sections gae) JAX_ARGS=(--compiled-sections step,gae,rollout)
  TRAIN_CUPY=numpy+fused+eager-update TRAIN_JAX=jax
  TRAIN_ARGS=(--max-seconds 12 --updates 2)
  BENCH_BACKEND=numpy BENCH_ARGS=(--kernels step:CartPole-v1,gae --sizes 1024 --rounds 2)
fi
export PYOPENCL_COMPILER_OUTPUT=0
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pk-gpu-run.XXXXXX")   # fresh: no journal of an earlier run is found
RUN=$WORK/gpu-run
mkdir -p "$RUN/logs" "$RUN/timings" "$RUN/train"
ARCHIVE=$OUT/gpu-run.tar.gz
# The archive, rewritten whole (a temp file, then mv): what the device tool brings back even if the lease ends.
export PK_GPU_SAVE_HOOK="tar czf '$OUT/.gpu-run.tar.gz.tmp' -C '$WORK' gpu-run && mv -f '$OUT/.gpu-run.tar.gz.tmp' '$ARCHIVE'"
archive() { bash -c "$PK_GPU_SAVE_HOOK"; }
exec > >(tee -a "$RUN/run_gpu.log") 2>&1
T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }
echo "run_gpu.sh $MODE: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) host cores, python $PY, run folder $RUN," \
     "declared ${declared_total} s of the ${PLAN_S} s plan"
printf 'mode\t%s\nstarted\t%s\nplan_s\t%s\ndeclared_s\t%s\nlimit_scale\t%s\nhost\t%s\n' "$MODE" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$PLAN_S" "$declared_total" "$LIMIT_SCALE" "$(hostname)" >"$RUN/run.tsv"

FAILED=()
N=0
# step NAME "PROMISED FILES (relative to the run folder)" -- COMMAND...
step() {
  local name=$1 promised=$2 limit="" s
  shift 3
  for s in "${STEPS[@]}"; do [ "${s%%:*}" = "$name" ] && limit=${s##*:}; done
  [ -n "$limit" ] || { echo "run_gpu.sh: step $name has no declared limit in STEPS" >&2; FAILED+=("$name"); return; }
  N=$((N + 1))
  if [ -n "${PK_GPU_ONLY:-}" ] && [[ ",$PK_GPU_ONLY," != *",$name,"* ]]; then return; fi
  local argv=("$@")
  [ "${PK_GPU_BREAK:-}" = "$name" ] && argv+=(--pk-injected-bad-flag)
  local run_limit log=$RUN/logs/$name.log t0 rc used missing="" f
  run_limit=$(awk -v l="$limit" -v k="$LIMIT_SCALE" 'BEGIN {printf "%d", l * k + 0.5}')
  echo "== $(printf '%02d' $N) $name: limit ${limit} s$( [ "$run_limit" != "$limit" ] && echo " (x$LIMIT_SCALE: $run_limit s)"), at $(elapsed) s"
  t0=$(date +%s.%N)
  timeout -k "$KILL_GRACE_S" "$run_limit" "${argv[@]}" >"$log" 2>&1
  rc=$?
  used=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
  for f in logs/$name.log $promised; do [ -s "$RUN/$f" ] || missing+=" $f"; done
  missing=${missing# }
  printf '{"step": "%s", "order": %d, "limit_s": %s, "run_limit_s": %s, "used_s": %s, "exit_code": %d, "timed_out": %s, "promised": "%s", "missing": "%s"}\n' \
    "$name" "$N" "$limit" "$run_limit" "$used" "$rc" "$( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo true || echo false)" \
    "$promised" "$missing" >"$RUN/timings/$(printf '%02d' $N)-$name.json"
  archive
  local verdict=ok
  if [ $rc -ne 0 ] || [ -n "$missing" ]; then verdict=FAILED; FAILED+=("$name"); fi
  echo "   $name: $verdict, exit $rc, ${used} s of ${limit} s${missing:+, missing: $missing}; $(tail -n 1 "$log" | cut -c1-160)"
}

GB=(bench/gpu/gpu_bench.py --out "$RUN" "${SIZES[@]}")
budget() { awk -v l="$1" -v k="$LIMIT_SCALE" 'BEGIN {printf "%d", l * k - 6}'; }  # gpu_bench.py starts no section after this (seconds)

step setup "" -- bash -c '[ $# -eq 2 ] || { echo "setup: unexpected arguments: ${*:3}"; exit 2; }
  source "$1" && "$2" -c "import numpy, portkern; print(\"numpy\", numpy.__version__, \"portkern ok\")"' _ "$SETUP" "$PY"
step gpu_cuda "gpu_bench_cuda.json device.json" -- "$PY" "${GB[@]}" --family cuda --backends "$CUDA_BACKENDS" --device-info --budget-s "$(budget 75)"
step gpu_opencl "gpu_bench_opencl.json" -- "$PY" "${GB[@]}" --family opencl --backends opencl --budget-s "$(budget 28)"
step gpu_torch "gpu_bench_torch.json" -- "$PY" "${GB[@]}" --family torch --backends torch,torch_compile --budget-s "$(budget 50)" "${TORCH_ARGS[@]}"
step gpu_jax "gpu_bench_jax.json" -- "$PY" "${GB[@]}" --family jax --backends jax --budget-s "$(budget 32)" "${JAX_ARGS[@]}"

# pytest -n 0: on the first H200 run (2026-12-04), `-n auto` brought up 16 workers that each imported torch,
# JAX, CuPy and Numba and initialised CUDA; every parity step hit its timeout. In one process they passed.
PYTEST=("$PY" -m pytest -q -n 0 -p no:cacheprovider --tb=short tests/test_parity.py)
step parity_cuda "parity_cuda.xml" -- "${PYTEST[@]}" -k "$PARITY_CUDA_K" --junitxml="$RUN/parity_cuda.xml"
step parity_opencl "parity_opencl.xml" -- "${PYTEST[@]}" -k "$PARITY_OPENCL_K" --junitxml="$RUN/parity_opencl.xml"

# compute-sanitizer over bench/gpu/sanitize.py (CuPy and NumPy imports only: pytest under the tool spent its
# whole limit importing on the first run). The rehearsal has no sanitizer: the same script runs bare.
SANITIZER=()
if [ "$MODE" = gpu ]; then
  tool=$(command -v compute-sanitizer || "$PY" -c "import nvidia, pathlib; print(next(pathlib.Path(nvidia.__path__[0]).glob('cu*/bin/compute-sanitizer')))" 2>/dev/null)
  [ -x "${tool:-}" ] && SANITIZER=("$tool" --error-exitcode 86 --print-limit 20 --tool) \
    || echo "compute-sanitizer not found (bench/gpu/prepare.sh carries the nvidia-cuda-sanitizer-api wheel)"
fi
for t in memcheck racecheck; do
  step "sanitize_$t" "" -- "${SANITIZER[@]}" ${SANITIZER[@]:+$t} "$PY" bench/gpu/sanitize.py "$SANITIZE_BACKEND" "${SANITIZE_ARGS[@]}"
done

# Training: one seed per stack, CartPole converges in ~80k steps; --max-seconds caps each run.
TRAIN=("$PY" -m portkern.cli train --task CartPole-v1 --seeds 1 --no-progress "${TRAIN_ARGS[@]}")
step train_cupy_fused "train/cupy-fused.json" -- "${TRAIN[@]}" --stack "$TRAIN_CUPY" --out "$RUN/train/cupy-fused.json"
step train_jax "train/jax.json" -- "${TRAIN[@]}" --stack "$TRAIN_JAX" --out "$RUN/train/jax.json"

# Last, the quick bench: its results.json is what puts the GPU in the report's cross-device table, labelled
# with the device the run measured (lent-nvidia-h100-80gb-hbm3), so two leases' runs stay two machines.
MACHINE=lent-$("$PY" -c 'import json, re, sys; n = json.load(open(sys.argv[1])).get("name", "gpu")
print(re.sub(r"[^a-z0-9]+", "-", re.sub(r"\(host CPU stand-in.*?\)", "", n).lower()).strip("-"))' "$RUN/device.json" 2>/dev/null || echo gpu)
step bench_cupy "bench-cupy/results.json" -- "$PY" -m portkern.cli bench --quick --backend "$BENCH_BACKEND" \
  --machine "$MACHINE" --out "$RUN/bench-cupy" "${BENCH_ARGS[@]}"

# --- where the time went --------------------------------------------------------------------------------------
"$PY" - "$RUN" "$PLAN_S" <<'PYEOF' | tee "$RUN/timings.txt"
import json, pathlib, sys
run, plan = pathlib.Path(sys.argv[1]), float(sys.argv[2])
rows = [json.loads(p.read_text()) for p in sorted((run / "timings").glob("*.json"))]
print(f"{'step':<20} {'limit s':>8} {'used s':>8} {'exit':>5}  missing")
for r in rows:
    print(f"{r['step']:<20} {r['limit_s']:>8} {r['used_s']:>8.1f} {r['exit_code']:>5}  {r['missing']}")
used = sum(r["used_s"] for r in rows)
print(f"{'total':<20} {sum(r['limit_s'] for r in rows):>8} {used:>8.1f}        (plan {plan:.0f} s)")
over = [r["step"] for r in rows if r["used_s"] > r["limit_s"]]
if over:
    print("used more than the declared (GPU) limit here: " + ", ".join(over))
PYEOF
printf 'finished\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$RUN/run.tsv"
archive
echo "archive: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)), run took $(elapsed) s"

if [ "$MODE" = rehearse ] && [ ${#FAILED[@]} -eq 0 ] && [ -z "${PK_GPU_ONLY:-}" ]; then
  # The archive must hold every promised file, and read back into a report beside a CPU run.
  echo "== readback: bench/gpu/readback.py (archive -> results folder -> portkern report)"
  if ! "$PY" bench/gpu/readback.py "$ARCHIVE" --results "$WORK/results" --check >"$RUN/logs/readback.log" 2>&1; then
    FAILED+=(readback)
  fi
  tail -n 5 "$RUN/logs/readback.log"
fi
rm -rf "$WORK"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "run_gpu.sh $MODE: FAILED steps: ${FAILED[*]}"
  exit 1
fi
echo "run_gpu.sh $MODE: every step ran and wrote its files"
