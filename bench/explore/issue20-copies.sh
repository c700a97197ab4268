#!/usr/bin/env bash
# Issue 20 on one GPU: how small pieces move between scattered pinned host memory and a slab on
# the device (bench/explore/small_copies.cu: one copy, a copy each, cudaMemcpyBatchAsync, a copy
# kernel over mapped memory), the GPU test of gathering (gpu.gather), then the gather sweep (issue20-gather.sh, ROUNDS). $OUT/copies.txt.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
if [ "${COPIES:-1}" = 1 ]; then
  nvcc -O2 -o "$OUT/small_copies" bench/explore/small_copies.cu && "$OUT/small_copies" | tee "$OUT/copies.txt"
  rm -f "$OUT/small_copies"
fi
build_gpu gpu_test_gather
build-gpu/tests/gpu_test_gather 2>&1 | grep -v "warn bandwidth" | tee "$OUT/gpu-gather.txt" | tail -12
[ "${GATHER:-1}" = 1 ] && bash "$(dirname "$0")/issue20-gather.sh"
