#!/bin/bash
# Run here, from the repository root, before a GPU run: fills .device/ (git-ignored) with the wheels
# the GPU machine lacks (see ../shared/device/README.md), then carry ".device" in the run.
# Besides the shared recipe's wheels: what the test suite imports that the GPU machine does not
# have (hypothesis and friends, rich, array-api-compat, the core dependency of the reference) and
# NVIDIA's compute-sanitizer as a wheel (manylinux_2_25, which the shared recipe's platform list
# does not take), in case the machine has no CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/../.."
../shared/device/prepare.sh hypothesis sortedcontainers rich markdown-it-py mdurl pygments \
  array-api-compat stable-baselines3 cloudpickle
pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_25_x86_64 --no-deps \
  -d .device/wheels "nvidia-cuda-sanitizer-api>=13,<14" 2>&1 | grep -v '^WARNING' || true
du -sh .device
