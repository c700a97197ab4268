#!/usr/bin/env bash
# `ferry run`'s input and output on the simulator: an output that is the input refused, the
# output put in place only once verified (failures and signals leave nothing behind), pipes
# and devices that never block, --bytes as a limit on --input, failure records that cannot be
# written, and --trace checked before the run. Every wait is bounded.
. "$(dirname "$0")/lib.sh"

# start_run LOG CMD...: run CMD in the background (stdin from $RUN_STDIN or /dev/null, stdout
# and stderr into LOG), pid in $RUN_PID.
# A shell starts background commands with SIGINT ignored, which ferry respects: CMD gets it back.
start_run() {
  local log=$1
  shift
  python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$@" <"${RUN_STDIN:-/dev/null}" >"$log" 2>&1 &
  RUN_PID=$!
}

# finish_run SECONDS: wait for $RUN_PID at most SECONDS (then kill it: a failure); status in
# $RUN_RC, seconds waited in $RUN_WAITED
finish_run() {
  local limit=$1 t=0
  while kill -0 "$RUN_PID" 2>/dev/null && [ "$t" -lt $((limit * 10)) ]; do
    sleep 0.1
    t=$((t + 1))
  done
  if kill -0 "$RUN_PID" 2>/dev/null; then
    kill -KILL "$RUN_PID" 2>/dev/null
    bad "still running after ${limit}s"
  fi
  wait "$RUN_PID"
  RUN_RC=$?
  RUN_WAITED=$((t / 10))
}

# wait_for_tmp DIR NAME [-e]: until the run has written into its temporary .NAME.ferry-*
# (with -e: made it, which it does once it takes signals), at most 60 s; true when it did
wait_for_tmp() {
  local t=0 test=${3:--s}
  while [ "$t" -lt 600 ]; do
    for f in "$1"/."$2".ferry-*; do
      [ "$test" "$f" ] && return 0
    done
    # a ferry that writes in place
    [ "$test" = -e ] && [ -e "$1/$2" ] && return 0
    [ "$(stat -c %s "$1/$2" 2>/dev/null || echo 0)" -gt 3 ] && return 0
    kill -0 "$RUN_PID" 2>/dev/null || return 1
    sleep 0.1
    t=$((t + 1))
  done
  return 1
}

no_tmp_left() {
  if ls -A "$1" | grep -q '\.ferry-'; then bad "$2: a temporary file is left: $(ls -A "$1")"; else
    ok "$2: no temporary file left"; fi
}

head -c 3000001 /dev/urandom >"$TMP/in.bin"
cp "$TMP/in.bin" "$TMP/in.keep"

# ---- the output is the input: refused before anything is opened for writing
ln -s in.bin "$TMP/sym.bin"
ln "$TMP/in.bin" "$TMP/hard.bin"
for o in in.bin sym.bin hard.bin; do
  expect_rc "--output $o is the input" 2 "$FERRY" run --workload copy --input "$TMP/in.bin" --output "$TMP/$o"
  expect_in "--output $o: said" "$TMP/err" "is the same file as --input"
  if cmp -s "$TMP/in.bin" "$TMP/in.keep"; then ok "--output $o: input intact"; else
    bad "--output $o: the input was changed ($(stat -c %s "$TMP/in.bin") bytes)"; cp "$TMP/in.keep" "$TMP/in.bin"; fi
done
expect_rc "--output - is the input" 2 sh -c '"$0" run --workload copy --input "$1" --output - >>"$1"' "$FERRY" "$TMP/in.bin"
if cmp -s "$TMP/in.bin" "$TMP/in.keep"; then ok "--output -: input intact"; else bad "--output - changed the input"; fi

# ---- the output appears whole or not at all
mkdir "$TMP/o"
(umask 027 && "$FERRY" run --workload copy --input "$TMP/in.bin" --output "$TMP/o/new.bin" >"$TMP/out" 2>"$TMP/err")
if cmp -s "$TMP/in.bin" "$TMP/o/new.bin"; then ok "copy through a temporary file"; else bad "output differs"; fi
if [ "$(stat -c %a "$TMP/o/new.bin")" = 640 ]; then ok "created with 0644 less the umask"; else
  bad "mode $(stat -c %a "$TMP/o/new.bin"), expected 640"; fi
