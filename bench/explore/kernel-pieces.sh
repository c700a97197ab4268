#!/usr/bin/env bash
# Issue 20's copy kernel for small pinned items, in one device call (run it with OUT set; carry
# .carry): the GPU tests (.carry/tests/gpu_test_*, copied from a build-cuda tree; gpu_test_gather
# runs the kernel), `ferry probe --calibrate` (engines against the kernel at 4, 16
# and 64 KiB pieces, the crossover), then `bench items` at 4K,16K closed loop, items side by side
# and --scattered, $A (default main: a host copy into the slab for pinned items under 64 KiB)
# against $B (default HEAD: the copy kernel), ROUNDS rounds (default 2); then $B against $C
# (default eager2) on a schedule (64 KiB at 75%, 256 KiB at 90%); then no-regress.sh ($A against
# $B from 1 MiB up). Binaries from $PREBUILT (default .carry/bin, bench/explore/prebuild.sh).
# JSON in $OUT/kp.tgz; the lines to read on stdout.
set -u
o=$OUT
limit=${LIMIT:-540}
pre=${PREBUILT:-.carry/bin}
a=${A:-main} b=${B:-HEAD} c=${C:-eager2}
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/machine.txt"
sed 's/^/carried HEAD: /' .carry/commit 2>/dev/null
mkdir -p "$o/kp"
for f in .carry/tests/gpu_test_gather .carry/tests/gpu_test_*; do # gather first: the kernel's
  t=${f##*/}
  [ -e "$o/kp/$t.txt" ] && continue
  [ $((limit - SECONDS)) -gt 200 ] || { echo "$t: not run (time)"; continue; }
  s0=$SECONDS
  CMOCKA_MESSAGE_OUTPUT=stdout FERRY_BACKEND=sim timeout 150 "$f" >"$o/kp/$t.txt" 2>&1
  echo "$t: rc $? in $((SECONDS - s0)) s $(grep -E '^\[  (PASSED|FAILED) ' "$o/kp/$t.txt" | tr '\n' ' ')"
  grep -E "small pinned|FAILED|differs|ERROR" "$o/kp/$t.txt" | head -6
done
timeout 120 "$pre/ferry-$b" probe --calibrate -o "$o/kp/cal.json" --backend cuda --json \
  >"$o/kp/cal-out.json" 2>"$o/kp/cal-err.txt"
python3 - "$o/kp/cal-out.json" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print('calibrate: no result (%s)' % e); sys.exit()
for p in j['pieces']:
    print('pieces of %6d: engines %6.2f GB/s, kernel %6.2f GB/s' % (p['bytes'], p['engines_gbps'], p['kernel_gbps']))
print('piece_kernel_max %d' % j['piece_kernel_max'])
PY
show() {
  python3 - "$@" <<'PY'
import json, sys
f, v, m, r = sys.argv[1:5]
try:
    j = json.load(open(f))
except Exception as e:
    print('%-7s %-14s r%s: no result (%s)' % (v, m, r, e)); sys.exit()
for x in j['results']:
    by = x.get('cpu_us_per_item_by_thread', {})
    print('%-7s %-14s r%s %6d %5.1f%% of %.2f p50 %5.0f p99 %5.0f bound %s ferry %.2f us [%s] %.0f a slab %.1f pieces a slab ok %s' % (
        v, m, r, x['item_bytes'], 100 * x['fraction'], j['ceiling_gbps'],
        x['latency_p50_us'], x['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-',
        x.get('cpu_us_per_item_ferry', -1),
        ' '.join('%s %.2f' % (k.replace('ferry-', ''), v) for k, v in by.items() if v >= 0.03),
        x['items'] / max(x.get('slabs', 1), 1), x['gather_pieces'] / max(x.get('slabs', 1), 1),
        x['verified']))
PY
}
items() { # items TAG BINARY NAME ARGS...
  local tag=$1 bin=$2 name=$3
  shift 3
  [ $((limit - SECONDS)) -gt 100 ] || return 1
  FERRY_GATHER_BYTES=8M timeout 60 "$pre/ferry-$bin" bench items --backend cuda --threads 8 \
    "$@" --json >"$o/kp/$name.json" 2>>"$o/kp/err"
  show "$o/kp/$name.json" "$bin" "$tag" "${name##*-}"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "$a" "$b"; do
    items together "$v" "$v-together-$r" --item-sizes 4K,16K --bytes 512M || break 2
    items scattered "$v" "$v-scattered-$r" --item-sizes 4K,16K --bytes 512M --scattered || break 2
  done
done
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "$b" "$c"; do
    items 64K@75% "$v" "$v-r64-$r" --item-sizes 64K --rate 75% || break 2
    items 256K@90% "$v" "$v-r256-$r" --item-sizes 256K --rate 90% || break 2
  done
done
echo "== $((limit - SECONDS)) s left"
if [ $((limit - SECONDS)) -gt 90 ]; then
  timeout $((limit - SECONDS - 10)) env OUT="$o/kp" PREBUILT="$pre" BASE="$a" ROUNDS=2 FERRY="$pre/ferry-$b" \
    bash bench/explore/no-regress.sh 2>&1 | grep -v "^NVIDIA" | sed "s/^base /$a /"
fi
(cd "$o" && tar czf kp.tgz kp && rm -rf kp)
