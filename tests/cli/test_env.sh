#!/usr/bin/env bash
# `ferry env`: each format's snippet matches its golden file byte for byte, the shell snippets
# really set the variables, and bad values or flags are usage errors naming what is accepted.
. "$(dirname "$0")/lib.sh"
GOLDEN="$(dirname "$0")/golden"

# golden NAME FILE ARGS...: `ferry env ARGS` exits 0, writes FILE exactly and nothing to stderr.
golden() {
  local name=$1 file=$2
  shift 2
  expect_rc "$name" 0 "$FERRY" env "$@"
  # --json opens with the version and the time (test_json_header.sh checks them): the rest is
  # compared byte for byte.
  sed -i -E 's/^\{"command":"env","ferry_version":"[^"]*","time_utc":"[0-9TZ:-]*",/{/' "$TMP/out"
  if diff -u "$GOLDEN/$file" "$TMP/out" >"$TMP/diff"; then ok "$name matches $file"; else
    bad "$name differs from $file"; sed 's/^/#   /' "$TMP/diff" | head -20; fi
  if [ -s "$TMP/err" ]; then bad "$name wrote to stderr"; sed 's/^/#   /' "$TMP/err"; else
    ok "$name: stderr empty"; fi
}

for f in sh profile.d systemd docker k8s; do
  golden "format $f" "env.$f.txt" --connections 16 --format "$f"
done
golden "docker with copy" env.docker.copy.txt --connections 16 --copy-connections 4 --format docker
golden "k8s with copy" env.k8s.copy.txt --connections 16 --copy-connections 4 --format k8s
golden "k8s json" env.k8s.json.txt --connections 16 --copy-connections 4 --format k8s --json
golden "flags with =" env.k8s.txt --format=k8s --connections=16

expect_rc "json" 0 "$FERRY" env --connections 16 --format sh --json
json_check "json variables" "$TMP/out" 'j["variables"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "16"}'
json_check "json snippet" "$TMP/out" 'j["snippet"] == "export CUDA_DEVICE_MAX_CONNECTIONS=16\n"'

# The snippets are code: check that a shell runs them to the values asked for.
"$FERRY" env --connections 12 --copy-connections 3 --format profile.d >"$TMP/p.sh"
got=$(sh -c '. "$1"; echo "$CUDA_DEVICE_MAX_CONNECTIONS $CUDA_DEVICE_MAX_COPY_CONNECTIONS"' sh "$TMP/p.sh")
if [ "$got" = "12 3" ]; then ok "profile.d snippet sets both variables"; else
  bad "profile.d snippet gave '$got'"; fi

expect_rc "env --help" 0 "$FERRY" env --help
expect_in "help names --connections" "$TMP/out" "--connections"
expect_in "help lists formats" "$TMP/out" "sh|profile.d|systemd|docker|k8s"
expect_rc "ferry --help" 0 "$FERRY" --help
expect_in "ferry --help lists env" "$TMP/out" "print the snippet that makes"

for v in 0 -1 33 abc 8x "" " 8" 08 99999999999999999999; do
  expect_rc "--connections '$v'" 2 "$FERRY" env --connections "$v" --format sh
  expect_in "--connections '$v' named" "$TMP/err" "ferry env: --connections"
  expect_in "--connections '$v' range" "$TMP/err" "1..32"
  if [ -s "$TMP/out" ]; then bad "--connections '$v' wrote to stdout"; fi
done
expect_rc "--copy-connections 40" 2 "$FERRY" env --connections 8 --copy-connections 40 --format sh
expect_in "--copy-connections named" "$TMP/err" "--copy-connections"
expect_in "--copy-connections range" "$TMP/err" "1..32"
expect_rc "--copy-connections 0" 2 "$FERRY" env --connections 8 --copy-connections 0 --format sh

expect_rc "missing --connections" 2 "$FERRY" env --format sh
expect_in "missing --connections named" "$TMP/err" "--connections"
expect_rc "missing --format" 2 "$FERRY" env --connections 8
expect_in "missing --format named" "$TMP/err" "--format"
expect_in "missing --format lists formats" "$TMP/err" "sh, profile.d, systemd, docker, k8s"
expect_rc "unknown format" 2 "$FERRY" env --connections 8 --format yaml
expect_in "unknown format named" "$TMP/err" "yaml"
expect_in "unknown format lists formats" "$TMP/err" "sh, profile.d, systemd, docker, k8s"
expect_rc "missing value" 2 "$FERRY" env --format sh --connections
expect_in "missing value named" "$TMP/err" "--connections needs a value"
expect_rc "unknown flag" 2 "$FERRY" env --connections 8 --format sh --frobnicate
expect_in "unknown flag named" "$TMP/err" "--frobnicate"
expect_rc "stray argument" 2 "$FERRY" env --connections 8 --format sh extra
expect_in "stray argument named" "$TMP/err" "extra"
if [ -w /dev/full ]; then
  "$FERRY" env --connections 8 --format sh >/dev/full 2>"$TMP/err"
  if [ $? -eq 1 ]; then ok "full disk is a failure"; else bad "full disk passed for success"; fi
fi
finish
