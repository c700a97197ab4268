#!/usr/bin/env bash
# Issue 20's latency tail: `ferry bench items` (8 threads, 64K and 256K items, 8 MiB slabs) at
# gather_slabs SLABS (default "6 8 10 12 0"; 0: depth + 4 = 12), interleaved over ROUNDS
# (default 2): GB/s, fraction of the ceiling, p50 and p99 per setting. $OUT/slabs.jsonl.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
[ -x build-gpu/ferry ] && [ "${SKIP_BUILD:-0}" = 1 ] || build_gpu
for r in $(seq 1 "${ROUNDS:-2}"); do
  for s in ${SLABS:-6 8 10 12 0}; do
    FERRY_GATHER_SLABS=$s FERRY_GATHER_BYTES=8M build-gpu/ferry bench items --backend cuda \
      --threads 8 --item-sizes 64K,256K --json 2>>"$OUT/slabs.err" |
      python3 -c "import json,sys; j=json.load(sys.stdin); j['slabs_opt']=$s; j['round']=$r; print(json.dumps(j))" \
        >>"$OUT/slabs.jsonl"
  done
done
python3 - "$OUT/slabs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    for r in j['results']:
        print('round %d slabs %2d item %6d %6.2f GB/s %5.1f%% of %.2f p50 %6.0f p99 %6.0f us' % (
            j['round'], j['slabs_opt'], r['item_bytes'], r['gbps_h2d'], 100 * r['fraction'],
            j['ceiling_gbps'], r['latency_p50_us'], r['latency_p99_us']))
PY
