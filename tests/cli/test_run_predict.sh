#!/usr/bin/env bash
# `ferry run` on the simulator predicts the run on the profile's host (run_predict.c,
# docs/simulator.md "The host"): the host memory traffic each byte costs for each shape of run
# (generated or file input, verification, file or null output), the limit that binds and its
# name; a profile whose host serves less memory slows the simulated copies themselves; a profile
# without the host sections gives no prediction and says why.
. "$(dirname "$0")/lib.sh"

PROFILE=${FERRY_PROFILE:?the H200 profile}
head -c 67108864 /dev/urandom >"$TMP/in.bin"

# predict NAME EXPR ARGS...: ferry run --json ARGS, then EXPR over j and p (j['predicted'])
predict() {
  local name=$1 expr=$2
  shift 2
  expect_rc "$name" 0 "$FERRY" run --json "$@"
  json_check "$name: $expr" "$TMP/out" "(lambda p: $expr)(j['predicted'])"
}

# generated and verified: the verifiers read 1 byte per byte beside the DMA, which loses
# dma_cpu_loss of its rate per GB/s of that: T / (1 + loss T)
predict "generated, verified" "p['bound'] == 'host memory' and 'DMA loses 1.34%' in p['bound_why'] and p['memory_traffic_per_byte'] == 3 and abs(p['end_to_end_gbps'] - j['transport_gbps'] / (1 + 0.00134 * j['transport_gbps'])) < 0.01" --bytes 64M
predict "generated, not verified" "p['memory_traffic_per_byte'] == 2" --bytes 64M --verify off
predict "generated, sampled" "abs(p['memory_traffic_per_byte'] - 2.0625) < 1e-3" --bytes 64M --verify sample
# file to file on the profile's tmpfs: its read and write through the page cache (2 each), the
# DMA (2), verification reading input and output (2): 150 GB/s / 8
# (the profile's tmpfs takes writes at 1.97 GB/s, measured: the storage binds first)
predict "file to file" "p['memory_traffic_per_byte'] == 8 and p['bound'] == 'storage' and abs(p['end_to_end_gbps'] - 1.97) < 0.01 and 'writing tmpfs at 2.0' in p['bound_why']" --workload copy --input "$TMP/in.bin" --output "$TMP/o.bin"
predict "file to /dev/null, sampled" "p['bound'] == 'storage' and abs(p['end_to_end_gbps'] - 34.7) < 0.01 and 'tmpfs' in p['bound_why']" --workload scale --input "$TMP/in.bin" --output /dev/null --verify sample --batch-bytes 16M
expect_rc "stdin to stdout" 0 sh -c '"$0" run --json --workload copy --input - --output - --quiet <"$1" >/dev/null 2>"$2"' "$FERRY" "$TMP/in.bin" "$TMP/err2"
predict "file to /dev/null, not verified" "p['memory_traffic_per_byte'] == 4" --workload copy --input "$TMP/in.bin" --output /dev/null --verify off

# the text summary says the same
expect_rc "text summary" 0 "$FERRY" run --workload copy --input "$TMP/in.bin" --output "$TMP/o.bin"
expect_in "text: predicted line" "$TMP/out" "predicted  2.0 GB/s end to end on the profile's host, bound by storage: writing tmpfs at 2.0 GB/s"

# variant FILE PYTHON: the H200 profile changed by PYTHON over `p`
variant() {
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])); $2; json.dump(p, open(sys.argv[2], 'w'))" "$PROFILE" "$1"
}
# A host that serves 40 GB/s: the simulated copies share it (20 each way) and the prediction
# names the host memory (40 / 3 bytes per byte).
variant "$TMP/slow.json" "p['host_memory']['gbps'] = 40"
FERRY_PROFILE="$TMP/slow.json" predict "host memory 40 GB/s" "j['gbps_h2d'] <= 20.0 and j['gbps_h2d'] > 18 and p['bound'] == 'host memory' and abs(p['end_to_end_gbps'] - 40 / 3) < 0.01" --bytes 64M
# A storage write rate, when the profile has one, bounds writing a file.
variant "$TMP/wr.json" "p['storage']['write_gbps'] = 5"
FERRY_PROFILE="$TMP/wr.json" predict "storage write 5 GB/s" "p['bound'] == 'storage' and p['end_to_end_gbps'] == 5 and 'writing tmpfs at 5.0' in p['bound_why']" --workload copy --input "$TMP/in.bin" --output "$TMP/o.bin"
# Few verifier threads on a slow host bound verification.
variant "$TMP/few.json" "p['host_memory']['threads'] = 3; p['host_memory']['thread_read_gbps'] = 2"
FERRY_PROFILE="$TMP/few.json" predict "one verifier at 2 GB/s" "p['bound'] == 'verification' and p['end_to_end_gbps'] == 2" --bytes 64M
# Without the DMA's loss the link binds generated data; a loss out of range is refused.
variant "$TMP/noloss.json" "del p['host_memory']['dma_cpu_loss']"
FERRY_PROFILE="$TMP/noloss.json" predict "no DMA loss" "p['bound'] == 'link' and abs(p['end_to_end_gbps'] - j['transport_gbps']) < 0.01" --bytes 64M
variant "$TMP/badloss.json" "p['host_memory']['dma_cpu_loss'] = 0.5"
FERRY_PROFILE="$TMP/badloss.json" expect_rc "dma_cpu_loss 0.5" 1 "$FERRY" run --bytes 64M
expect_in "dma_cpu_loss 0.5: names the key" "$TMP/err" "dma_cpu_loss"
# Without the host sections: no prediction, and the summary says why.
variant "$TMP/nohost.json" "del p['host_memory']; del p['storage']"
FERRY_PROFILE="$TMP/nohost.json" predict "no host model" "p is None" --bytes 64M
FERRY_PROFILE="$TMP/nohost.json" expect_rc "no host model, text" 0 "$FERRY" run --bytes 64M
expect_in "no host model: says so" "$TMP/out" "the profile does not model its host"
finish
