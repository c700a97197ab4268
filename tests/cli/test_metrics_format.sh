#!/usr/bin/env bash
# The metrics file of a run: ferry_build_info carries the version, and the batch-latency
# histogram's bucket bounds are written short (0.00025, not 0.00025000000000000001); every
# number reads back as itself. docs/metrics.md lists ferry_build_info and says which series
# count virtual seconds on the simulator.
. "$(dirname "$0")/lib.sh"
version=$("$FERRY" --version | sed 's/^ferry //')
expect_rc "run with --metrics-file" 0 "$FERRY" run --backend sim --bytes 16M --metrics-file "$TMP/m.prom"
expect_in "build info" "$TMP/m.prom" "ferry_build_info{version=\"$version\"} 1"
expect_in "build info is a gauge" "$TMP/m.prom" "# TYPE ferry_build_info gauge"
expect_in "bucket 0.00025 short" "$TMP/m.prom" 'ferry_pipeline_batch_latency_seconds_bucket{pipeline="run",device="0",le="0.00025"}'
expect_in "bucket 0.1 short" "$TMP/m.prom" 'le="0.1"}'
expect_not_in "no 17-digit bounds" "$TMP/m.prom" "00000000001"
if python3 - "$TMP/m.prom" <<'PYEOF'; then ok "every number is the shortest that reads back"; else bad "a number is longer than it needs"; fi
import re, sys
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    nums = re.findall(r'le="([^"+]+)"', line) + [line.rsplit(" ", 1)[1].strip()]
    for t in nums:
        if t in ("+Inf", "-Inf", "NaN"):
            continue
        v = float(t)
        short = min((f"{v:.{p}g}" for p in range(1, 18) if float(f"{v:.{p}g}") == v), key=len)
        if v == int(v) and abs(v) < 2**53:
            short = str(int(v))
        if len(t) > len(short):
            print("long:", line.strip(), t, short)
            sys.exit(1)
PYEOF
DOC="$(dirname "$0")/../../docs/metrics.md"
expect_in "docs list ferry_build_info" "$DOC" '`ferry_build_info`'
expect_in "docs say which series are virtual seconds" "$DOC" "count **virtual seconds** there"
for s in ferry_engine_busy_seconds_total ferry_pipeline_batch_latency_seconds; do
  expect_in "docs: $s among the virtual ones" <(sed -n '/Virtual seconds on the simulator/,/^Rates are/p' "$DOC") "$s"
done
finish