no_tmp_left "$TMP/o" "success"
# replacing an existing file through a symlink keeps the link and the file's mode
printf old >"$TMP/o/kept.bin"
chmod 600 "$TMP/o/kept.bin"
ln -s kept.bin "$TMP/o/link.bin"
expect_rc "output through a symlink" 0 "$FERRY" run --workload copy --input "$TMP/in.bin" --output "$TMP/o/link.bin"
if [ -L "$TMP/o/link.bin" ] && cmp -s "$TMP/in.bin" "$TMP/o/kept.bin" && [ "$(stat -c %a "$TMP/o/kept.bin")" = 600 ]; then
  ok "symlink kept, its file replaced, mode kept"; else bad "symlink or mode lost: $(ls -l "$TMP/o")"; fi

# A failed run (writes refused past 1 MiB: EFBIG, SIGXFSZ ignored) leaves the old file as it was.
printf old >"$TMP/o/fail.bin"
(trap '' XFSZ && ulimit -f 1024 && "$FERRY" run --workload copy --input "$TMP/in.bin" --output "$TMP/o/fail.bin" --batch-bytes 512K >"$TMP/out" 2>"$TMP/err")
rc=$?
if [ "$rc" -eq 1 ]; then ok "failed write: exit 1"; else bad "failed write: exit $rc, expected 1"; fi
expect_in "failed write: said" "$TMP/err" "File too large"
if [ "$(cat "$TMP/o/fail.bin")" = old ]; then ok "failed write: the old output is untouched"; else
  bad "failed write: the output was changed ($(stat -c %s "$TMP/o/fail.bin") bytes)"; fi
no_tmp_left "$TMP/o" "failed write"

# SIGINT and SIGTERM while the output is being written: stop within the grace period (10 s),
# say so, remove the partial output, leave an old file alone, exit 128 + the signal. Small
# batches and a short queue keep the work in flight to finish well inside the grace period,
# also in sanitizer builds (ten times slower).
for sig in INT TERM; do
  want=$([ $sig = INT ] && echo 130 || echo 143)
  d="$TMP/sig$sig"
  mkdir "$d"
  printf old >"$d/out.bin"
  start_run "$d/log" "$FERRY" run --bytes 2G --batch-bytes 1M --queue-depth 2 --output "$d/out.bin" --json
  if wait_for_tmp "$d" out.bin; then ok "SIG$sig: the run writes its temporary file"; else
    bad "SIG$sig: no temporary output appeared"; fi
  kill -$sig "$RUN_PID"
  finish_run 20
  if [ "$RUN_RC" -eq "$want" ]; then ok "SIG$sig: exit $want"; else bad "SIG$sig: exit $RUN_RC, expected $want"; sed 's/^/#   /' "$d/log" | head -5; fi
  if [ "$RUN_WAITED" -le 12 ]; then ok "SIG$sig: ended in ${RUN_WAITED}s"; else bad "SIG$sig: took ${RUN_WAITED}s"; fi
  grep '^{' "$d/log" >"$d/json"
  json_check "SIG$sig: json says interrupted" "$d/json" \
    "j['interrupted'] and j['signal'] == 'SIG$sig' and not j['ok'] and 0 < j['bytes_done'] < j['bytes'] and j['bytes_done'] == j['verified_bytes']"
  if [ "$(cat "$d/out.bin")" = old ]; then ok "SIG$sig: old output untouched"; else bad "SIG$sig: output replaced"; fi
  no_tmp_left "$d" "SIG$sig"
done
# on a terminal: the progress bar is cleared before the summary says the run was stopped
python3 - "$FERRY" >"$TMP/pty.log" 2>&1 <<'PY' && ok "terminal: bar cleared, then the summary" || { bad "terminal: bar not cleared before the summary"; tail -c 600 "$TMP/pty.log"; }
import os, pty, select, signal, sys, time
pid, fd = pty.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execv(sys.argv[1], [sys.argv[1], "run", "--bytes", "2G", "--batch-bytes", "1M", "--queue-depth", "2"])
buf, sent, end = b"", False, time.time() + 60
while time.time() < end:
    if select.select([fd], [], [], 0.1)[0]:
        try:
            d = os.read(fd, 65536)
        except OSError:
            break
        if not d:
            break
        buf += d
    if not sent and b"ferry run [" in buf:
        os.kill(pid, signal.SIGINT)
        sent = True
