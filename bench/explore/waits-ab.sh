#!/usr/bin/env bash
# The completion thread's event waits, two CUDA wait policies interleaved in one device call (run
# it with OUT set; carry .carry): .carry/ab/ferry-old (each wait on its own: one that timed out
# left no rhythm, so the next began with a 20 us spin) against .carry/ab/ferry-new (a wait that
# times out leaves its spell open for the next wait on the same recording), both built by hand
# from one tree with the wait counts logged (FERRY_LOG_LEVEL=debug), through ab-items.sh (ROUNDS,
# default 2); first .carry/ab/slab_graph (bench/explore/slab_graph.cu: a slab's chain issued as
# calls against a CUDA graph) and .carry/ab/gpu_test_device (this tree's); then, with the time left, h200-targets.sh without its items (the
# A/B has them) with ferry-new: on an H200 issue 17's generated runs, the PyTorch items peer and
# issue 18's compute-heavy set. LIMIT seconds in all (default 560).
set -u
o=$OUT
limit=${LIMIT:-560}
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
timeout 60 .carry/ab/gpu_test_device >"$o/gpu_test_device.txt" 2>&1
echo "gpu_test_device (this tree): rc $? $(grep -c '^\[       OK' "$o/gpu_test_device.txt") ok, $(grep -c '^\[  FAILED' "$o/gpu_test_device.txt") failed"
timeout 120 .carry/ab/slab_graph 2>&1 | tee "$o/graph.txt"
LIMIT=$((limit - SECONDS - 300)) PREBUILT=.carry/ab A=old B=new EXTRA_ENV=FERRY_LOG_LEVEL=debug \
  TARGETS_S=0 ROUNDS=${ROUNDS:-2} bash bench/explore/ab-items.sh
LIMIT=$((limit - SECONDS)) FERRY=.carry/ab/ferry-new ROUNDS=0 bash bench/explore/h200-targets.sh
