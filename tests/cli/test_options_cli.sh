#!/usr/bin/env bash
# Options on the command line and in the environment: the profile's default chunk size and its
# place between flag, variable and built-in; a bad variable is the usage error the same flag is;
# misspelt variables are named; --quiet drops warnings, not errors; strict parsing of floats and
# lists; messages that name flags once; probe's failure on stderr; --recommend --ordering strict
# agrees with docs/connections.md.
. "$(dirname "$0")/lib.sh"
unset CUDA_DEVICE_MAX_CONNECTIONS CUDA_DEVICE_MAX_COPY_CONNECTIONS FERRY_CONNECTIONS FERRY_CHUNK_BYTES
PROFILE=${FERRY_PROFILE:?the CLI tests run with FERRY_PROFILE set}

# --- the profile's defaults.chunk_bytes: flag > variable > profile > built-in -----------------
python3 - "$PROFILE" "$TMP/p1m.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["defaults"]["chunk_bytes"] = 1048576
json.dump(p, open(sys.argv[2], "w"))
EOF
run_chunk() { # NAME WANT ARGS...: `ferry run ARGS --json` reports chunk_bytes WANT
  local name=$1 want=$2
  shift 2
  expect_rc "$name" 0 "$@" run --backend sim --bytes 16M --json
  json_check "$name: chunk_bytes $want" "$TMP/out" "j['chunk_bytes'] == $want"
}
run_chunk "profile default 1M" 1048576 env FERRY_PROFILE="$TMP/p1m.json" "$FERRY"
run_chunk "h200 profile default 8M" 8388608 env FERRY_PROFILE="$PROFILE" "$FERRY"
run_chunk "variable over the profile" 2097152 env FERRY_PROFILE="$TMP/p1m.json" FERRY_CHUNK_BYTES=2M "$FERRY"
expect_rc "flag over the variable" 0 env FERRY_PROFILE="$TMP/p1m.json" FERRY_CHUNK_BYTES=2M \
  "$FERRY" run --backend sim --bytes 16M --chunk-bytes 4M --json
json_check "flag over the variable: chunk_bytes 4M" "$TMP/out" "j['chunk_bytes'] == 4194304"
expect_rc "--chunk-bytes 0 is the profile's" 0 env FERRY_PROFILE="$TMP/p1m.json" \
  "$FERRY" run --backend sim --bytes 16M --chunk-bytes 0 --json
json_check "--chunk-bytes 0: chunk_bytes 1M" "$TMP/out" "j['chunk_bytes'] == 1048576"

# --- a bad variable exits 2, like the same bad flag -------------------------------------------
expect_rc "--depth x" 2 "$FERRY" run --backend sim --bytes 1M --depth x
for c in run probe "bench copy" connections; do
  expect_rc "FERRY_DEPTH=x, ferry $c" 2 env FERRY_DEPTH=x "$FERRY" $c
  expect_in "FERRY_DEPTH=x, ferry $c: variable named" "$TMP/err" "environment variable FERRY_DEPTH: 'x'"
  expect_in "FERRY_DEPTH=x, ferry $c: range" "$TMP/err" "from 1 to 64"
done

# --- misspelt variables -----------------------------------------------------------------------
expect_rc "FERRY_DEPT=4" 0 env FERRY_DEPT=4 "$FERRY" run --backend sim --bytes 16M
expect_in "FERRY_DEPT named with FERRY_DEPTH" "$TMP/err" "unknown variable FERRY_DEPT; did you mean FERRY_DEPTH?"
expect_rc "FERRY_TEST_*, FERRY_SOAK_BATCHES, FERRY_DEVICE_INDEX" 0 env FERRY_TEST_ANYTHING=1 FERRY_SOAK_BATCHES=5 FERRY_DEVICE_INDEX=0 \
  "$FERRY" run --backend sim --bytes 16M
expect_not_in "ferry's test variables not flagged" "$TMP/err" "unknown variable"
expect_rc "a ferry started by exec --per-device" 0 "$FERRY" exec --backend sim --per-device '*=8' -- \
  "$FERRY" run --backend sim --bytes 16M
expect_not_in "FERRY_DEVICE_INDEX not flagged" "$TMP/err" "unknown variable"
expect_rc "options' variables not flagged" 0 env FERRY_DEPTH=4 FERRY_SEED=3 "$FERRY" run --backend sim --bytes 16M
expect_not_in "FERRY_DEPTH not flagged" "$TMP/err" "unknown variable"

