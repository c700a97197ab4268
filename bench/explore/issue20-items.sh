#!/usr/bin/env bash
# Issue 20 on one GPU: `ferry bench items` (8 threads, 64K and 256K items, each its own batch;
# then 1 thread) in one process and in a worker process, and `ferry run` with small batches
# for its latency line. Needs build-gpu (bench/explore/carry-env.sh's build_gpu, or
# issue19-gpu.sh run before it in the same call). Writes $OUT/items*.json and prints a table.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
[ -x build-gpu/ferry ] || build_gpu
for iso in thread process; do
  for t in 8 1; do
    build-gpu/ferry bench items --backend cuda --isolation $iso --threads $t --json \
      >"$OUT/items-$iso-t$t.json" 2>>"$OUT/items.err"
  done
done
for b in 64K 256K 1M; do
  build-gpu/ferry run --backend cuda --bytes 2G --batch-bytes $b --chunk-bytes $b --json \
    >"$OUT/run-$b.json" 2>>"$OUT/items.err"
done
python3 - "$OUT" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'items-*.json'))):
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, 'unreadable', e); continue
    for r in j['results']:
        print('%-22s ceiling %6.2f item %7d  %6.2f/%6.2f GB/s  %5.1f%%  p50 %7.1f p99 %7.1f us  cpu %6.2f us  ok %s' % (
            os.path.basename(f), j['ceiling_gbps'], r['item_bytes'], r['gbps_h2d'], r['gbps_d2h'],
            100 * r['fraction'], r['latency_p50_us'], r['latency_p99_us'], r['cpu_us_per_item'], r['verified']))
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'run-*.json'))):
    try:
        j = json.load(open(f))
        print('%-12s %6.2f GB/s p50 %8.1f p99 %8.1f us ok %s' % (os.path.basename(f), j['gbps_h2d'],
              j['latency_p50_us'], j['latency_p99_us'], j['ok']))
    except Exception as e:
        print(f, 'unreadable', e)
PY
