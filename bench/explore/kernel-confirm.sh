#!/usr/bin/env bash
# The copy kernel on by default (16 KiB) and gather.c's sent() fix, in one short device call (run
# it with OUT set; carry .carry after bench/explore/prebuild.sh): kernel-quick.sh (gpu.device,
# gpu.gather, the calibration, 4K/16K items main against HEAD), then 64 KiB and 256 KiB items
# closed loop, main against HEAD, two rounds interleaved. At most 8 files come back: all in
# $OUT/kc.tgz. QUICK=0: the items alone.
set -u
o=$OUT
mkdir -p "$o/kc"
[ "${QUICK:-1}" = 0 ] || OUT=$o/kc bash bench/explore/kernel-quick.sh 2>&1
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
for r in 1 2; do
  for v in main HEAD; do
    FERRY_GATHER_BYTES=8M timeout 60 ".carry/bin/ferry-$v" bench items --backend cuda --threads 8 \
      --item-sizes 64K,256K --json >"$o/kc/big-$v-$r.json" 2>>"$o/kc/big.err"
    python3 - "$o/kc/big-$v-$r.json" "$v r$r" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], 'no result', e); sys.exit()
for x in j['results']:
    print('%-8s %7d %5.1f%% of %.2f ferry %.2f us p99 %.0f ok %s' % (sys.argv[2], x['item_bytes'],
          100 * x['fraction'], j['ceiling_gbps'], x['cpu_us_per_item_ferry'], x['latency_p99_us'],
          x['verified']))
PY
  done
done
(cd "$o" && tar czf kc.tgz kc && rm -rf kc)
