#!/usr/bin/env bash
# `ferry run --isolation process`: the device runs in a worker process, every byte verified;
# with a sticky fault injected in the first worker, the run goes on on a new one (the summary
# and --json count the restart), verified; a bad value names what is accepted; no worker or
# helper outlives the run.
. "$(dirname "$0")/lib.sh"

bytes=512M
[ "${FERRY_TEST_SCALE:-}" = sanitizer ] && bytes=64M
expect_rc "run in a worker process" 0 "$FERRY" run --backend sim --isolation process --bytes "$bytes" --json
json_check "verified, on the GPU path, no restart" "$TMP/out" \
  "j['verified'] and j['worker_restarts'] == 0 and j['batches_failed'] == 0"
expect_rc "a sticky fault in the first worker" 0 "$FERRY" run --backend sim --isolation process \
  --bytes "$bytes" --batch-bytes 16M --inject 'sticky@batch=3' --json
json_check "verified after one restart" "$TMP/out" "j['verified'] and j['worker_restarts'] == 1"
expect_in "the log says which worker ended and why" "$TMP/err" "ended (a sticky error"
expect_rc "the summary says so" 0 "$FERRY" run --backend sim --isolation process \
  --bytes "$bytes" --batch-bytes 16M --inject 'sticky@batch=3'
expect_in "summary: the worker restarts" "$TMP/out" "worker     1 restart(s)"
expect_rc "a bad isolation" 2 "$FERRY" run --backend sim --isolation fork --bytes 1M
expect_in "names what is accepted" "$TMP/err" "thread|process"
# nothing left behind: no process of this binary still runs once the runs ended
if pgrep -f "$FERRY run --backend sim --isolation" >/dev/null; then
  bad "a worker or helper outlived its run"
else
  ok "no worker or helper outlived its run"
fi
finish
