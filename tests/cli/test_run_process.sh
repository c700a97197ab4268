#!/usr/bin/env bash
# `ferry run --isolation process`: the device runs in a worker process, every byte verified;
# with a sticky fault injected in the first worker, the run goes on on a new one (the summary
# and --json count the restart, the metrics too, a failure record names the worker, how it
# ended and why), verified; a bad value names what is accepted; no worker or
# helper outlives the run.
. "$(dirname "$0")/lib.sh"

bytes=512M sigbatch=8M
[ "${FERRY_TEST_SCALE:-}" = sanitizer ] && bytes=64M sigbatch=1M
expect_rc "run in a worker process" 0 "$FERRY" run --backend sim --isolation process --bytes "$bytes" --json
json_check "verified, on the GPU path, no restart" "$TMP/out" \
  "j['verified'] and j['worker_restarts'] == 0 and j['batches_failed'] == 0"
expect_rc "a sticky fault in the first worker" 0 "$FERRY" run --backend sim --isolation process \
  --bytes "$bytes" --batch-bytes 16M --inject 'sticky@batch=3' --failure-log "$TMP/fl.jsonl" --json
json_check "verified after one restart" "$TMP/out" \
  "j['verified'] and j['worker_restarts'] == 1 and j['failure_records'] >= 1"
python3 - "$TMP/fl.jsonl" <<'PY' && ok "the failure record names the worker, how it ended and why" || bad "the failure record: $(cat "$TMP/fl.jsonl")"
import json, sys
w = [r for r in map(json.loads, open(sys.argv[1])) if r.get('kind') == 'worker']
assert len(w) == 1, w
r = w[0]
assert r['pid'] > 0 and r['generation'] == 0 and r['exit_status'] == 3 and r['signal'] is None
assert r['cause'] == 'a sticky error' and r['action'] in ('spare', 'new worker'), r
assert r['device'] == 0 and r['stage'] == 'scale' and r['oldest_batch'] == 3 and r['in_flight'] >= 1, r
PY
expect_in "the log says which worker ended and why" "$TMP/err" "ended (a sticky error"
expect_rc "the summary says so" 0 "$FERRY" run --backend sim --isolation process \
  --bytes "$bytes" --batch-bytes 16M --inject 'sticky@batch=3' --metrics-file "$TMP/m.prom"
expect_in "summary: the worker restarts" "$TMP/out" "worker     1 restart(s)"
expect_in "metrics: the restart counted" "$TMP/m.prom" 'ferry_worker_restarts_total{pipeline="run",device="0"} 1'
if awk '/^ferry_worker_recovery_seconds\{pipeline="run",device="0"\} / { if ($2 + 0 > 0) f = 1 } END { exit !f }' "$TMP/m.prom"; then
  ok "metrics: the recovery time"
else
  bad "metrics: no recovery time in $(grep ferry_worker "$TMP/m.prom")"
fi
expect_rc "a bad isolation" 2 "$FERRY" run --backend sim --isolation fork --bytes 1M
expect_in "names what is accepted" "$TMP/err" "thread|process"
# SIGINT mid-run: the run stops as in one process (exit 130), its worker and helper with it
python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$FERRY" run --backend sim --isolation process --bytes 64G \
  --batch-bytes "$sigbatch" >"$TMP/sig.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do # the worker is up once a child of the helper runs
  [ "$(pgrep -f "$FERRY run --backend sim --isolation process --bytes 64G" | wc -l)" -ge 3 ] && break
  sleep 0.1
done
sleep 0.5
kill -INT "$pid"
t=0
while kill -0 "$pid" 2>/dev/null && [ "$t" -lt 200 ]; do sleep 0.1; t=$((t + 1)); done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  bad "SIGINT: still running after 20 s"
fi
wait "$pid"
rc=$?
if [ "$rc" -eq 130 ]; then ok "SIGINT: exit 130"; else bad "SIGINT: exit $rc, expected 130"; fi
# the summary, or (work in flight past the 10 s grace: a sanitizer build beside other tests)
# the grace's own word: either is a stop that says why
if grep -qF "stopped    by SIGINT" "$TMP/sig.log" || grep -qF "SIGINT: the work in flight took over" "$TMP/sig.log"; then
  ok "SIGINT: said"
else
  bad "SIGINT: not said"
  sed 's/^/#   /' "$TMP/sig.log" | tail -5
fi
sleep 0.5
# nothing left behind: no process of this binary still runs once the runs ended
if pgrep -f "$FERRY run --backend sim --isolation" >/dev/null; then
  bad "a worker or helper outlived its run"
else
  ok "no worker or helper outlived its run"
fi
finish