if time.time() >= end:
    os.kill(pid, signal.SIGKILL)
status = os.waitpid(pid, 0)[1]
tail = buf[buf.rfind(b"ferry run ["):]
print(repr(tail[-400:]))
clear, stop = tail.find(b"\r\x1b[K"), tail.find(b"stopped    by SIGINT")
sys.exit(0 if sent and os.WEXITSTATUS(status) == 130 and 0 <= clear < stop else 1)
PY

# a second signal: stop at once, the partial output removed all the same
d="$TMP/sig2"
mkdir "$d"
start_run "$d/log" "$FERRY" run --bytes 2G --batch-bytes 8M --output "$d/out.bin"
wait_for_tmp "$d" out.bin || bad "second signal: no temporary output appeared"
kill -INT "$RUN_PID"
kill -TERM "$RUN_PID"
finish_run 20
if [ "$RUN_RC" -eq 143 ]; then ok "second signal: exit 143"; else bad "second signal: exit $RUN_RC, expected 143"; fi
expect_in "second signal: said" "$d/log" "SIGTERM after SIGINT: stopped at once; the partial output was removed"
if [ ! -e "$d/out.bin" ]; then ok "second signal: no output"; else bad "second signal: output left"; fi
no_tmp_left "$d" "second signal"

# the text summary, and a run blocked reading a pipe that sends nothing
mkfifo "$TMP/idle"
sleep 60 >"$TMP/idle" &
writer=$!
RUN_STDIN="$TMP/idle" start_run "$TMP/siglog" "$FERRY" run --input - --output "$TMP/o/pipe.bin"
wait_for_tmp "$TMP/o" pipe.bin -e || bad "idle pipe: no temporary output appeared"
kill -INT "$RUN_PID"
finish_run 15
kill "$writer" 2>/dev/null
if [ "$RUN_RC" -eq 130 ]; then ok "SIGINT while reading an idle pipe: exit 130"; else bad "idle pipe: exit $RUN_RC"; fi
expect_in "text summary says stopped" "$TMP/siglog" "stopped    by SIGINT"
if [ ! -e "$TMP/o/pipe.bin" ]; then ok "idle pipe: no output"; else bad "idle pipe: output left"; fi
no_tmp_left "$TMP/o" "idle pipe"

# ---- pipes, devices, FIFOs
mkfifo "$TMP/fifo"
expect_rc "--input FIFO refused" 2 timeout 20 "$FERRY" run --input "$TMP/fifo"
expect_in "--input FIFO: said" "$TMP/err" "is a FIFO"
expect_in "--input FIFO: what is accepted" "$TMP/err" "or - for stdin"
expect_rc "--output FIFO refused" 2 timeout 20 "$FERRY" run --bytes 1M --output "$TMP/fifo"
expect_in "--output FIFO: said" "$TMP/err" "is a FIFO"
expect_rc "--input directory refused" 2 "$FERRY" run --input "$TMP"
expect_in "--input directory: said" "$TMP/err" "is a directory"
expect_rc "--output directory refused" 2 "$FERRY" run --bytes 1M --output "$TMP"
expect_in "--output directory: said" "$TMP/err" "is a directory"
expect_rc "--output /dev/null" 0 timeout 60 "$FERRY" run --bytes 8M --output /dev/null --json
json_check "/dev/null: verified" "$TMP/out" "j['ok'] and j['verified_bytes'] == 8 << 20"
expect_rc "--input /dev/zero with --bytes" 0 timeout 60 "$FERRY" run --input /dev/zero --bytes 5000001 --json
json_check "/dev/zero: 5000001 bytes" "$TMP/out" "j['ok'] and j['bytes'] == 5000001 and j['verified_bytes'] == 5000001"

