#!/bin/bash
# Run here, from the repository root, before a GPU run: fills .device/ (git-ignored) with the wheels the GPU
# machine lacks and its setup script (bench/gpu/device_setup.sh, copied to .device/setup.sh), then carry
# ".device" in the run. The machine has Python 3.12, CuPy, numba + numba-cuda, JAX, PyTorch and pytest, no
# network; what it lacks: pyopencl and its helpers, pytest-benchmark, Gymnasium, a numpy that numba.cuda
# imports with (its own breaks `import numba.cuda`), what the test suite imports (hypothesis and friends, rich,
# array-api-compat, stable-baselines3), and NVIDIA's compute-sanitizer as a wheel (manylinux_2_25), in case
# the machine has no CUDA toolkit. Extra arguments: more packages to carry (cp312, manylinux x86_64, no deps).
# docs/gpu-runs.md has the whole recipe.
set -euo pipefail
cd "$(dirname "$0")/../.."
PIP=${PIP:-pip}
mkdir -p .device/wheels
$PIP download -q --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --no-deps -d .device/wheels \
  pyopencl pytools siphash24 platformdirs 'numpy>=2.3,<2.5' pytest-benchmark py-cpuinfo gymnasium \
  farama-notifications hypothesis sortedcontainers rich markdown-it-py mdurl pygments array-api-compat \
  stable-baselines3 cloudpickle "$@" 2>&1 | grep -v '^WARNING' || true
$PIP download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_25_x86_64 --no-deps \
  -d .device/wheels "nvidia-cuda-sanitizer-api>=13,<14" 2>&1 | grep -v '^WARNING' || true
cp bench/gpu/device_setup.sh .device/setup.sh
ls .device/wheels | sed 's/-[0-9].*//' | sort -u | tr '\n' ' '
echo
du -sh .device
