#!/usr/bin/env bash
# Issue 20's host cost per item, before and after a change, in one lease: this tree (build-gpu)
# and the trees carried as .carry/v-NAME.tgz (git archive of a commit: build-v-NAME), built side
# by side, then `ferry bench items` interleaved over ROUNDS (2): 8 threads, 8 MiB slabs, 64K and
# 256K items closed loop, and 64K offered at 75% of the ceiling. One line per run with the CPU
# per item by thread; JSON in $OUT/hc.tgz (BYTES: --bytes, 1G by default; PREBUILT: a folder of
# binaries ferry-HEAD and ferry-NAME built elsewhere, instead of building). Then no-regress.sh on
# the same machine.
set -u
o=$OUT
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
mkdir -p "$o/hc"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/machine.txt"
vs=(HEAD)
pids=()
if [ -n "${PREBUILT:-}" ]; then
  # binaries built elsewhere (the same toolkit, sm_90, FERRY_WITH_MPI=OFF) and carried:
  # $PREBUILT/ferry-HEAD and $PREBUILT/ferry-NAME, no build here (a short lease)
  for b in "$PREBUILT"/ferry-*; do
    v=${b##*/ferry-}; [ "$v" = HEAD ] || vs+=("$v")
  done
  bin() { echo "$PREBUILT/ferry-$1"; }
else
  for t in .carry/v-*.tgz; do
    [ -e "$t" ] || continue
    v=${t#.carry/v-}; v=${v%.tgz}; vs+=("$v")
    (mkdir -p "/tmp/v-$v" && tar xzf "$t" -C "/tmp/v-$v" &&
      cd "/tmp/v-$v" && cmake -S . -B build $cfg >"$o/build-$v.log" 2>&1 &&
      cmake --build build -j 8 --target ferry >>"$o/build-$v.log" 2>&1) &
    pids+=($!)
  done
  # shellcheck disable=SC2086
  { cmake -S . -B build-gpu $cfg && cmake --build build-gpu -j 8 --target ferry; } >"$o/build.log" 2>&1 ||
    { tail -20 "$o/build.log"; exit 1; }
  for p in "${pids[@]}"; do wait "$p" || echo "a carried tree did not build (build-*.log)"; done
  bin() { [ "$1" = HEAD ] && echo build-gpu/ferry || echo "/tmp/v-$1/build/ferry"; }
fi
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "${vs[@]}"; do
    for m in closed rate; do
      f=$o/hc/$v-$m-$r.json
      args=(--item-sizes "64K,256K")
      [ $m = rate ] && args=(--item-sizes 64K --rate 75%)
      [ -n "${BYTES:-}" ] && args+=(--bytes "$BYTES")
      FERRY_GATHER_BYTES=8M "$(bin "$v")" bench items --backend cuda --threads 8 "${args[@]}" \
        --json >"$f" 2>>"$o/hc/err"
      python3 - "$f" "$v" "$m" "$r" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for x in j['results']:
    by = x.get('cpu_us_per_item_by_thread', {})
    sl = max(x.get('slabs', 0), 1)
    print('%-8s %-6s r%s %6d %5.1f%% of %.2f p99 %6.0f us (bound %s) cpu %5.2f us, ferry %s [%s] pc/slab %s waits/item %s ok %s' % (
        sys.argv[2], sys.argv[3], sys.argv[4], x['item_bytes'], 100 * x['fraction'],
        j['ceiling_gbps'], x['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-', x['cpu_us_per_item'],
        '%.2f' % x['cpu_us_per_item_ferry'] if 'cpu_us_per_item_ferry' in x else '-',
        ' '.join('%s %.2f' % (k.replace('ferry-', ''), v) for k, v in by.items() if v >= 0.05),
        '%.1f' % (x['gather_pieces'] / sl) if 'gather_pieces' in x else '-',
        '%.3f' % (x['gather_waits'] / x['items']) if 'gather_waits' in x else '-',
        x['verified']))
PY
    done
  done
done
(cd "$o" && tar czf hc.tgz hc machine.txt && rm -rf hc)
