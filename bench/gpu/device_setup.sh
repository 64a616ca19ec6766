# Sourced on the GPU machine by bench/gpu/run_gpu.sh's setup step (bench/gpu/prepare.sh copies it to
# .device/setup.sh): installs the carried wheels into the machine's python3, registers NVIDIA's OpenCL driver
# (the library is there, its ICD file is not), and puts the checkout on PYTHONPATH.
python3 -m pip install --no-index --no-deps -q .device/wheels/*.whl 2>&1 | grep -v '^WARNING' | tail -3
if [ ! -e /etc/OpenCL/vendors/nvidia.icd ]; then
  for lib in /usr/lib/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so.1 \
      /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1; do
    if [ -e "$lib" ]; then mkdir -p /etc/OpenCL/vendors; echo "$lib" > /etc/OpenCL/vendors/nvidia.icd; break; fi
  done
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYOPENCL_COMPILER_OUTPUT=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv,noheader
python3 -c "import numpy, cupy, numba; print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'numba', numba.__version__)"
