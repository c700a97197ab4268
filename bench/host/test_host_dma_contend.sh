#!/usr/bin/env bash
# host_dma_contend's CPU side on any machine (--dma none: no GPU touched), tiny buffers and short
# windows: a JSON line per (mode, threads) with the fields the issue-17 script reads, CPU bytes
# counted for every thread count above 0 (a copy's twice), the table and the largest total on
# stderr; bad arguments refused with exit 2 and a message naming the argument.
# Usage: test_host_dma_contend.sh PATH/TO/host_dma_contend
set -u
tool=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tool" --help >"$tmp/help" || fail "--help exited $?"
grep -q -- "--threads LIST" "$tmp/help" || fail "--help does not list --threads"

"$tool" --dma none --threads 0,1,2 --modes read,write,copy --cpu-bytes 1M --seconds 0.05 \
  --warmup 0.02 --reps 3 >"$tmp/out.jsonl" 2>"$tmp/err" || fail "run exited $?: $(cat "$tmp/err")"
python3 - "$tmp/out.jsonl" <<'PY' || fail "output: $(cat "$tmp/out.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = [(m, t) for m in ('read', 'write', 'copy') for t in (0, 1, 2)]
assert [(r['mode'], r['threads']) for r in rows] == want, rows
for r in rows:
    assert r['bench'] == 'host_dma_contend' and r['dma'] == 'none' and r['reps'] == 3, r
    assert r['h2d_gbps'] == 0 and r['d2h_gbps'] == 0, r
    assert (r['cpu_gbps'] > 0) == (r['threads'] > 0), r
    twice = 2 if r['mode'] == 'copy' else 1
    assert abs(r['cpu_traffic_gbps'] - twice * r['cpu_gbps']) <= 0.016, r
    assert r['total_min'] <= r['total_gbps'] <= r['total_max'], r
    assert r['cpu_bytes'] == 1 << 20, r
PY
grep -q "^largest total: " "$tmp/err" || fail "no largest total on stderr: $(cat "$tmp/err")"
[ "$(grep -c -E '^(read|write|copy) +[0-9]+ ' "$tmp/err")" = 9 ] || fail "table: $(cat "$tmp/err")"

bad() {
  local opt=$1
  shift
  "$tool" --dma none "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc = 2 ] || fail "$* exited $rc, not 2"
  grep -q -- "$opt" "$tmp/err" || fail "$* did not name $opt: $(cat "$tmp/err")"
  grep -q "accepted" "$tmp/err" || fail "$* did not say what is accepted: $(cat "$tmp/err")"
  [ ! -s "$tmp/out" ] || fail "$* wrote to stdout"
}
bad --threads --threads 1,,2
bad --threads --threads 2x
bad --threads --threads 1025
bad --modes --modes read,read
bad --modes --modes scan
bad --seconds --seconds 0
bad --warmup --warmup -1
bad --reps --reps 100
bad --cpu-bytes --cpu-bytes 1Q
bad --cpu-bytes --cpu-bytes 4K
bad --dma --dma sideways
bad --copy-bytes --dma-bytes 8M --copy-bytes 16M
bad --cpu-bytes --threads 1024 --cpu-bytes 64G
"$tool" --bogus >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q -- "--bogus" "$tmp/err" || fail "an unknown argument was not refused"
"$tool" --seconds >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q -- "--seconds needs a value" "$tmp/err" || fail "a missing value"
echo "ok"
