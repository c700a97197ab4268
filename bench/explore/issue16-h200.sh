#!/usr/bin/env bash
# Issue 16 on the H200 in one device call: the tree before the restructuring (.baseline/, a
# `git archive` of that commit) and this one, built side by side; this tree's tests (GPU ones
# too); then ferry run and ferry bench pipeline from both, interleaved round by round (A B, B A,
# ...), so that the comparison shares the lease, the clocks and the temperature. Also this tree's
# ferry run with two copy streams, sampled and every chunk timed (issue 15, point 16).
# Writes under $OUT; prints a table last.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
rounds=${ROUNDS:-3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
# shellcheck disable=SC2086
{ cmake -S .baseline -B build-base $cfg && cmake --build build-base -j 8 --target ferry; } \
  >$OUT/build-base.log 2>&1 &
# shellcheck disable=SC2086
{ cmake -S . -B build-gpu $cfg && cmake --build build-gpu -j 8; } >$OUT/build.log 2>&1
rc_new=$?
wait $!
rc_base=$?
[ $rc_new = 0 ] || { tail -30 $OUT/build.log; exit 1; }
[ $rc_base = 0 ] || { tail -30 $OUT/build-base.log; exit 1; }
FERRY_TEST_BROWSER=none timeout 240 ctest --test-dir build-gpu -j 6 --output-on-failure \
  >$OUT/ctest.log 2>&1
echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.log | tail -8
res=$OUT/compare.jsonl
: >$res
one() { # tree label, round, what
  local f=build-$1/ferry
  [ "$1" = new ] && f=build-gpu/ferry
  if [ "$3" = run ]; then
    $f run --backend cuda --bytes 4G --json 2>>$OUT/run.err
  else
    $f bench pipeline --backend cuda --chunks 1M,4M,16M --streams 2 --intensity 0 --json \
      2>>$OUT/run.err
  fi | python3 -c "import json,sys; j=json.load(sys.stdin); j['tree']='$1'; j['round']=$2; j['what']='$3'; print(json.dumps(j))" >>$res
}
for r in $(seq 1 "$rounds"); do
  for w in run bench; do
    if [ $((r % 2)) = 1 ]; then one base $r $w; one new $r $w; else one new $r $w; one base $r $w; fi
  done
done
for a in "--copy-streams 2" "--copy-streams 2 --op-timing all"; do
  # shellcheck disable=SC2086
  build-gpu/ferry run --backend cuda --bytes 4G $a --json 2>>$OUT/copy2.err \
    | python3 -c "import json,sys; j=json.load(sys.stdin); j['args']='$a'; print(json.dumps(j))" \
      >>$OUT/copy-streams.jsonl
done
echo "alert lines with two copy streams: $(grep -c alert $OUT/copy2.err)"
python3 - $res $OUT/copy-streams.jsonl <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(tree, what, key, sel=None):
    v = []
    for j in rows:
        if j['tree'] != tree or j['what'] != what:
            continue
        if sel is None:
            v.append(j[key])
        else:
            v += [x[key] for x in j['results'] if x['chunk_bytes'] == sel]
    return st.median(v) if v else float('nan')
print("%-28s %10s %10s %7s" % ("figure (median of rounds)", "before", "after", "ratio"))
for key in ("gbps_h2d", "gbps_d2h"):
    b, a = med('base', 'run', key), med('new', 'run', key)
    print("%-28s %10.2f %10.2f %7.4f" % ("ferry run " + key, b, a, a / b))
for c in (1 << 20, 4 << 20, 16 << 20):
    b, a = med('base', 'bench', 'gbps_h2d', c), med('new', 'bench', 'gbps_h2d', c)
    print("%-28s %10.2f %10.2f %7.4f" % ("bench pipeline %dM h2d" % (c >> 20), b, a, a / b))
for l in open(sys.argv[2]):
    j = json.loads(l)
    print(j['args'], {k: j.get(k) for k in ('ok', 'gbps_h2d', 'gbps_d2h', 'util_h2d', 'util_d2h',
                                             'overlap', 'bw_alerts', 'verified')})
PY
