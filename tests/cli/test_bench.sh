#!/usr/bin/env bash
# `ferry bench copy` and `ferry bench pipeline` on the simulator: JSON and CSV output, values
# that follow the measured H200 (FACTS.md) through the model, and bad input.
. "$(dirname "$0")/lib.sh"

expect_rc "bench copy --json" 0 "$FERRY" bench copy --backend sim --sizes 4K,1M,64M --reps 2 --json
json_check "copy: 3 sizes x 3 directions x 2 memories" "$TMP/out" "len(j['results']) == 18 and j['ok']"
json_check "copy: H2D 1 MiB pinned near 43.2 GB/s" "$TMP/out" \
  "[abs(r['best_gbps'] / 43.2 - 1) < 0.05 for r in j['results'] if r['bytes'] == 2**20 and r['direction'] == 'h2d' and r['memory'] == 'pinned'] == [True]"
json_check "copy: both directions 1.7-1.8x one" "$TMP/out" \
  "(lambda d: 1.65 < d[('both', 'pinned')] / d[('h2d', 'pinned')] < 1.85)({(r['direction'], r['memory']): r['best_gbps'] for r in j['results'] if r['bytes'] == 64*2**20})"
json_check "copy: pinned 4-9x faster than pageable (H2D 64 MiB)" "$TMP/out" \
  "(lambda d: 4 < d['pinned'] / d['pageable'] < 9.5)({r['memory']: r['best_gbps'] for r in j['results'] if r['bytes'] == 64*2**20 and r['direction'] == 'h2d'})"
expect_rc "bench copy --csv" 0 "$FERRY" bench copy --backend sim --sizes 4K --reps 1 --no-pageable --csv
expect_in "csv header" "$TMP/out" "bytes,direction,memory,best_gbps,median_gbps"
if [ "$(wc -l <"$TMP/out")" -eq 4 ]; then ok "csv rows"; else bad "csv rows: $(wc -l <"$TMP/out")"; fi
expect_in "csv: a column says which rows sum two directions" "$TMP/out" "reps,sum_of_directions"
if grep -q ",both,.*,1$" "$TMP/out" && ! grep -q ",h2d,.*,1$" "$TMP/out"; then ok "csv: both rows are sums"; else
  bad "csv: sum_of_directions column"; sed 's/^/#   /' "$TMP/out"; fi
expect_rc "bench copy text" 0 "$FERRY" bench copy --backend sim --sizes 4K --reps 1 --no-pageable
if grep " both " "$TMP/out" | grep -qF "(sum of H2D and D2H)" && ! grep " h2d " "$TMP/out" | grep -qF "sum"; then
  ok "text: both rows say they are the sum"; else bad "text: both rows"; sed 's/^/#   /' "$TMP/out"; fi
expect_rc "bench copy --json" 0 "$FERRY" bench copy --backend sim --sizes 4K --reps 1 --no-pageable --json
json_check "json: both rows carry sum_of_directions" "$TMP/out" \
  "all(r['sum_of_directions'] == (r['direction'] == 'both') for r in j['results'])"

# A copy per chunk (--coalesce-bytes 0), so that the fixed cost of a copy shows at 1 MiB.
expect_rc "bench pipeline --json" 0 "$FERRY" bench pipeline --backend sim --bytes 128M --chunks 1M,4M --streams 1,2 --intensity 0,2 --coalesce-bytes 0 --json
json_check "pipeline: 8 rows verified" "$TMP/out" "len(j['results']) == 8 and all(r['verified'] for r in j['results']) and j['ok']"
json_check "pipeline: ceiling from the same run" "$TMP/out" "44 < j['ceiling_gbps'] < 52"
json_check "pipeline: 4 MiB chunks >= 90% of the ceiling" "$TMP/out" \
  "all(r['fraction'] >= 0.90 for r in j['results'] if r['chunk_bytes'] == 4*2**20)"
json_check "pipeline: 1 MiB below 4 MiB" "$TMP/out" \
  "max(r['gbps_h2d'] for r in j['results'] if r['chunk_bytes'] == 2**20) < min(r['gbps_h2d'] for r in j['results'] if r['chunk_bytes'] == 4*2**20)"
