#!/usr/bin/env bash
# `ferry run` end to end on the simulator: the summary, --json fields, files in and out,
# the trace, and a failing verification path never reported as success.
. "$(dirname "$0")/lib.sh"

expect_rc "run 64M" 0 "$FERRY" run --bytes 64M
expect_in "summary says verified" "$TMP/out" "verify     OK"
expect_in "summary marks simulated time" "$TMP/out" "(simulated)"
expect_in "summary names the device" "$TMP/out" "NVIDIA H200 (simulated)"
expect_in "summary counts batches" "$TMP/out" "1 ok on GPU, 0 ok on CPU, 0 failed"
expect_in "summary: the simulator pins nothing, and says so" "$TMP/out" "of buffers from ferry_host_alloc (simulated: not pinned)"

# Every chunk timed: with 12 chunks, sampling one in 31 would estimate utilisation from one.
expect_rc "run --json" 0 "$FERRY" run --bytes 96M --batch-bytes 16M --op-timing all --json
json_check "json: ok and verified" "$TMP/out" "j['ok'] and j['verified'] and j['simulated']"
json_check "json: bytes" "$TMP/out" "j['bytes'] == 96*2**20 and j['verified_bytes'] == 96*2**20"
json_check "json: batches" "$TMP/out" "j['batches'] == 6 and j['batches_ok_gpu'] == 6 and j['batches_failed'] == 0"
json_check "json: plausible GB/s" "$TMP/out" "30 < j['gbps_h2d'] < j['link_gbps'] and 30 < j['gbps_d2h'] < j['link_gbps']"
json_check "json: overlap and streams" "$TMP/out" "j['overlap'] > 1.5 and len(j['streams']) == 4 and j['streams'][0]['kind'] == 'h2d'"
json_check "json: its buffers pinned by ferry_host_alloc, and how long it took" "$TMP/out" "j['host_pinned'] and j['pinned_bytes'] >= 96*2**20 and 0 <= j['pin_s'] < 60"
json_check "json: utilisation" "$TMP/out" "0.8 < j['util_h2d'] <= 1.0 and 0 < j['util_compute'] < 0.5"

for wl in copy scale "fma --intensity 3"; do
  # shellcheck disable=SC2086
  expect_rc "workload $wl, odd sizes" 0 "$FERRY" run --workload $wl --bytes 5000003 --batch-bytes 1000001 --chunk-bytes 65537 --json
  json_check "workload $wl verified" "$TMP/out" "j['verified'] and j['verified_bytes'] == 5000003"
done

# copies coalesced: odd sizes (short last group, short last chunk) still verify, the group shows
expect_rc "coalesced, odd sizes" 0 "$FERRY" run --bytes 5000003 --batch-bytes 1000001 --chunk-bytes 65537 --coalesce-bytes 256K --json
json_check "coalesced: verified, 4 chunks (64K after the float granularity) per copy" "$TMP/out" "j['verified'] and j['verified_bytes'] == 5000003 and j['chunk_bytes'] == 65536 and j['copy_group'] == 4"
expect_rc "coalesced summary" 0 "$FERRY" run --bytes 16M --chunk-bytes 1M --coalesce-bytes 4M
expect_in "summary names the copy group" "$TMP/out" "up to 4 per copy (coalesce_bytes)"
expect_rc "coalesce under two chunks" 0 "$FERRY" run --bytes 16M --chunk-bytes 4M --coalesce-bytes 6M --json
expect_in "coalesce under two chunks said" "$TMP/err" "holds fewer than two chunks"
json_check "coalesce under two chunks: a copy per chunk" "$TMP/out" "j['copy_group'] == 1 and j['verified']"
expect_rc "coalesce over 16 chunks" 0 "$FERRY" run --bytes 16M --chunk-bytes 64K --coalesce-bytes 4M --json
expect_in "coalesce over 16 chunks said" "$TMP/err" "copies merge 16 chunks at most"
json_check "coalesce over 16 chunks: 16" "$TMP/out" "j['copy_group'] == 16 and j['verified']"
expect_rc "bad --coalesce-bytes" 2 "$FERRY" run --bytes 16M --coalesce-bytes 4Q
expect_in "bad --coalesce-bytes named" "$TMP/err" "coalesce"
FERRY_COALESCE_BYTES=lots expect_rc "bad FERRY_COALESCE_BYTES" 2 "$FERRY" run --bytes 16M
expect_in "bad FERRY_COALESCE_BYTES named" "$TMP/err" "FERRY_COALESCE_BYTES"