# stdin to stdout: the data alone on stdout (the summary on stderr), in order across batches
expect_rc "stdin to stdout" 0 sh -c '"$0" run --workload copy --input - --output - --batch-bytes 256K <"$1"' "$FERRY" "$TMP/in.bin"
if cmp -s "$TMP/out" "$TMP/in.bin"; then ok "stdout carries the data alone, in order"; else bad "stdout differs from the input"; fi
expect_in "summary on stderr" "$TMP/err" "verify     OK"
expect_rc "stdin to stdout, scale, json" 0 sh -c '"$0" run --workload scale --input - --output - --batch-bytes 100000 --json <"$1"' "$FERRY" "$TMP/in.bin"
mv "$TMP/out" "$TMP/scaled.bin"
json_check "json on stderr" "$TMP/err" "j['ok'] and j['bytes'] == 3000001 and j['batches'] == 31"
expect_rc "the same through a file" 0 "$FERRY" run --workload scale --input "$TMP/in.bin" --output "$TMP/scaled2.bin" --batch-bytes 100000
if cmp -s "$TMP/scaled.bin" "$TMP/scaled2.bin"; then ok "stdout equals the file output"; else bad "stdout and file outputs differ"; fi
# a reader that goes away: an error, not a hang
start_run "$TMP/epipe" bash -c '"$0" run --input /dev/zero --output - --batch-bytes 1M | head -c 1000 >/dev/null; exit ${PIPESTATUS[0]}' "$FERRY"
finish_run 60
if [ "$RUN_RC" -eq 1 ]; then ok "reader gone: exit 1"; else bad "reader gone: exit $RUN_RC, expected 1"; fi
expect_in "reader gone: said" "$TMP/epipe" "writing --output -: Broken pipe"

# ---- --bytes limits --input (as dd's count)
expect_rc "--input with --bytes" 0 "$FERRY" run --workload copy --input "$TMP/in.bin" --bytes 1M --output "$TMP/head.bin" --json
json_check "--bytes 1M of the input" "$TMP/out" "j['ok'] and j['bytes'] == 1 << 20"
head -c 1M "$TMP/in.bin" >"$TMP/head.want"
if cmp -s "$TMP/head.bin" "$TMP/head.want"; then ok "the first 1 MiB written"; else bad "--bytes output wrong ($(stat -c %s "$TMP/head.bin") bytes)"; fi
expect_rc "--bytes above the file's size" 0 "$FERRY" run --input "$TMP/in.bin" --bytes 1G --json
json_check "the whole file" "$TMP/out" "j['ok'] and j['bytes'] == 3000001"
expect_rc "--bytes from stdin" 0 sh -c '"$0" run --input - --bytes 100000 --json <"$1"' "$FERRY" "$TMP/in.bin"
json_check "100000 bytes of stdin" "$TMP/out" "j['ok'] and j['bytes'] == 100000"
expect_rc "--bytes 0 with --input" 2 "$FERRY" run --input "$TMP/in.bin" --bytes 0

# ---- failure records that cannot be written
expect_rc "--failure-log /dev/full" 1 "$FERRY" run --bytes 64M --inject kernel@batch=0 --gpu-retries 0 --failure-log /dev/full --json
expect_in "/dev/full: warned" "$TMP/err" "/dev/full"
expect_in "/dev/full: counted" "$TMP/err" "could not be written"
json_check "/dev/full: records lost" "$TMP/out" "j['failure_log_errors'] > 0 and j['failure_records'] > 0"
expect_rc "--failure-log to a file" 0 "$FERRY" run --bytes 64M --inject kernel@batch=0 --gpu-retries 0 --failure-log "$TMP/f.jsonl" --json
json_check "a file: no record lost" "$TMP/out" "j['failure_log_errors'] == 0 and j['failure_records'] > 0"
if [ -s "$TMP/f.jsonl" ]; then ok "records written"; else bad "no record in the file"; fi

# ---- --trace checked before the run, as --report is
expect_rc "--trace in a missing directory" 2 "$FERRY" run --bytes 64M --trace "$TMP/nodir/t.json"
expect_in "--trace: said" "$TMP/err" "--trace '$TMP/nodir/t.json': directory '$TMP/nodir' does not exist"
if [ ! -s "$TMP/out" ]; then ok "--trace: refused before running"; else bad "--trace: ran first"; fi
finish
