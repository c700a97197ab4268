#!/usr/bin/env bash
# `ferry bench items`: several threads submit small items, each its own batch, into one
# pipeline: per item size the rate each way, the fraction of the ceiling measured in the same
# run, p50 and p99 latency and CPU time per item, every pass verified; in text and JSON, in one
# process and under isolation=process; bad flag values refused by name.
. "$(dirname "$0")/lib.sh"

expect_rc "items --json" 0 "$FERRY" bench items --bytes 2M --item-sizes 4K,64K --threads 3 --json
json_check "items: the members" "$TMP/out" \
  "j['command'] == 'bench items' and j['threads'] == 3 and j['ceiling_gbps'] > 0 and j['ok'] and len(j['results']) == 2"
json_check "items: counts, verified, latency, cpu" "$TMP/out" \
  "[r['items'] for r in j['results']] == [512, 32] and all(r['verified'] and 0 < r['latency_p50_us'] <= r['latency_p99_us'] <= r['latency_max_us'] and 0 <= r['latency_max_at'] <= 1 and r['cpu_us_per_item'] > 0 and 0 < r['fraction'] <= 1.05 and r['gbps_h2d'] > 0 for r in j['results'])"
# where the CPU went, by thread: the submitters (ended by the end of a pass) and ferry's own
# threads, summing to the process's CPU time per item (schedstat against getrusage's ticks)
json_check "items: the CPU by thread sums to the CPU per item" "$TMP/out" \
  "all('(ended)' in r['cpu_us_per_item_by_thread'] and any(k.startswith('ferry-') for k in r['cpu_us_per_item_by_thread']) and abs(sum(r['cpu_us_per_item_by_thread'].values()) - r['cpu_us_per_item']) <= 0.25 * r['cpu_us_per_item'] + 20000.0 / r['items'] for r in j['results'])"
json_check "items closed loop: no harness CPU, all of it ferry's" "$TMP/out" \
  "all(r['cpu_us_per_item_harness'] == 0 and r['cpu_us_per_item_ferry'] == r['cpu_us_per_item'] for r in j['results'])"
json_check "items not gathered: no latency bound" "$TMP/out" \
  "j['gather_bytes'] == 0 and j['slab_round_trip_us'] is None and j['slab_round_trip_min_us'] is None and j['slab_round_trip_max_us'] is None and j['latency_bound_us'] is None"
json_check "items: larger items move more bytes a second" "$TMP/out" \
  "j['results'][1]['gbps_h2d'] > j['results'][0]['gbps_h2d']"
expect_rc "items, text" 0 "$FERRY" bench items --bytes 1M --item-sizes 64K
expect_in "text: the ceiling" "$TMP/out" "round-trip ceiling"
expect_in "text: the header" "$TMP/out" "p99 us"
expect_in "text: the row" "$TMP/out" "64.0 KiB"
expect_in "text: the CPU by thread" "$TMP/out" "cpu us per 64.0 KiB item by thread"
expect_rc "items under isolation=process" 0 "$FERRY" bench items --bytes 1M --item-sizes 64K \
  --isolation process --json
json_check "isolation=process: verified, no ceiling here" "$TMP/out" \
  "j['ok'] and j['results'][0]['verified'] and j['results'][0]['items'] == 16 and j['ceiling_gbps'] == 0"

expect_rc "--threads 0" 2 "$FERRY" bench items --threads 0
expect_in "--threads 0: why" "$TMP/err" "threads"
expect_rc "--threads 65" 2 "$FERRY" bench items --threads 65
expect_rc "--item-sizes with an empty item" 2 "$FERRY" bench items --item-sizes 4K,,8K
expect_in "empty item: why" "$TMP/err" "item 2 is empty"
expect_rc "--item-sizes 4098" 2 "$FERRY" bench items --item-sizes 4098
expect_in "4098: why" "$TMP/err" "not a multiple of 4"
expect_rc "--item-sizes 2" 2 "$FERRY" bench items --item-sizes 2
expect_rc "--bytes 0" 2 "$FERRY" bench items --bytes 0
for r in abc 0 -3 150% % 30GB; do
  expect_rc "--rate $r" 2 "$FERRY" bench items --rate "$r"
  expect_in "--rate $r: what is accepted" "$TMP/err" "accepted: GB/s above 0"
done
expect_rc "--rate on virtual time" 2 "$FERRY" bench items --backend sim --rate 1
expect_in "--rate on virtual time: why" "$TMP/err" "sim_pace"
expect_rc "--rate as a share of no ceiling" 2 "$FERRY" bench items --rate 50% --isolation process
expect_in "--rate 50% of no ceiling: why" "$TMP/err" "no ceiling"
expect_rc "--csv is not offered" 2 "$FERRY" bench items --csv
expect_rc "unknown benchmark" 2 "$FERRY" bench itemz
expect_in "unknown benchmark: the accepted ones" "$TMP/err" "copy, pipeline, io, items"

# --rate: items offered on a schedule (the simulated device in real time, sim_pace 1); the
# rate moved is the offered one (not more: the schedule holds the submitters back) and every
# item is verified
# (sanitizer builds: the simulator keeps up with far less, so a far lower rate, kept to at most)
rate=0.3 rbytes=8M low=0.15
[ "${FERRY_TEST_SCALE:-}" = sanitizer ] && rate=0.01 rbytes=1M low=0
expect_rc "items at $rate GB/s" 0 "$FERRY" bench items --sim-pace 1 --rate "$rate" \
  --bytes "$rbytes" --item-sizes 64K --threads 4 --json
json_check "at $rate GB/s: offered, kept to, verified" "$TMP/out" \
  "j['offered_gbps'] == $rate and j['ok'] and $low * $rate < j['results'][0]['gbps_h2d'] <= 1.1 * $rate"