# a file through the copy workload comes back identical; through scale it verifies
head -c 3000001 /dev/urandom >"$TMP/in.bin"
expect_rc "--input/--output copy" 0 "$FERRY" run --workload copy --input "$TMP/in.bin" --output "$TMP/out.bin" --batch-bytes 1M
if cmp -s "$TMP/in.bin" "$TMP/out.bin"; then ok "copy output equals input"; else bad "copy output differs"; fi
expect_rc "--input/--output scale" 0 "$FERRY" run --workload scale --input "$TMP/in.bin" --output "$TMP/out2.bin"
if [ "$(stat -c %s "$TMP/out2.bin")" = 3000001 ] && ! cmp -s "$TMP/in.bin" "$TMP/out2.bin"; then
  ok "scale output has the input's size and differs"; else bad "scale output wrong"; fi
: >"$TMP/empty.bin"
expect_rc "empty input file" 0 "$FERRY" run --input "$TMP/empty.bin" --output "$TMP/empty.out" --json
json_check "empty input: zero batches" "$TMP/out" "j['bytes'] == 0 and j['batches'] == 0 and j['ok']"

# the trace: valid JSON, every chunk's three stages present on stream and engine tracks (a copy
# per chunk here; the default's copy groups below)
expect_rc "--trace" 0 "$FERRY" run --bytes 32M --chunk-bytes 4M --coalesce-bytes 0 --trace "$TMP/trace.json"
expect_in "summary names the trace" "$TMP/out" "trace.json"
json_check "trace: three stages x 8 chunks x 2 tracks" "$TMP/trace.json" \
  "sum(1 for e in j['traceEvents'] if e['ph'] == 'X') == 8 * 3 * 2"
json_check "trace: stages ordered per chunk" "$TMP/trace.json" \
  "all(h['ts'] + h['dur'] <= c['ts'] + 1e-6 and c['ts'] + c['dur'] <= d['ts'] + 1e-6 for (h, c, d) in [tuple(sorted([e for e in j['traceEvents'] if e['ph'] == 'X' and e['pid'] == 1 and e['args']['chunk'] == k and e['args']['batch'] == 0], key=lambda e: e['ts'])) for k in range(8)])"
json_check "trace: named tracks" "$TMP/trace.json" \
  "any(e['ph'] == 'M' and e['args'].get('name') == 'stream 0 (H2D)' for e in j['traceEvents'])"
# by default (coalesce_bytes 8M) two chunks of 4 MiB share each copy: 4 groups, three ops each
expect_rc "--trace, copies coalesced by default" 0 "$FERRY" run --bytes 32M --chunk-bytes 4M --trace "$TMP/trace2.json" --json
json_check "default: copy group 2" "$TMP/out" "j['copy_group'] == 2 and j['ok']"
json_check "trace: three ops x 4 groups of 2 chunks x 2 tracks" "$TMP/trace2.json" \
  "(lambda x: len(x) == 4 * 3 * 2 and all(e['args']['chunks'] == 2 and e['args']['bytes'] == 8 << 20 for e in x))([e for e in j['traceEvents'] if e['ph'] == 'X'])"

expect_rc "--quiet prints nothing" 0 "$FERRY" run --bytes 1M --quiet
if [ ! -s "$TMP/out" ]; then ok "quiet output empty"; else bad "quiet printed"; fi

expect_rc "deterministic model time" 0 "$FERRY" run --bytes 64M --json
cp "$TMP/out" "$TMP/a.json"
expect_rc "same run again" 0 "$FERRY" run --bytes 64M --json
python3 - "$TMP/a.json" "$TMP/out" <<'PY' && ok "simulated time repeatable within 2%" || bad "simulated time not repeatable"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
sys.exit(0 if abs(a['time_s'] - b['time_s']) <= 0.02 * a['time_s'] else 1)
PY

# Batches of 1-3 bytes: each is part of a float that scale and fma transform on its own
# (workloads.h). Generated data verifies against a reference made batch by batch, and a file's
# bytes come out changed, not copied (they once passed through untransformed, "verify OK").
for wl in "scale --batch-bytes 2" "fma --intensity 3 --batch-bytes 3"; do
  # shellcheck disable=SC2086
  expect_rc "generated data, $wl" 0 "$FERRY" run --workload $wl --bytes 4K --json
  json_check "generated data, $wl: verified" "$TMP/out" "j['verified'] and j['verified_bytes'] == 4096"
