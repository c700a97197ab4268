#!/usr/bin/env bash
# Issue 18's compute-heavy target with two prebuilt ferry binaries, interleaved in one device
# call (run it with OUT set; carry .carry): per round (ROUNDS, default 2) and for A then B
# (default HEAD and nt: $PREBUILT/ferry-A, $PREBUILT/ferry-B, bench/explore/prebuild.sh), one
# round of issue18-compute.sh (the GPU alone, then the GPU and the CPU device: HOWS, default
# "gpu set") at INTENSITIES (default 64). Rows tagged with the binary's name in $OUT/runs.jsonl;
# the table last: each binary's medians and its set against the target.
set -u
pb=${PREBUILT:-.carry/bin}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "${A:-HEAD}" "${B:-nt}"; do
    FERRY="$pb/ferry-$v" TAG="$v" ROUNDS=1 HOWS="${HOWS:-gpu set}" INTENSITIES="${INTENSITIES:-64}" \
      VERIFY="${VERIFY:-sample}" BYTES="${BYTES:-64G}" bash "$(dirname "$0")/issue18-compute.sh" |
      { [ "$r" = "${ROUNDS:-2}" ] && [ "$v" = "${B:-nt}" ] && cat || cat >/dev/null; }
  done
done
