#!/usr/bin/env bash
# The open H200 targets of issues 17, 18 and 20 in one device call with a prebuilt ferry (run it
# with OUT set; carry .carry; FERRY, default .carry/bin/ferry-HEAD; LIMIT seconds in all,
# default 560): issue 17's ceiling and 16 GiB verified runs (issue17-gen.sh, 3 rounds; on an
# H200, or with GEN=1); issue 20's items at 64 KiB and 256 KiB from 8 threads, closed loop and on
# the issue's schedule (64 KiB at 75%, 256 KiB at 90% of the ceiling, p99 against the bound), at
# DEPTHS (default "0 4": the default depth and FERRY_DEPTH=4), ROUNDS rounds (2); the PyTorch
# items peer's sweep (bench/peers/torch_items.py); then, with the time left, issue 18's compute-heavy set (issue18-compute.sh, fma 64, --verify
# sample). Each part's files under $OUT/<part>, all in $OUT/t.tgz; the lines to read on stdout.
set -u
o=$OUT
limit=${LIMIT:-560}
export FERRY=${FERRY:-.carry/bin/ferry-HEAD}
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
left() { echo $((limit - SECONDS)); }
mkdir -p "$o/gen" "$o/items" "$o/peer" "$o/i18"
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(tr '\n' ' ' <.carry/commit)"
if nvidia-smi -L | grep -q H200 || [ "${GEN:-0}" = 1 ]; then
  OUT=$o/gen ROUNDS=3 timeout $(($(left) - 60)) bash bench/explore/issue17-gen.sh 2>&1 | tail -5
else
  # shellcheck disable=SC2119
  build_gpu # the prebuilt ferry as build-gpu/ferry (issue17-gen.sh does it otherwise)
fi
show() {
  python3 - "$@" <<'PY'
import json, sys
f, tag = sys.argv[1:3]
try:
    j = json.load(open(f))
except Exception as e:
    print('%-14s no result (%s)' % (tag, e)); sys.exit()
for x in j['results']:
    print('%-14s %6d %6.2f GB/s %5.1f%% of %.2f p50 %5.0f p99 %5.0f bound %s ferry %.2f us %.0f a slab ok %s' % (
        tag, x['item_bytes'], x['gbps_h2d'], 100 * x['fraction'], j['ceiling_gbps'],
        x['latency_p50_us'], x['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-',
        x.get('cpu_us_per_item_ferry', -1), x['items'] / max(x.get('slabs', 1), 1), x['verified']))
PY
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for d in ${DEPTHS:-0 4}; do
    for c in closed 64K@75% 256K@90%; do
      [ "$(left)" -gt 70 ] || break 3
      case $c in
        closed) args=(--item-sizes "64K,256K") ;;
        *) args=(--item-sizes "${c%@*}" --rate "${c#*@}") ;;
      esac
      f=$o/items/d$d-${c//[@%]/_}-$r.json
      # shellcheck disable=SC2046
      env FERRY_GATHER_BYTES=8M $([ "$d" = 0 ] || echo "FERRY_DEPTH=$d") timeout 60 build-gpu/ferry \
        bench items --backend cuda --threads 8 "${args[@]}" --json >"$f" 2>>"$o/items/err"
      show "$f" "depth${d/#0/-} $c r$r"
    done
  done
done
if [ "$(left)" -gt 200 ]; then
  timeout 120 python3 bench/peers/torch_items.py --bytes $((512 << 20)) --item-sizes 65536,262144 \
    >"$o/peer/peer.jsonl" 2>"$o/peer/peer.err" || tail -3 "$o/peer/peer.err"
  python3 - "$o/peer/peer.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('best'):
        print('torch best %-6s streams %d group %d item %7d %6.2f GB/s' % (
            r['mode'], r['streams'], r['group'], r['item_bytes'], r['gbps_each_way']))
PY
fi
if [ "$(left)" -gt 150 ]; then
  echo "== issue 18, $(left) s left"
  OUT=$o/i18 SKIP_BUILD=1 VERIFY=sample INTENSITIES=64 ROUNDS=2 timeout $(($(left) - 15)) \
    bash bench/explore/issue18-compute.sh 2>&1 | tail -8
fi
echo "== $(left) s left"
(cd "$o" && tar czf t.tgz gen items peer i18 && rm -rf gen items peer i18)