done
head -c 4099 /dev/urandom >"$TMP/tiny.bin"
expect_rc "file, scale, 2-byte batches" 0 "$FERRY" run --workload scale --input "$TMP/tiny.bin" --output "$TMP/tiny.out" --batch-bytes 2
if cmp -s "$TMP/tiny.bin" "$TMP/tiny.out"; then bad "2-byte batches came out untransformed"; else ok "2-byte batches transformed"; fi

# --verify: full by default; sample checks 1 batch in 16 and the last; off checks nothing and
# never claims it did; anything else is refused by name.
expect_rc "--verify sample" 0 "$FERRY" run --bytes 40M --batch-bytes 1M --verify sample --json
json_check "sample: 0, 16, 32 and the last (39) checked, not claimed verified" "$TMP/out" \
  "j['ok'] and not j['verified'] and j['verify'] == 'sample' and j['verify_sample_every'] == 16 and j['batches_checked'] == 4 and j['verified_bytes'] == 4*2**20 and j['done_bytes'] == 40*2**20"
expect_rc "--verify sample summary" 0 "$FERRY" run --bytes 40M --batch-bytes 1M --verify sample
expect_in "sample summary says what it checked" "$TMP/out" "verify     OK, sampled (1 batch in 16 and the last): 4 batch(es), 4.00 MiB of 40.0 MiB, match"
expect_rc "--verify off" 0 "$FERRY" run --bytes 16M --batch-bytes 4M --verify off
expect_in "off summary says not verified" "$TMP/out" "verify     not verified (--verify off): 16.0 MiB done, nothing checked"
expect_not_in "off summary claims nothing" "$TMP/out" "verify     OK"
expect_rc "--verify off --json" 0 "$FERRY" run --bytes 16M --batch-bytes 4M --verify off --json
json_check "off: ok, not verified, nothing checked" "$TMP/out" \
  "j['ok'] and not j['verified'] and j['verify'] == 'off' and j['batches_checked'] == 0 and j['verified_bytes'] == 0 and j['done_bytes'] == 16*2**20"
expect_rc "--verify full --json" 0 "$FERRY" run --bytes 16M --batch-bytes 4M --verify full --json
json_check "full: every batch checked" "$TMP/out" "j['verified'] and j['verify'] == 'full' and j['batches_checked'] == 4 and j['verified_bytes'] == 16*2**20"
for v in bogus FULL ""; do
  expect_rc "--verify '$v' refused" 2 "$FERRY" run --bytes 16M --verify "$v"
  expect_in "--verify '$v' named with the accepted list" "$TMP/err" "--verify '$v': accepted: full, sample, off"
done
expect_rc "--help says --verify" 0 "$FERRY" run --help
expect_in "--help names the sample rate" "$TMP/out" "one batch in 16"

# The rates and the bound: transport on the device's clock, end to end on the wall's; on the
# simulator the wall is this CPU running the simulated device.
expect_rc "rates --json" 0 "$FERRY" run --bytes 64M --json
json_check "json: rates and bound" "$TMP/out" \
  "abs(j['transport_gbps'] - j['bytes'] / j['time_s'] / 1e9) < 0.01 and abs(j['end_to_end_gbps'] - j['bytes'] / j['wall_s'] / 1e9) < 0.05 * j['end_to_end_gbps'] and j['bound'] in ('simulator', 'verification') and j['bound_why'] and j['verifiers'] >= 1 and 0 < j['verify_busy'] <= 1 and j['verify_wait'] >= 0 and j['read_share'] == 0"
expect_rc "rates summary" 0 "$FERRY" run --bytes 64M
expect_in "summary gives the rates" "$TMP/out" "rates      transport "
expect_in "summary names the bound" "$TMP/out" "bound      "
head -c 8M /dev/urandom >"$TMP/in8.bin"
expect_rc "rates, a file" 0 "$FERRY" run --input "$TMP/in8.bin" --batch-bytes 1M --json
json_check "a file: reading is measured" "$TMP/out" "j['read_share'] > 0 and j['bound'] in ('storage', 'verification', 'simulator')"

# latency: every batch's, submit to completion, p50 and p99 beside the rates
expect_rc "latency" 0 "$FERRY" run --bytes 8M --batch-bytes 256K --json
json_check "latency: p50 and p99 of the batches" "$TMP/out" \
  "0 < j['latency_p50_us'] <= j['latency_p99_us'] and j['batches'] == 32"
expect_rc "latency, text" 0 "$FERRY" run --bytes 8M --batch-bytes 256K
expect_in "latency, text: the line" "$TMP/out" "latency    p50"

finish