# the submitters' spin for the schedule is the harness's CPU, told apart from ferry's own
json_check "at $rate GB/s: the harness's CPU apart" "$TMP/out" \
  "all(0 < r['cpu_us_per_item_harness'] and abs(r['cpu_us_per_item_ferry'] - max(r['cpu_us_per_item'] - r['cpu_us_per_item_harness'], 0)) < 0.01 for r in j['results'])"
expect_rc "items at $rate GB/s, text" 0 "$FERRY" bench items --sim-pace 1 --rate "$rate" \
  --bytes 512K --item-sizes 64K
expect_in "text: the schedule" "$TMP/out" "offered on a schedule: $(printf %.2f "$rate") GB/s"
expect_in "text: the harness's spin apart" "$TMP/out" "the submitters' spin for the schedule"

# Gathering (option gather_bytes): more items a slab than without it, each verified; `ferry run`
# of 64 KiB batches gathered, whose ring buffers are separate allocations (their pieces must not
# be merged across two of them), with no failed GPU attempt.
expect_rc "items gathered" 0 env FERRY_GATHER_BYTES=2M "$FERRY" bench items --bytes 4M \
  --item-sizes 4K,64K --threads 4 --json
json_check "gathered: fewer slabs than items, verified" "$TMP/out" \
  "all(r['verified'] and 0 < r['slabs'] < r['batches_gathered'] == r['items'] for r in j['results'])"
# each slab moves 2 pieces at least (its bytes, or its table and its batches', each way)
json_check "gathered: pieces and waits" "$TMP/out" \
  "all(r['gather_pieces'] >= 2 * r['slabs'] and isinstance(r['gather_waits'], int) for r in j['results'])"
# the latency bound a gathered item's p99 is held to: gather_us plus a slab's round trip alone,
# measured (2 MiB each way, one after the other, take at least half of 4 MiB at the ceiling)
json_check "gathered: the latency bound" "$TMP/out" \
  "j['gather_bytes'] == 2097152 and j['gather_us'] == 100 and j['slab_round_trip_us'] >= 0.5 * 4194304 / (j['ceiling_gbps'] * 1e3) and abs(j['latency_bound_us'] - 100 - j['slab_round_trip_us']) < 0.02 and 0 < j['slab_round_trip_min_us'] <= j['slab_round_trip_us'] <= j['slab_round_trip_max_us']"
json_check "gathered: each p99 against the bound" "$TMP/out" \
  "all(r['latency_p99_within_bound'] == (r['latency_p99_us'] <= j['latency_bound_us']) for r in j['results'])"
# a size over a quarter of the slab goes as batches of its own: no bound is said of it
expect_rc "items over a quarter slab" 0 env FERRY_GATHER_BYTES=2M "$FERRY" bench items --bytes 2M \
  --item-sizes 64K,1M
expect_in "text: the bound for the gathered size" "$TMP/out" "64.0 KiB p99 "
expect_in "text: the round trip's spread" "$TMP/out" "(7 runs: "
expect_not_in "text: no bound for the size not gathered" "$TMP/out" "1.00 MiB p99 "
expect_rc "items gathered, text" 0 env FERRY_GATHER_BYTES=2M "$FERRY" bench items --bytes 4M \
  --item-sizes 64K --threads 2
expect_in "text: pieces a slab" "$TMP/out" "pieces a slab (both ways)"
expect_in "text: the latency bound" "$TMP/out" "latency bound of a gathered item: gather_us 100 + one 2.00 MiB slab's round trip"
# small pinned items apart in memory, on a device whose copy kernel moves pieces up to 16 KiB:
# each item a piece of its own each way (no host copy); together in one buffer they merge
python3 - "${FERRY_PROFILE:-$(dirname "$0")/../../profiles/h200.json}" "$TMP/pk.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j['copy']['piece_kernel_max'] = 16384
json.dump(j, open(sys.argv[2], 'w'))
PY
expect_rc "items --scattered, copy kernel" 0 env FERRY_GATHER_BYTES=1M "$FERRY" bench items \
  --item-sizes 8K --scattered --bytes 8M --threads 4 --profile "$TMP/pk.json" --json
json_check "scattered: every item a piece each way, verified" "$TMP/out" \
  "j['scattered'] and all(r['verified'] and r['gather_pieces'] == r['slabs'] + 2 * r['items'] for r in j['results'])"
expect_rc "items side by side, copy kernel" 0 env FERRY_GATHER_BYTES=1M "$FERRY" bench items \
  --item-sizes 8K --bytes 8M --threads 4 --profile "$TMP/pk.json" --json
json_check "side by side: merged into runs" "$TMP/out" \
  "not j['scattered'] and all(r['verified'] and r['gather_pieces'] < r['items'] for r in j['results'])"
expect_rc "items --scattered, text" 0 env FERRY_GATHER_BYTES=1M "$FERRY" bench items \
  --item-sizes 8K --scattered --bytes 4M --threads 2
expect_in "text: says scattered" "$TMP/out" "(items apart in memory: --scattered)"
expect_rc "run gathered" 0 "$FERRY" run --gather-bytes 8M --bytes 64M --batch-bytes 64K
expect_in "run gathered: verified" "$TMP/out" "verify     OK"
expect_not_in "run gathered: no failed attempt" "$TMP/out" "failed GPU attempt"
expect_rc "gather_bytes over the chunk" 1 "$FERRY" run --gather-bytes 64M --bytes 64M \
  --batch-bytes 64K
expect_in "gather_bytes over the chunk: why" "$TMP/err" "chunk_bytes"
finish