expect_rc "bench pipeline --compare" 0 "$FERRY" bench pipeline --backend sim --bytes 16M --chunks 4M --streams 1 --intensity 0 --compare --csv
expect_in "compare columns" "$TMP/out" "sim_gbps_h2d,sim_error"
# The prediction's own length: 64M of 16 MiB chunks fills and drains the pipeline less than
# 16M, so the prediction rises; 0 is refused by name.
expect_rc "bench pipeline --compare-bytes" 0 "$FERRY" bench pipeline --backend sim --bytes 16M --chunks 16M --streams 1 --intensity 0 --compare-bytes 64M --json
json_check "a longer prediction is faster" "$TMP/out" "j['results'][0]['sim_gbps_h2d'] > 1.2 * j['results'][0]['gbps_h2d']"
expect_rc "bench pipeline --compare-bytes 0" 2 "$FERRY" bench pipeline --compare-bytes 0
expect_in "compare-bytes named" "$TMP/err" "--compare-bytes must be at least 1"
# Passes: the median of N, each on a fresh pipeline; the best one beside it.
expect_rc "bench pipeline --passes 3" 0 "$FERRY" bench pipeline --backend sim --bytes 32M --chunks 1M --streams 1 --intensity 0 --passes 3 --json
json_check "passes: 3, best at least the median" "$TMP/out" \
  "all(r['passes'] == 3 and r['verified'] and r['best_gbps'] >= min(r['gbps_h2d'], r['gbps_d2h']) > 30 for r in j['results'])"
expect_rc "bench pipeline --passes 0" 2 "$FERRY" bench pipeline --passes 0
expect_in "--passes 0 named" "$TMP/err" "passes"
# Coalesced copies: the copy column says what one copy moved. By default (8M) a batch's 4
# chunks of 1 MiB share a copy, 2 of 4 MiB, and a 16 MiB chunk goes alone; faster than a
# copy per chunk.
expect_rc "bench pipeline --coalesce-bytes" 0 "$FERRY" bench pipeline --backend sim --bytes 32M --chunks 1M,16M --streams 1 --intensity 0 --coalesce-bytes 8M --json
json_check "coalesced: 4 chunks of 1 MiB per copy, 16 MiB alone" "$TMP/out" \
  "[r['copy_bytes'] for r in j['results']] == [4 << 20, 16 << 20] and all(r['verified'] for r in j['results'])"
expect_rc "bench pipeline, coalescing by default" 0 "$FERRY" bench pipeline --backend sim --bytes 128M --chunks 1M,4M --streams 1 --intensity 0 --json
json_check "default: 4 chunks of 1 MiB per copy, 2 of 4 MiB" "$TMP/out" \
  "[r['copy_bytes'] for r in j['results']] == [4 << 20, 8 << 20] and all(r['verified'] for r in j['results'])"
cp "$TMP/out" "$TMP/coalesced.json"
expect_rc "bench pipeline --coalesce-bytes 0" 0 "$FERRY" bench pipeline --backend sim --bytes 128M --chunks 1M --streams 1 --intensity 0 --coalesce-bytes 0 --json
json_check "a copy per chunk is slower at 1 MiB than the default" "$TMP/out" \
  "j['results'][0]['copy_bytes'] == 1 << 20 and j['results'][0]['gbps_h2d'] * 1.05 < json.load(open('$TMP/coalesced.json'))['results'][0]['gbps_h2d']"
# The host buffers' offset from a page boundary (a malloc'd block's 16 bytes, say).
expect_rc "bench pipeline --host-offset 16" 0 "$FERRY" bench pipeline --backend sim --bytes 16M --chunks 4M --streams 1 --intensity 0 --host-offset 16 --json
json_check "host offset: said, verified" "$TMP/out" "j['host_offset'] == 16 and j['results'][0]['verified']"
expect_rc "bench pipeline --host-offset 6" 2 "$FERRY" bench pipeline --host-offset 6
expect_in "--host-offset 6 named" "$TMP/err" "--host-offset 6: accepted: a multiple of 4"
expect_rc "bench pipeline --host-offset 4096" 2 "$FERRY" bench pipeline --host-offset 4096
expect_in "--host-offset 4096 named" "$TMP/err" "host-offset"

expect_rc "bench without a benchmark" 2 "$FERRY" bench
expect_rc "unknown benchmark" 2 "$FERRY" bench disk
expect_in "benchmarks listed" "$TMP/err" "copy, pipeline"
expect_rc "bad size list" 2 "$FERRY" bench copy --sizes 4K,0
expect_rc "bad size text" 2 "$FERRY" bench copy --sizes 4Q
expect_rc "bad reps" 2 "$FERRY" bench copy --reps 0
expect_rc "json and csv" 2 "$FERRY" bench copy --json --csv
expect_rc "pipeline flag on copy" 2 "$FERRY" bench copy --chunks 1M
expect_in "flag named" "$TMP/err" "--chunks"
expect_rc "bad streams" 2 "$FERRY" bench pipeline --streams 0
expect_rc "bench --help" 0 "$FERRY" bench --help
finish
