#!/usr/bin/env bash
# Run ferry's host-side benchmarks and record them in bench/results/ with the date, the
# machine, the commit and the command. Usage: scripts/bench.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
date=$(date -u +%Y-%m-%d)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo "+dirty" || true)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
out=bench/results/${date}-host-${commit}.jsonl
mkdir -p bench/results
{
  printf '{"meta":{"date":"%s","device":"host CPU: %s, %s cores","driver":"none (simulator)","commit":"%s%s","command":"scripts/bench.sh %s","load":"%s"}}\n' \
    "$date" "$cpu" "$(nproc)" "$commit" "$dirty" "$build" "$(cut -d' ' -f1-3 /proc/loadavg)"
  for b in "$build"/bench/bench_*; do
    [ -x "$b" ] || continue
    "$b"
  done
} | tee "$out"
echo "results: $out" >&2
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\n%-10s %-40s %12s  %-9s %s" % ("bench", "case", "value", "unit", "target"))
for r in rows:
    if "bench" in r:
        t = ("<= %g %s" % (r["target"], "met" if r["met"] else "MISSED")) if "target" in r else ""
        v = ("%12.4f" if abs(r["value"]) < 10 else "%12.1f") % r["value"]
        print("%-10s %-40s %s  %-9s %s" % (r["bench"], r["case"], v, r["unit"], t))
        if "ci95" in r:  # a median of n ratios: its quartiles and 95% interval
            print("%-10s %-40s %12s  quartiles %.4f-%.4f, median's 95%% interval %.4f-%.4f, n %d"
                  % ("", "", "", r["q1"], r["q3"], r["ci95"][0], r["ci95"][1], r["n"]))
PY
