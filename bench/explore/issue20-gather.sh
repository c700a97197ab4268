#!/usr/bin/env bash
# Issue 20 on one GPU: gathering small batches into slabs (option gather_bytes) against none,
# `ferry bench items` with 8 submitting threads, 64K, 256K and 1M items, interleaved rounds in one
# lease (ROUNDS, default 2); then `ferry run` with 64K batches, gathered and not. Builds
# build-gpu. Writes $OUT/g-*.json and prints a table last.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
build_gpu # incremental: the tree may have changed since build-gpu was made
cp .carry/commit "$OUT/commit.txt" # the tree's commit (the copy's .git may be older)
for r in $(seq 1 "${ROUNDS:-2}"); do
  for g in 0 2M 8M; do
    FERRY_GATHER_BYTES=$g build-gpu/ferry bench items --backend cuda --threads 8 \
      --item-sizes 64K,256K,1M --json >"$OUT/g-items-$g-r$r.json" 2>>"$OUT/items.err"
  done
done
for g in 0 8M; do
  FERRY_GATHER_BYTES=$g build-gpu/ferry run --backend cuda --bytes 2G --batch-bytes 64K \
    --json >"$OUT/g-run-$g.json" 2>>"$OUT/items.err"
done
tail -5 "$OUT/items.err"
python3 - "$OUT" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'g-items-*.json'))):
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, 'unreadable', e); continue
    for r in j['results']:
        print('%-22s ceil %6.2f item %7d %6.2f/%6.2f GB/s %5.1f%% p50 %7.1f p99 %7.1f us cpu %6.2f us ok %s' % (
            os.path.basename(f), j['ceiling_gbps'], r['item_bytes'], r['gbps_h2d'], r['gbps_d2h'],
            100 * r['fraction'], r['latency_p50_us'], r['latency_p99_us'], r['cpu_us_per_item'], r['verified']))
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'g-run-*.json'))):
    try:
        j = json.load(open(f))
        print('%-14s %6.2f GB/s e2e %6.2f p50 %8.1f p99 %8.1f us ok %s' % (os.path.basename(f),
              j['gbps_h2d'], j.get('end_to_end_gbps', 0), j['latency_p50_us'], j['latency_p99_us'], j['ok']))
    except Exception as e:
        print(f, 'unreadable', e)
PY
