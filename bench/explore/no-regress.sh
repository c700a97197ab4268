#!/usr/bin/env bash
# Issue 20's "no regression from 1 MiB up": `ferry bench pipeline` (scale, 1 compute stream,
# 1M, 4M and 16M chunks, 4 GiB a configuration, the median of 3 passes) for this tree
# (build-gpu) and a tree host-cost.sh built (/tmp/v-BASE, BASE=base; or both from PREBUILT as
# host-cost.sh takes it), interleaved over ROUNDS
# (3), each against the ceiling of its own run; then, on an H200 (or with GEN=1), issue 17's
# generated 16 GiB run (issue17-gen.sh, 3 rounds). Run after host-cost.sh on the same machine.
set -u
o=$OUT
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
mkdir -p "$o/nr" "$o/g"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/machine.txt"
gpu=$(head -1 "$o/machine.txt")
base=/tmp/v-${BASE:-base}/build/ferry head=build-gpu/ferry
[ -n "${PREBUILT:-}" ] && base=$PREBUILT/ferry-${BASE:-base} head=$PREBUILT/ferry-HEAD
[ -x "$base" ] && [ -x "$head" ] || { echo "run host-cost.sh first"; exit 1; }
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in base HEAD; do
    b=$base; [ $v = HEAD ] && b=$head
    f=$o/nr/$v-$r.json
    "$b" bench pipeline --backend cuda --chunks 1M,4M,16M --streams 1 --intensity 0 --json \
      >"$f" 2>>"$o/nr/err"
    python3 - "$f" "$v" "$r" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print('%-5s r%s ' % (sys.argv[2], sys.argv[3]) + ' '.join(
    '%s %.2f (%.1f%%)' % (x['chunk_bytes'] >> 20, x['gbps_h2d'], 100 * x['fraction'])
    for x in j['results']) + ' ceiling %.2f' % j['ceiling_gbps'])
PY
  done
done
if [[ $gpu == *H200* || ${GEN:-0} = 1 ]]; then
  OUT=$o/g ROUNDS=3 bash bench/explore/issue17-gen.sh 2>&1 | tail -4
fi
(cd "$o" && tar czf nr.tgz nr g machine.txt && rm -rf nr g)
