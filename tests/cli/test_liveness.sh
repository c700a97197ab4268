#!/usr/bin/env bash
# ferry run ends under random kernel faults and hangs: the mix that never ended when a GPU retry
# hung (kernel@p=0.3,hang@p=0.05, seeds 1, 2 and 5), scaled down, and its hard-hang variant.
# Each run is bounded (timeout: exit 124 fails the check), verifies, and completes every batch.
. "$(dirname "$0")/lib.sh"
run() { timeout 120 "$FERRY" run --backend sim --bytes 128M --batch-bytes 16M --chunk-bytes 2M "$@"; }

for seed in 1 2 5; do
  expect_rc "kernel@p=0.3,hang@p=0.05 seed $seed ends" 0 run --inject kernel@p=0.3,hang@p=0.05 --seed "$seed" --json
  json_check "seed $seed: every batch done once, verified" "$TMP/out" \
    "j['verified'] and j['batches_ok_gpu'] + j['batches_ok_cpu'] == 8 and j['batches_failed'] == 0"
done
for retries in 0 3; do
  expect_rc "hang-hard with --gpu-retries $retries ends" 0 run --inject kernel@p=0.3,hang-hard@p=0.05 --gpu-retries "$retries" --seed 2 --json
  json_check "hang-hard, retries $retries: verified" "$TMP/out" \
    "j['verified'] and j['batches_ok_gpu'] + j['batches_ok_cpu'] == 8"
done
finish