# --- --quiet: warnings dropped, errors kept ---------------------------------------------------
expect_rc "a warning without --quiet" 0 env CUDA_DEVICE_MAX_CONNECTIONS=40 "$FERRY" run --backend sim --bytes 16M
expect_in "the warning" "$TMP/err" "above the documented 32"
expect_rc "--quiet drops it" 0 env CUDA_DEVICE_MAX_CONNECTIONS=40 FERRY_DEPT=4 "$FERRY" run --backend sim --bytes 16M --quiet
if [ -s "$TMP/err" ]; then bad "--quiet: stderr not empty"; sed 's/^/#   /' "$TMP/err" | head -5; else ok "--quiet: stderr empty"; fi
if [ -s "$TMP/out" ]; then bad "--quiet: stdout not empty"; else ok "--quiet: stdout empty"; fi
expect_rc "--quiet with faults" 0 "$FERRY" run --backend sim --bytes 64M --quiet --inject kernel@p=0.3
if [ -s "$TMP/err" ]; then bad "--quiet with faults: warnings printed"; sed 's/^/#   /' "$TMP/err" | head -3; else ok "--quiet with faults: no warnings"; fi
expect_rc "--quiet keeps errors" 2 "$FERRY" run --backend sim --bytes 1M --quiet --depth 0
expect_in "--quiet: the error printed" "$TMP/err" "--depth: option depth: '0' is not accepted"
expect_rc "--quiet keeps run errors" 1 "$FERRY" run --backend sim --quiet --input "$TMP/no-such-file"
expect_in "--quiet: the failure printed" "$TMP/err" "no-such-file"

# --- floats: decimal only; the seed's maximum; bw_foreign_ratio's listed range ----------------
for v in 0x10 0X10 inf nan 1e; do
  expect_rc "--deadline-factor $v" 2 "$FERRY" run --backend sim --bytes 1M --deadline-factor "$v"
  expect_in "--deadline-factor $v: accepted said" "$TMP/err" "a decimal number from 1 to 1000"
done
expect_rc "FERRY_DEADLINE_FACTOR=0x10" 2 env FERRY_DEADLINE_FACTOR=0x10 "$FERRY" run --backend sim --bytes 1M
expect_rc "--deadline-factor 16" 0 "$FERRY" run --backend sim --bytes 1M --deadline-factor 16
expect_rc "--seed 2^64" 2 "$FERRY" run --backend sim --bytes 1M --seed 18446744073709551616
expect_in "--seed: the maximum is 2^64-1" "$TMP/err" "from 0 to 18446744073709551615"
expect_rc "--seed 2^64-1" 0 "$FERRY" run --backend sim --bytes 1M --seed 18446744073709551615
expect_rc "options --json" 0 "$FERRY" options --json
json_check "bw_foreign_ratio listed as it is parsed" "$TMP/out" \
  "any(o['name'] == 'bw_foreign_ratio' and o['accepted'] == '0.01..1' for o in (j['options'] if isinstance(j, dict) else j))"
expect_rc "--bw-foreign-ratio 0.01 (the listed minimum)" 0 "$FERRY" run --backend sim --bytes 1M --bw-foreign-ratio 0.01
expect_rc "--bw-foreign-ratio 0" 2 "$FERRY" run --backend sim --bytes 1M --bw-foreign-ratio 0
expect_in "--bw-foreign-ratio 0: range" "$TMP/err" "from 0.01 to 1"

# --- messages name a flag once ----------------------------------------------------------------
expect_rc "connections --streams abc" 2 "$FERRY" connections --recommend --streams abc
expect_in "--streams named" "$TMP/err" "--streams 'abc'"
expect_not_in "not ----streams" "$TMP/err" "----"
expect_rc "connections --reps 0" 2 "$FERRY" connections --measure --reps 0
expect_in "--reps named" "$TMP/err" "--reps '0'"
expect_not_in "not ----reps" "$TMP/err" "----"

# --- lists refuse empty items -----------------------------------------------------------------
for arg in "--sizes 4K,,8K" "--sizes ,4K" "--sizes 4K," "--sizes ,"; do
  # shellcheck disable=SC2086
  expect_rc "bench copy $arg" 2 "$FERRY" bench copy --backend sim $arg
  expect_in "bench copy $arg: empty item named" "$TMP/err" "is empty"
done
for arg in "--streams 1,,2" "--chunks 1M,,4M" "--intensity 1,,2"; do
  # shellcheck disable=SC2086
  expect_rc "bench pipeline $arg" 2 "$FERRY" bench pipeline --backend sim $arg
  expect_in "bench pipeline $arg: empty item named" "$TMP/err" "item 2 is empty"
done

# --- probe: the failure is an error, on stderr ------------------------------------------------
if "$FERRY" probe --backend cuda --json >/dev/null 2>&1; then
  echo "# a CUDA device answers here: the failure case cannot be seen"
else
  expect_rc "probe --backend cuda without a GPU" 1 "$FERRY" probe --backend cuda
  expect_in "the failure on stderr" "$TMP/err" "ferry probe: no usable device (backend cuda: "
  expect_not_in "not on stdout" "$TMP/out" "no usable device"
fi

# --- --recommend --ordering strict agrees with docs/connections.md -----------------------------
expect_rc "recommend strict" 0 "$FERRY" connections --recommend --streams 4 --ordering strict
expect_not_in "copies do not keep their own queues" "$TMP/out" "copies keep their own queues"
expect_in "copies share the queue" "$TMP/out" "copies share it too"
expect_in "the copy variable named" "$TMP/out" "CUDA_DEVICE_MAX_COPY_CONNECTIONS"
grep -qF "The copy queues follow the variable unless" "$(dirname "$0")/../../docs/connections.md" &&
  ok "docs/connections.md says the copy queues follow" || bad "docs/connections.md changed: check the message"
finish
