#!/usr/bin/env bash
# Issue 20's p99 on a schedule against its bound, by the gather's knobs, in one short device call
# (run it with OUT set; carry .carry; LIMIT seconds in all, default 150): 256 KiB items offered at
# 90% of the ceiling (and 64 KiB at 75%) from 8 threads into 8 MiB slabs, .carry/bin/ferry-HEAD,
# with the defaults (gather_us 100, depth 8), gather_us 50, gather_slabs 6 and depth 4 (KNOBS:
# others, "default" for none), each in turn (SIZES: which), rounds while the time lasts. JSON in
# $OUT/knobs.tgz; a line per run.
set -u
o=$OUT
limit=${LIMIT:-150}
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p "$o/knobs"
for r in 1 2 3; do
  for k in ${KNOBS:-default FERRY_GATHER_US=50 FERRY_GATHER_SLABS=6 FERRY_DEPTH=4}; do
    for s in ${SIZES:-256K:90% 64K:75%}; do
      [ $((limit - SECONDS)) -gt 12 ] || break 3
      f=$o/knobs/${k#FERRY_}-${s%:*}-$r.json
      env ${k/default/FERRY_GATHER_US=100} FERRY_GATHER_BYTES=8M timeout 30 .carry/bin/ferry-HEAD \
        bench items --backend cuda --threads 8 --item-sizes "${s%:*}" --rate "${s#*:}" --json \
        >"$f" 2>>"$o/knobs/err"
      python3 - "$f" "$k" "$s" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for x in j['results']:
    print('%-20s %-9s %5.1f%% p50 %5.0f p99 %5.0f us, bound %s (%s), cpu %.2f us, %.1f items a slab, ok %s' % (
        sys.argv[2], sys.argv[3], 100 * x['fraction'], x['latency_p50_us'], x['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-',
        x.get('latency_p99_within_bound'), x.get('cpu_us_per_item_ferry', -1),
        x['items'] / max(x.get('slabs', 1), 1), x['verified']))
PY
    done
  done
done
(cd "$o" && tar czf knobs.tgz knobs && rm -rf knobs)
