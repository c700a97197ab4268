#!/usr/bin/env bash
# ferry connections: how CUDA reads every odd value of the variables, the measured sweep on the
# simulator (one child process per value, each within 10% of the law), recommendations, and
# bad input.
. "$(dirname "$0")/lib.sh"
unset CUDA_DEVICE_MAX_CONNECTIONS CUDA_DEVICE_MAX_COPY_CONNECTIONS FERRY_CONNECTIONS

expect_rc "report, unset" 0 "$FERRY" connections
expect_in "default named" "$TMP/out" "8 queues per context"
expect_in "read at cuInit said" "$TMP/out" "cuInit"

check_value() { # VALUE STATUS EFFECTIVE
  expect_rc "report for '$1'" 0 env CUDA_DEVICE_MAX_CONNECTIONS="$1" "$FERRY" connections --json
  json_check "'$1' is $2, $3 queues" "$TMP/out" \
    "j['CUDA_DEVICE_MAX_CONNECTIONS']['status'] == '$2' and j['CUDA_DEVICE_MAX_CONNECTIONS']['effective'] == $3 and j['CUDA_DEVICE_MAX_CONNECTIONS']['value'] == '$1'"
}
check_value 16 valid 16
check_value 1 valid 1
check_value 32 valid 32
check_value 0 ignored 8
check_value -1 ignored 8
check_value 33 undocumented 33
check_value abc malformed 8
check_value 8x malformed 8
check_value "" unset 8
check_value " 8" malformed 8
expect_rc "copy variable" 0 env CUDA_DEVICE_MAX_COPY_CONNECTIONS=4 "$FERRY" connections --json
json_check "copy variable read" "$TMP/out" "j['CUDA_DEVICE_MAX_COPY_CONNECTIONS']['effective'] == 4"
expect_rc "launch blocking" 0 env CUDA_LAUNCH_BLOCKING=1 "$FERRY" connections
expect_in "launch blocking explained" "$TMP/out" "nothing overlaps"
expect_rc "33 warned in text" 0 env CUDA_DEVICE_MAX_CONNECTIONS=33 "$FERRY" connections
expect_in "undocumented said" "$TMP/out" "documented"

# The sweep on the model: one child per value, each within 10% of the law.
expect_rc "measure on the simulator" 0 "$FERRY" connections --measure --backend sim --json
json_check "six values measured" "$TMP/out" "[r['connections'] for r in j['results']] == [1, 2, 4, 8, 16, 32]"
json_check "each within 10% of the law" "$TMP/out" "all(abs(r['error']) < 0.10 for r in j['results'])"
json_check "C=1 serialises 32 streams" "$TMP/out" "j['results'][0]['child']['total_ms'] > 60"
json_check "C=8 takes four waves" "$TMP/out" "3.9 < j['results'][3]['child']['waves'] < 4.3"
json_check "memory grows with C" "$TMP/out" "j['results'][-1]['memory_vs_base_bytes'] == 31 * 256 * 1024"
json_check "sweep time reported" "$TMP/out" "j['sweep_s'] >= 0"
expect_rc "measure text" 0 "$FERRY" connections --measure --backend sim --values 2,8 --streams 16
expect_in "table header" "$TMP/out" "law ms"
expect_in "sweep time said" "$TMP/out" "sweep took"
# The parent's own variable does not leak into the children's values.
expect_rc "measure ignores the parent's value" 0 env CUDA_DEVICE_MAX_CONNECTIONS=1 FERRY_CONNECTIONS=1 \
  "$FERRY" connections --measure --backend sim --values 32 --json
json_check "child used its own value" "$TMP/out" "j['results'][0]['child']['waves'] < 1.5"

expect_rc "recommend 12 streams" 0 "$FERRY" connections --recommend --streams 12 --json
json_check "12 recommended" "$TMP/out" "j['value'] == 12 and len(j['reasons']) == 3"
expect_rc "recommend 4 streams" 0 "$FERRY" connections --recommend --streams 4 --json
json_check "default kept for 4" "$TMP/out" "j['value'] == 8"
expect_rc "recommend 100 streams" 0 "$FERRY" connections --recommend --streams 100 --json
json_check "capped at 32" "$TMP/out" "j['value'] == 32 and 'round-robin' in j['reasons'][0]"
expect_rc "recommend strict" 0 "$FERRY" connections --recommend --streams 4 --ordering strict
expect_in "strict gives 1" "$TMP/out" "CUDA_DEVICE_MAX_CONNECTIONS=1"
expect_in "strict explains the cost" "$TMP/out" "cannot start"

for v in 0 33 abc 8x "" " 8" -1; do
  expect_rc "--values '$v' refused" 2 "$FERRY" connections --measure --values "$v"
  expect_in "--values '$v' says 1..32" "$TMP/err" "1..32"
done
expect_rc "empty item refused" 2 "$FERRY" connections --measure --values 1,,2
expect_rc "recommend needs streams" 2 "$FERRY" connections --recommend
expect_in "streams named" "$TMP/err" "--streams"
expect_rc "bad ordering" 2 "$FERRY" connections --recommend --streams 2 --ordering loose
expect_in "accepted ordering named" "$TMP/err" "strict"
expect_rc "measure and recommend" 2 "$FERRY" connections --measure --recommend --streams 2
expect_rc "too many streams to measure" 2 "$FERRY" connections --measure --streams 65
expect_rc "unknown flag" 2 "$FERRY" connections --frobnicate
expect_rc "bad FERRY_CONNECTIONS (a usage error, as the flag)" 2 env FERRY_CONNECTIONS=33 "$FERRY" connections
expect_in "variable named" "$TMP/err" "FERRY_CONNECTIONS"
finish
