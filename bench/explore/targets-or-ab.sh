#!/usr/bin/env bash
# One device call that takes what comes (run it with OUT set; carry .carry; LIMIT seconds in
# all, default 520): first issue18-ab.sh (ferry-HEAD against ferry-nt from .carry/b18, fma 64
# and 256, HOWS default "gpu cpu set", AB_ROUNDS rounds, default 2; ab.tgz); then on an H200 the
# targets issues 17 and 20 name for it (open-targets.sh without the tmpfs probe; ot.tgz), on
# another GPU issue 20's items on a schedule with their latency bound (64 KiB at 75%, 256 KiB at
# 90% of the ceiling, .carry/bin/ferry-HEAD, ROUNDS rounds, default 3; rate.tgz).
set -u
o=$OUT
limit=${LIMIT:-520}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== $gpu"
mkdir -p "$o/ab"
OUT="$o/ab" PREBUILT=.carry/b18 INTENSITIES="64 256" HOWS="${HOWS:-gpu cpu set}" \
  ROUNDS="${AB_ROUNDS:-2}" timeout $((limit / 2)) bash bench/explore/issue18-ab.sh 2>&1 | tail -40
(cd "$o" && tar czf ab.tgz ab && rm -rf ab)
left=$((limit - SECONDS))
echo "== $left s left"
if [[ $gpu == *H200* ]]; then
  mkdir -p "$o/ot"
  timeout "$left" env OUT="$o/ot" TMPFS=0 bash bench/explore/open-targets.sh 2>&1 |
    grep -v "cpu by thread" | tail -40
  (cd "$o/ot" && tar czf ../ot.tgz . && cd .. && rm -rf ot)
  exit 0
fi
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
mkdir -p "$o/rate"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for s in 64K:75% 256K:90%; do
    [ $((limit - SECONDS)) -gt 20 ] || break 2
    f=$o/rate/${s%:*}-$r.json
    FERRY_GATHER_BYTES=8M timeout 60 .carry/bin/ferry-HEAD bench items --backend cuda --threads 8 \
      --item-sizes "${s%:*}" --rate "${s#*:}" --json >"$f" 2>>"$o/rate/err"
    python3 - "$f" "$s" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for x in j['results']:
    print('%-9s %5.1f%% of %.2f p50 %5.0f p99 %5.0f us, bound %s (%s), ferry cpu %.2f us, %.1f items a slab, ok %s' % (
        sys.argv[2], 100 * x['fraction'], j['ceiling_gbps'], x['latency_p50_us'], x['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-',
        x.get('latency_p99_within_bound'), x.get('cpu_us_per_item_ferry', -1),
        x['items'] / max(x.get('slabs', 1), 1), x['verified']))
PY
  done
done
(cd "$o" && tar czf rate.tgz rate && rm -rf rate)
