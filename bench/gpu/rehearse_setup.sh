#!/bin/bash
# The rehearsal's stand-in for .device/setup.sh (bench/gpu/run_gpu.sh --rehearse sources it in its setup step):
# nothing to install on the CPU; it checks what the real setup step needs from this checkout instead, and says
# what the stand-ins will run on.
bash -n bench/gpu/prepare.sh && bash -n bench/gpu/slim_tree.sh && bash -n bench/gpu/device_setup.sh && echo "prepare.sh, slim_tree.sh, device_setup.sh: syntax ok"
command -v g++ >/dev/null && echo "g++ (cuda_host): $(g++ -dumpversion)" || echo "g++ not found: cuda_host cannot build"
grep -m 1 'model name' /proc/cpuinfo 2>/dev/null || true
