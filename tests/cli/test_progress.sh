#!/usr/bin/env bash
# Progress bars: on a terminal (a pseudo-terminal from script(1)) `ferry run` and the bench
# sweep draw one on stderr, coloured unless NO_COLOR is set; never when the output is piped or
# with --quiet.
. "$(dirname "$0")/lib.sh"
if ! command -v script >/dev/null 2>&1; then
  bad "script(1) is missing (util-linux's bsdutils): it gives the test a terminal"
  finish
  exit 1
fi
ESC=$(printf '\033')
# tty NAME OUTFILE CMD...: run CMD on a pseudo-terminal, its whole screen into OUTFILE.
tty() {
  local name=$1 out=$2
  shift 2
  if script -qec "$(printf '%q ' "$@")" /dev/null >"$out" 2>&1; then ok "$name (exit 0)"; else bad "$name (exit $?)"; fi
}
has() { if grep -q -- "$3" "$2"; then ok "$1"; else bad "$1: no '$3' in $2"; fi; }
hasnt() { if grep -q -- "$3" "$2"; then bad "$1: '$3' in $2"; else ok "$1"; fi; }

tty "run on a terminal" "$TMP/t1" "$FERRY" run --backend sim --bytes 256M
has "a bar" "$TMP/t1" "ferry run \["
has "a percentage and the amount" "$TMP/t1" "% .* / 256.0 MiB"
has "coloured" "$TMP/t1" "$ESC\[32m"
has "then the summary" "$TMP/t1" "verify     OK"

# Many batches, so that the bar is redrawn as they complete.
tty "run of 128 batches" "$TMP/t5" "$FERRY" run --backend sim --bytes 1G --batch-bytes 8M
has "an ETA before anything is done" "$TMP/t5" "ETA --"
has "an ETA in seconds once batches are done" "$TMP/t5" "ETA [0-9][0-9]*s"

NO_COLOR=1 tty "NO_COLOR" "$TMP/t2" "$FERRY" run --backend sim --bytes 256M
has "still a bar" "$TMP/t2" "ferry run \["
hasnt "no colour" "$TMP/t2" "$ESC\[32m"

tty "--quiet" "$TMP/t3" "$FERRY" run --backend sim --bytes 256M --quiet
hasnt "no bar when quiet" "$TMP/t3" "ferry run \["

expect_rc "piped" 0 "$FERRY" run --backend sim --bytes 256M
hasnt "no bar into a pipe (stderr)" "$TMP/err" "ferry run \["
hasnt "no bar into a pipe (stdout)" "$TMP/out" "ferry run \["

tty "bench sweep on a terminal" "$TMP/t4" "$FERRY" bench pipeline --backend sim --bytes 64M \
  --chunks 1M,4M --streams 1,2 --intensity 0
has "a bar of configurations" "$TMP/t4" "configurations \[.*/ 4"
has "with an ETA" "$TMP/t4" "/ 4  ETA [0-9]"
finish
