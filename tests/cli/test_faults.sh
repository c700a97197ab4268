#!/usr/bin/env bash
# ferry run --inject: faults on the simulator end to end. Every batch completes and verifies;
# the summary counts batches done on the GPU and on the CPU, the failed attempts and where
# their records went; a sticky fault ends the GPU path; bad specs and log paths are refused.
. "$(dirname "$0")/lib.sh"
# A copy per chunk (--coalesce-bytes 0): the retries and records counted are per chunk.
run() { "$FERRY" run --backend sim --bytes 128M --batch-bytes 16M --chunk-bytes 4M --coalesce-bytes 0 "$@"; }

# A kernel fault: the chunk is retried on the GPU a ladder step lower, and succeeds.
expect_rc "kernel fault" 0 run --inject kernel@batch=2 --failure-log "$TMP/f1.jsonl" --json
json_check "verified, all on the GPU after one retry" "$TMP/out" \
  "j['verified'] and j['batches_ok_gpu'] == 8 and j['batches_ok_cpu'] == 0 and j['failure_records'] == 1 and j['chunks_retried'] == 1 and j['ladder_steps_down'] == 1 and not j['gpu_lost']"
if [ "$(wc -l <"$TMP/f1.jsonl")" -eq 1 ]; then ok "one failure record"; else bad "records: $(wc -l <"$TMP/f1.jsonl")"; fi
json_check "the record names the batch, the error and the action" "$TMP/f1.jsonl" \
  "j['batch'] == 2 and j['chunk'] == 0 and j['attempt'] == 0 and j['error'] == 'EKERNEL' and j['action'] == 'retry' and j['level'] == 1 and 'plan' in j and 'buffers' in j"
expect_rc "kernel fault, summary" 0 run --inject kernel@batch=2
expect_in "summary counts the retry" "$TMP/out" "1 failed GPU attempt(s), 1 chunk(s) then done by a GPU retry, 0 on the CPU"
# Without retries the CPU redoes the chunk.
expect_rc "kernel fault, no retry" 0 run --inject kernel@batch=2 --gpu-retries 0 --failure-log "$TMP/f0.jsonl" --json
json_check "verified, one batch helped by the CPU" "$TMP/out" \
  "j['verified'] and j['batches_ok_cpu'] == 1 and j['batches_ok_gpu'] == 7 and j['failure_records'] == 1 and j['chunks_retried'] == 0 and not j['gpu_lost']"
json_check "the record says cpu, level 2" "$TMP/f0.jsonl" "j['action'] == 'cpu' and j['level'] == 2"
expect_rc "bad gpu_retries" 2 run --gpu-retries 9
expect_in "bad gpu_retries named" "$TMP/err" "gpu_retries"

expect_rc "sticky fault" 0 run --inject sticky@n=5 --failure-log "$TMP/f2.jsonl"
expect_in "summary says the GPU path ended" "$TMP/out" "ended the GPU path"
expect_in "summary names the records" "$TMP/out" "$TMP/f2.jsonl"
expect_in "still verified" "$TMP/out" "verify     OK"
expect_rc "sticky fault, json" 0 run --inject sticky@n=5 --json
json_check "gpu lost, every batch verified" "$TMP/out" \
  "j['gpu_lost'] and j['verified'] and j['batches_failed'] == 0 and j['batches_ok_cpu'] >= 6"

expect_rc "random faults" 0 run --inject kernel@p=0.3 --json
json_check "random faults: nothing lost" "$TMP/out" \
  "j['verified'] and j['batches_ok_gpu'] + j['batches_ok_cpu'] == 8 and j['failure_records'] == j['chunks_retried'] + 2 * j['chunks_cpu']"

expect_rc "slow link" 0 run --inject slow@n=1:x=8 --json
json_check "slow link: slower, verified" "$TMP/out" "j['verified'] and j['gbps_h2d'] < 12"

# Another process on the link: ferry's copies fall under the alert share, and the alert names
# the other process, as the link's counter shows traffic the pipeline did not move. A share
# that leaves ferry above the alert share raises nothing.
expect_rc "another process on the link" 0 "$FERRY" run --backend sim --bytes 1G --workload copy \
  --inject 'share@time=2ms:gbps=40:dir=both' --op-timing all --json
