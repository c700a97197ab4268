#!/usr/bin/env bash
# Issue 20: the gather flusher's clock fix (its condition on CLOCK_MONOTONIC) against the tree
# before it, in one device call: this tree into build-gpu, a copy with the old line into
# $TMP/old/build-gpu; `ferry bench items` (8 threads, 64K and 256K, 8 MiB slabs, gather_slabs
# default and 6) alternating new and old over ROUNDS (default 2). $OUT/flusher.jsonl.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
build_gpu
old=${TMPDIR:-/tmp}/ferry-old
rm -rf "$old" && mkdir -p "$old"
tar cf - --exclude=./build-gpu --exclude=./.carry . | (cd "$old" && tar xf -)
ln -s "$PWD/.carry" "$old/.carry"
sed -i 's|ferry__cond_init_monotonic(&g->flush_cv);|pthread_cond_init(\&g->flush_cv, NULL);|' "$old/src/pipeline/gather.c"
grep -c "pthread_cond_init(&g->flush_cv, NULL)" "$old/src/pipeline/gather.c"
# shellcheck disable=SC2086
(cd "$old" && cmake -S . -B build-gpu $cfg >/dev/null && cmake --build build-gpu -j 14 --target ferry >/dev/null) ||
  { echo "the old tree did not build"; exit 1; }
for r in $(seq 1 "${ROUNDS:-2}"); do
  for s in 0 6; do
    for t in new old; do
      bin=build-gpu/ferry
      [ $t = old ] && bin=$old/build-gpu/ferry
      FERRY_GATHER_SLABS=$s FERRY_GATHER_BYTES=8M $bin bench items --backend cuda --threads 8 \
        --item-sizes 64K,256K --json 2>>"$OUT/flusher.err" |
        python3 -c "import json,sys; j=json.load(sys.stdin); j['tree']='$t'; j['slabs_opt']=$s; j['round']=$r; print(json.dumps(j))" \
          >>"$OUT/flusher.jsonl"
    done
  done
done
python3 - "$OUT/flusher.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    for r in j['results']:
        print('round %d %s slabs %2d item %6d %6.2f GB/s %5.1f%% of %.2f p50 %6.0f p99 %6.0f us cpu %5.1f us/item' % (
            j['round'], j['tree'], j['slabs_opt'], r['item_bytes'], r['gbps_h2d'], 100 * r['fraction'],
            j['ceiling_gbps'], r['latency_p50_us'], r['latency_p99_us'], r['cpu_us_per_item']))
PY
