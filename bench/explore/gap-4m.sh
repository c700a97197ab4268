#!/usr/bin/env bash
# Exploration on the GPU machine: where ferry's round trip at 4 MiB chunks (a copy per chunk)
# loses ~2% to the hand-written ring. The host buffers' offset from a page boundary (ferry's
# sweep used malloc'd buffers, 16 bytes into a page; the ring mmap'd ones), and the device
# buffers', in interleaved rounds beside the ring.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench/results}
root=$PWD/.carry/root
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
export CPATH="$root/usr/include${CPATH:+:$CPATH}"
export PATH="/usr/local/cuda/bin:$PATH"
build=${BUILD:-build-gpu}
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$root/usr" >"$out/build.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" --target ferry cuda_roundtrip >>"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
ferry=$build/ferry
res=$out/explore.jsonl
: >"$res"
bp() { # mode, env...
  local mode=$1; shift
  env "$@" "$ferry" bench pipeline --backend cuda --chunks 4M --streams 2 --intensity 0 --json \
    ${HOFF:+--host-offset $HOFF} 2>>"$out/err.log" |
    python3 -c "import json,sys; j=json.load(sys.stdin); r=j['results'][0]; print(json.dumps({'mode':'$mode','round':$round,'gbps':min(r['gbps_h2d'],r['gbps_d2h']),'ceiling':j.get('ceiling_gbps'),'ok':r.get('verified')}))" >>"$res" 2>>"$out/err.log"
}
for round in 1 2 3; do
  bp off0
  HOFF=16 bp off16
  bp bare0 FERRY_OP_TIMING=off FERRY_HEARTBEAT_MS=0 FERRY_WATCHDOG_MS=1000 FERRY_LINK_SAMPLE_MS=0
  for o in "0 0" "16 0" "16 16" "0 16" "256 256" "2048 0"; do
    set -- $o
    "$build"/bench/cuda_roundtrip roundtrip --chunks 4M --compute-streams 2 --slots 4 \
      --host-offset "$1" --device-offset "$2" 2>>"$out/err.log" |
      python3 -c "
import json,sys
for l in sys.stdin:
    j=json.loads(l); print(json.dumps({'mode':'ring_h%d_d%d'%(j['host_offset'],j['device_offset']),'round':$round,'gbps':j['gbps_each_way'],'ok':j['verified']}))" >>"$res"
  done
done
python3 - "$res" <<'PY' | tee "$out/table.txt"
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
modes = []
for r in rows:
    if r["mode"] not in modes:
        modes.append(r["mode"])
base = st.median([r["gbps"] for r in rows if r["mode"] == "ring_h0_d0"] or [1])
for m in modes:
    v = [r["gbps"] for r in rows if r["mode"] == m]
    print(f"{m:10s} median {st.median(v):6.2f}  runs {', '.join('%.2f' % x for x in v)}  / ring_h0_d0 {st.median(v) / base:.4f}")
PY
