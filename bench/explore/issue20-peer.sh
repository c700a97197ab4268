#!/usr/bin/env bash
# Issue 20 on one GPU: the PyTorch items peer (bench/peers/torch_items.py, its sweep) and ferry
# bench items gathered and not, in one lease, 64K and 256K items. $OUT/peer.jsonl, $OUT/f-*.json.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
build_gpu
cp .carry/commit "$OUT/commit.txt"
python3 bench/peers/torch_items.py --bytes $((512 << 20)) --item-sizes 65536,262144 \
  >"$OUT/peer.jsonl" 2>"$OUT/peer.err" || tail -5 "$OUT/peer.err"
for g in 0 8M 8M:6 2M:6; do
  slabs=0; case $g in *:*) slabs=${g#*:} ;; esac
  FERRY_GATHER_SLABS=$slabs FERRY_GATHER_BYTES=${g%:*} build-gpu/ferry bench items --backend cuda \
    --threads 8 --item-sizes 64K,256K --json >"$OUT/f-items-$g.json" 2>>"$OUT/items.err"
done
for t in 1 2; do
  FERRY_GATHER_BYTES=8M build-gpu/ferry bench items --backend cuda --threads $t \
    --item-sizes 64K,256K --json >"$OUT/f-items-8M-t$t.json" 2>>"$OUT/items.err"
done
python3 - "$OUT" <<'PY'
import json, sys, os
o = sys.argv[1]
for l in open(os.path.join(o, 'peer.jsonl')):
    r = json.loads(l)
    print('torch %-6s s=%d g=%-3d item %7d %7.2f GB/s%s' % (r['mode'], r['streams'], r['group'],
          r['item_bytes'], r['gbps_each_way'], '  BEST' if r.get('best') else ''))
for g in ('0', '8M', '8M:6', '2M:6', '8M-t1', '8M-t2'):
    j = json.load(open(os.path.join(o, 'f-items-%s.json' % g)))
    for r in j['results']:
        print('ferry gather=%-5s item %7d %7.2f GB/s %5.1f%% of %.2f p50 %.0f p99 %.0f us cpu %.1f us ok %s' % (g,
              r['item_bytes'], r['gbps_h2d'], 100 * r['fraction'], j['ceiling_gbps'],
              r['latency_p50_us'], r['latency_p99_us'], r['cpu_us_per_item'], r['verified']))
PY
