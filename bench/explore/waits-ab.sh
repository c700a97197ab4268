#!/usr/bin/env bash
# The completion thread's event waits, the CUDA backend's two wait policies interleaved in one
# device call (run it with OUT set; carry .carry, made by `VARIANTS=nospells:-DFERRY_CUDA_WAIT_SPELLS=0
# bash bench/explore/prebuild.sh`): .carry/bin/ferry-HEAD (spells, the default since 2026-12-07:
# a wait that times out leaves its spell open for the next wait on the same recording) against
# .carry/bin/ferry-nospells (the policy before: each wait on its own, one that timed out leaves
# no rhythm, so the next begins with a 20 us spin); A and B name others (the runs of 2026-12-07
# had A=HEAD B=spells, HEAD then without spells). The wait counts are logged
# (FERRY_LOG_LEVEL=debug), through ab-items.sh (ROUNDS, default 2). First this tree's
# gpu_test_device (.carry/tests) and, with GRAPH=1, .carry/bin/slab_graph
# (bench/explore/slab_graph.cu: a slab's chain issued as calls against a CUDA graph); then, on an
# H200 only, in the KEEP seconds kept for it (default 300), h200-targets.sh without its items (the
# A/B has them) with ferry-HEAD: issue 17's generated runs, the PyTorch items peer and issue 18's
# compute-heavy set. LIMIT seconds in all (default 560).
set -u
o=$OUT
limit=${LIMIT:-560}
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
timeout 60 .carry/tests/gpu_test_device >"$o/gpu_test_device.txt" 2>&1
echo "gpu_test_device: rc $? $(grep -c '^\[       OK' "$o/gpu_test_device.txt") ok, $(grep -c '^\[  FAILED' "$o/gpu_test_device.txt") failed"
[ "${GRAPH:-0}" = 0 ] || timeout 120 .carry/bin/slab_graph 2>&1 | tee "$o/graph.txt"
keep=0 # on an H200, the time h200-targets.sh needs
nvidia-smi -L | grep -q H200 && keep=${KEEP:-300}
LIMIT=$((limit - SECONDS - keep)) A=${A:-HEAD} B=${B:-nospells} EXTRA_ENV=FERRY_LOG_LEVEL=debug \
  TARGETS_S=0 ROUNDS=${ROUNDS:-2} bash bench/explore/ab-items.sh
[ "$keep" = 0 ] || LIMIT=$((limit - SECONDS)) ROUNDS=0 bash bench/explore/h200-targets.sh