json_check "share: alerts, the link counts the rest, verified" "$TMP/out" \
  "j['verified'] and j['bw_alerts'] >= 1 and j['link_samples'] >= 1 and j['link_gbps_h2d'] - j['link_own_gbps_h2d'] >= 0.1 * 63"
expect_in "the alert names another process" "$TMP/err" "another process moves data on the link"
expect_rc "a small share" 0 "$FERRY" run --backend sim --bytes 1G --workload copy \
  --inject 'share@time=2ms:gbps=5:dir=h2d' --op-timing all --json
json_check "small share: no alert" "$TMP/out" "j['verified'] and j['bw_alerts'] == 0"
expect_rc "no link sampling" 0 "$FERRY" run --backend sim --bytes 1G --workload copy \
  --inject 'share@time=2ms:gbps=40:dir=both' --op-timing all --link-sample-ms 0 --json
json_check "link_sample_ms 0: no samples" "$TMP/out" "j['link_samples'] == 0 and j['bw_alerts'] >= 1"
expect_not_in "without samples, no other process named" "$TMP/err" "another process moves"

expect_rc "allocation failure" 0 run --inject alloc@n=3 --json
json_check "fewer slots, verified" "$TMP/out" "j['verified']"

expect_rc "hang that polls the abort flag" 0 run --inject hang@batch=3 --json
json_check "hang: one deadline, one batch redone, GPU path kept" "$TMP/out" \
  "j['verified'] and j['deadlines_passed'] == 1 and j['batches_ok_cpu'] == 1 and not j['gpu_lost']"
expect_rc "hang that ignores it" 0 run --inject hang-hard@batch=3
expect_in "summary says the GPU hung" "$TMP/out" "a hung kernel"
expect_in "still verified after a hang" "$TMP/out" "verify     OK"

# The trace shows what happened: a flow per chunk (H2D -> compute -> D2H) and instant events
# for the deadline and for the bandwidth alert (256 KiB chunks, a copy each, are small
# transfers).
expect_rc "trace with faults" 0 "$FERRY" run --backend sim --bytes 128M --batch-bytes 16M \
  --chunk-bytes 256K --coalesce-bytes 0 --inject hang@batch=3 --trace "$TMP/t.json"
json_check "a flow per timed chunk, each with its three steps" "$TMP/t.json" \
  "(lambda ev: len([e for e in ev if e['ph'] == 's']) == len([e for e in ev if e['ph'] == 't']) == len([e for e in ev if e['ph'] == 'f']) == len([e for e in ev if e['ph'] == 'X']) // 6 > 400)(j['traceEvents'])"
json_check "instant events for the deadline and the alert" "$TMP/t.json" \
  "any(e['ph'] == 'i' and 'deadline' in e['name'] for e in j['traceEvents']) and any(e['ph'] == 'i' and 'bandwidth' in e['name'] for e in j['traceEvents'])"

expect_rc "bad spec" 1 run --inject kernel@batch
expect_in "bad spec named" "$TMP/err" "kernel@batch"
expect_in "accepted spec shown" "$TMP/err" "KIND@TRIGGER"
expect_rc "unknown fault kind" 1 run --inject meteor@n=1
expect_in "kinds listed" "$TMP/err" "kernel|sticky|alloc|slow|share|hang|hang-hard"
expect_rc "share without a rate" 1 run --inject share@n=1
expect_in "share needs gbps named" "$TMP/err" "share needs gbps=R"
expect_rc "share with a bad direction" 1 run --inject share@n=1:gbps=5:dir=up
expect_in "share directions listed" "$TMP/err" "dir= takes h2d, d2h or both"
expect_rc "share on a random trigger" 1 run --inject share@p=0.5:gbps=5
expect_in "share triggers named" "$TMP/err" "share faults take n= or time="
expect_rc "bad failure log" 1 run --failure-log /nonexistent/dir/f.jsonl
expect_in "log path named" "$TMP/err" "/nonexistent/dir/f.jsonl"
finish
