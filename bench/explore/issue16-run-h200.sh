#!/usr/bin/env bash
# ferry run before and after a restructuring on the H200, interleaved, with a long enough job
# (--bytes 16G by default) that the host side's noise does not decide: .baseline/ (the tree
# before) and this tree, built side by side (incremental where issue16-h200.sh built them).
# Writes $OUT/run-compare.jsonl and prints the medians and means.
set -u
export PATH=/usr/local/cuda/bin:$PATH
root=$PWD/.carry/root
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu
export CPATH=$root/usr/include
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON -DCMAKE_PREFIX_PATH=$root/usr"
# shellcheck disable=SC2086
{ cmake -S .baseline -B build-base $cfg && cmake --build build-base -j 8 --target ferry; } >$OUT/b1.log 2>&1 &
# shellcheck disable=SC2086
{ cmake -S . -B build-gpu $cfg && cmake --build build-gpu -j 8 --target ferry; } >$OUT/b2.log 2>&1 || exit 1
wait $! || exit 1
bytes=${BYTES:-16G}
for r in $(seq 1 "${ROUNDS:-6}"); do
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for t in $order; do
    f=build-gpu/ferry; [ $t = base ] && f=build-base/ferry
    $f run --backend cuda --bytes "$bytes" --json 2>>$OUT/run.err | python3 -c "import json,sys; j=json.load(sys.stdin); j['tree']='$t'; j['round']=$r; print(json.dumps(j))" >>$OUT/run-compare.jsonl
  done
done
python3 - $OUT/run-compare.jsonl <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
for t in ("base", "new"):
    v = [j["gbps_h2d"] for j in rows if j["tree"] == t]
    print(t, "GB/s each way:", v, "median %.2f mean %.2f" % (st.median(v), st.mean(v)))
b = st.median([j["gbps_h2d"] for j in rows if j["tree"] == "base"])
a = st.median([j["gbps_h2d"] for j in rows if j["tree"] == "new"])
print("after/before (medians): %.4f" % (a / b))
PY
