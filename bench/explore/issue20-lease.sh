#!/usr/bin/env bash
# Issue 20 (and 17) in one device call (run it with OUT set; carry .carry): the host cost of this
# tree against the trees carried as .carry/v-NAME.tgz (host-cost.sh) and `bench pipeline` from
# 1 MiB up against the first of them (no-regress.sh, BASE=NAME); on an H200, first, the targets the
# issues name for it (open-targets.sh: the 16 GiB generated run and the gathered items, closed
# loop and on a schedule; then the PyTorch peer, issue20-peer.sh); then 256 KiB
# items offered at 90% of the ceiling with their latency bound, and 64 KiB items from 1-16
# threads (the CPU an item by thread). Archives in $OUT (ot.tgz, peer.tgz, hc.tgz, nr.tgz),
# threads-N.json; the lines to read on stdout. PREBUILT=.carry/bin (bench/explore/prebuild.sh):
# no build for the host cost and after (the targets still build this tree).
set -u
o=$OUT
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== $gpu"
base=
for t in .carry/v-*.tgz; do
  [ -e "$t" ] || continue
  base=${t#.carry/v-}; base=${base%.tgz}; break
done
base=${NR_BASE:-$base} # the carried tree no-regress.sh runs against (the first by default)
hc() {
  mkdir -p "$o/hc"
  timeout 240 env OUT="$o/hc" ROUNDS="${ROUNDS:-2}" bash bench/explore/host-cost.sh
  if [ -n "$base" ]; then
    timeout 120 env OUT="$o/hc" BASE="$base" ROUNDS="${NR_ROUNDS:-3}" bash bench/explore/no-regress.sh |
      sed "s/^base /$base /"
  fi
  (cd "$o/hc" && mv hc.tgz ../hc.tgz; mv nr.tgz ../nr.tgz; cd .. && rm -rf hc) 2>/dev/null
}
targets() {
  mkdir -p "$o/ot" "$o/peer"
  timeout 240 env OUT="$o/ot" TMPFS=0 bash bench/explore/open-targets.sh | grep -v "cpu by thread"
  (cd "$o/ot" && tar czf ../ot.tgz . && cd .. && rm -rf ot)
  timeout 150 env OUT="$o/peer" bash bench/explore/issue20-peer.sh | grep -v "torch each"
  (cd "$o/peer" && tar czf ../peer.tgz . && cd .. && rm -rf peer)
}
# An H200 measures its targets first (the issues name them for it), then the host cost
if [[ $gpu == *H200* || ${TARGETS:-0} = 1 ]]; then
  targets
fi
hc
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
f=build-gpu/ferry
[ -n "${PREBUILT:-}" ] && f=$PREBUILT/ferry-HEAD # host-cost.sh's and no-regress.sh's too
FERRY_GATHER_BYTES=8M timeout 60 "$f" bench items --backend cuda --threads 8 \
  --item-sizes 256K --rate 90% | tail -4
# how the submitters' share grows with their number (contention on the open slab, waits)
for t in 1 2 4 8 16; do
  FERRY_GATHER_BYTES=8M timeout 60 "$f" bench items --backend cuda --threads $t \
    --item-sizes 64K --json >"$o/threads-$t.json" 2>>"$o/threads.err"
  python3 - "$o/threads-$t.json" "$t" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for x in j['results']:
    by = x.get('cpu_us_per_item_by_thread', {})
    print('threads %2s %6d %5.1f%% cpu %5.2f us [%s] waits/item %.3f' % (
        sys.argv[2], x['item_bytes'], 100 * x['fraction'], x['cpu_us_per_item'],
        ' '.join('%s %.2f' % (k.replace('ferry-', ''), v) for k, v in by.items() if v >= 0.03),
        x['gather_waits'] / x['items']))
PY
done
