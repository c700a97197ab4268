#!/usr/bin/env bash
# Help, version, and every kind of bad input: usage errors exit 2 and name what was wrong and
# what is accepted; bad environment and files exit 1 with the variable or path named.
. "$(dirname "$0")/lib.sh"

expect_rc "ferry --help" 0 "$FERRY" --help
expect_in "help lists run" "$TMP/out" "run"
expect_in "help lists probe" "$TMP/out" "probe"
expect_rc "ferry --version" 0 "$FERRY" --version
if grep -qE '^ferry [0-9]+\.[0-9]+\.[0-9]+$' "$TMP/out"; then ok "version format"; else bad "version format"; fi
expect_rc "ferry with no command" 2 "$FERRY"
expect_rc "unknown command" 2 "$FERRY" frobnicate
expect_in "unknown command named" "$TMP/err" "frobnicate"
expect_rc "run --help" 0 "$FERRY" run --help
expect_in "run help shows --bytes" "$TMP/out" "--bytes"
expect_rc "probe --help" 0 "$FERRY" probe --help
expect_rc "options --help" 0 "$FERRY" options --help

expect_rc "bad --bytes" 2 "$FERRY" run --bytes 12Q
expect_in "bad --bytes named" "$TMP/err" "--bytes"
expect_in "bad --bytes says what is accepted" "$TMP/err" "K, M, G"
expect_rc "zero --bytes" 2 "$FERRY" run --bytes 0
expect_rc "missing value" 2 "$FERRY" run --bytes
expect_in "missing value named" "$TMP/err" "needs a value"
expect_rc "bad workload" 2 "$FERRY" run --workload nope
expect_in "workloads listed" "$TMP/err" "copy, scale, fma"
expect_rc "intensity without fma" 2 "$FERRY" run --intensity 4
expect_rc "intensity out of range" 2 "$FERRY" run --workload fma --intensity 0
expect_rc "depth out of range" 2 "$FERRY" run --depth 0
expect_in "depth range named" "$TMP/err" "1 to 64"
expect_rc "option flag with =" 2 "$FERRY" run --chunk-bytes=3G
expect_in "chunk range named" "$TMP/err" "chunk_bytes"
expect_rc "bad backend" 2 "$FERRY" run --backend gpu
expect_in "backends listed" "$TMP/err" "auto|sim|cuda"
expect_rc "unknown flag" 2 "$FERRY" run --frobnicate
expect_in "unknown flag named" "$TMP/err" "--frobnicate"
expect_rc "stray argument" 2 "$FERRY" probe extra
expect_rc "options bad flag" 2 "$FERRY" options --yaml

expect_rc "bad environment value (exit 2, as the flag)" 2 env FERRY_DEPTH=abc "$FERRY" run --bytes 1M
expect_in "variable named" "$TMP/err" "FERRY_DEPTH"
expect_in "range named" "$TMP/err" "1 to 64"
expect_rc "empty environment value" 2 env FERRY_CHUNK_BYTES= "$FERRY" run --bytes 1M
expect_in "empty variable named" "$TMP/err" "FERRY_CHUNK_BYTES"
expect_rc "missing input file" 1 "$FERRY" run --input "$TMP/nonexistent"
expect_in "input path named" "$TMP/err" "nonexistent"
expect_rc "input is a directory" 1 "$FERRY" run --input "$TMP"
expect_rc "unwritable output" 1 "$FERRY" run --bytes 1M --output "$TMP/no/such/dir/out"
expect_rc "bad profile" 1 "$FERRY" run --bytes 1M --backend sim --profile "$TMP/nonexistent.json"
expect_in "profile path named" "$TMP/err" "nonexistent.json"
echo '{"format": "ferry-profile-1"}' >"$TMP/bad.json"
expect_rc "incomplete profile" 1 "$FERRY" run --bytes 1M --backend sim --profile "$TMP/bad.json"
expect_in "profile error names the file" "$TMP/err" "bad.json"
finish
