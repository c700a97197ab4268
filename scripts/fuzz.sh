#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (ASan+UBSan) and run each for a bounded time
# (FERRY_FUZZ_SECONDS, default 30) from its seed corpus. Any crash fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FERRY_FUZZ_SECONDS:-30}
build=${BUILD_FUZZ:-build-fuzz}
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
CC=clang cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Debug -DFERRY_WITH_CUDA=OFF \
  -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF -DFERRY_FUZZ=ON \
  -DFERRY_SANITIZE="address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)"
for f in "$build"/fuzz/fuzz_*; do
  name=$(basename "$f")
  corpus=fuzz/corpus/${name#fuzz_}
  work=$(mktemp -d)
  cp -r "$corpus"/. "$work"/ 2>/dev/null || true
  echo "== $name: ${secs}s"
  log=$(mktemp)
  if ! ASAN_OPTIONS=detect_leaks=1 "$f" -max_total_time="$secs" -max_len=8192 -print_final_stats=1 \
    "$work" >"$log" 2>&1; then
    # the crash: what the harness or a sanitizer said, and the input (crash-* in this folder)
    grep -v '^INFO\|^#[0-9]' "$log" | tail -n 40
    echo "fuzz: $name failed"
    rm -rf "$work" "$log"
    exit 1
  fi
  tail -n 4 "$log"
  rm -rf "$work" "$log"
done
echo "fuzz: all harnesses ran ${secs}s without a crash"
