#!/usr/bin/env bash
# `ferry exec`: the connections variables reach the command, its exit status and signals come
# back, bad values and rules are usage errors, and --per-device on a two-device simulator starts
# one child per device with its own values, exits with the worst status and passes signals on.
. "$(dirname "$0")/lib.sh"

# The children's CUDA_VISIBLE_DEVICES is the parent's k-th entry when the parent sets one: start
# from none, as on a machine without a scheduler.
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_MAX_CONNECTIONS CUDA_DEVICE_MAX_COPY_CONNECTIONS

# ---- one value for the whole process ----
expect_rc "exec --help" 0 "$FERRY" exec --help
expect_in "help shows --per-device" "$TMP/out" "--per-device"
expect_rc "help lists exec" 0 "$FERRY" --help
expect_in "exec in the command list" "$TMP/out" "exec"

expect_rc "connections set" 0 "$FERRY" exec --connections 16 -- sh -c 'echo $CUDA_DEVICE_MAX_CONNECTIONS'
expect_in "child sees 16" "$TMP/out" "16"
expect_rc "copy connections set" 0 "$FERRY" exec --connections=2 --copy-connections 5 -- \
  sh -c 'echo "c=$CUDA_DEVICE_MAX_CONNECTIONS k=$CUDA_DEVICE_MAX_COPY_CONNECTIONS"'
expect_in "child sees both" "$TMP/out" "c=2 k=5"
expect_rc "exit status passed through" 7 "$FERRY" exec --connections 8 -- sh -c 'exit 7'
expect_rc "killed by SIGTERM: 128+15" 143 "$FERRY" exec --connections 4 -- sh -c 'kill -TERM $$'
expect_rc "missing command" 127 "$FERRY" exec --connections 4 -- "$TMP/no-such-command"
expect_in "missing command named" "$TMP/err" "cannot run '$TMP/no-such-command'"
: >"$TMP/not-executable"
expect_rc "command not executable" 126 "$FERRY" exec --connections 4 -- "$TMP/not-executable"

for v in 0 33 abc 8x '' ' 8' -1 08; do
  expect_rc "--connections '$v'" 2 "$FERRY" exec --connections "$v" -- true
  expect_in "--connections '$v': range named" "$TMP/err" "1..32"
done
expect_rc "--copy-connections 64" 2 "$FERRY" exec --connections 8 --copy-connections 64 -- true
expect_in "--copy-connections named" "$TMP/err" "--copy-connections"

expect_rc "neither mode" 2 "$FERRY" exec -- true
expect_in "neither: both flags named" "$TMP/err" "--connections N and --per-device RULES"
expect_rc "both modes" 2 "$FERRY" exec --connections 8 --per-device '*=8' -- true
expect_in "both: both flags named" "$TMP/err" "--connections N and --per-device RULES"
expect_rc "no --" 2 "$FERRY" exec --connections 8 true
expect_in "no --: says so" "$TMP/err" "'--'"
expect_rc "no command after --" 2 "$FERRY" exec --connections 8 --
expect_rc "no -- and no command" 2 "$FERRY" exec --connections 8
expect_rc "unknown flag" 2 "$FERRY" exec --frobnicate -- true
expect_in "unknown flag named" "$TMP/err" "--frobnicate"
expect_rc "missing value" 2 "$FERRY" exec --connections
expect_rc "bad --backend" 2 "$FERRY" exec --per-device '*=8' --backend gpu -- true
expect_in "backends listed" "$TMP/err" "auto|sim|cuda"

# ---- one child per device, on a simulated machine with two H200s ----
python3 - "${FERRY_PROFILE:-$(dirname "$0")/../../profiles/h200.json}" "$TMP/two.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["devices"] = 2
json.dump(p, open(sys.argv[2], "w"), indent=2)
EOF
export FERRY_PROFILE="$TMP/two.json"
px() { "$FERRY" exec --backend sim "$@"; }

expect_rc "per-device values" 0 px --per-device 'index:1=4,*=16' --copy-connections 3 -- \
  sh -c 'echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_MAX_CONNECTIONS $CUDA_DEVICE_MAX_COPY_CONNECTIONS $FERRY_DEVICE_INDEX" >>"$0"' "$TMP/seen"
sed 's/^/#   /' "$TMP/err"
printf '0 16 3 0\n1 4 3 1\n' >"$TMP/want"
if sort "$TMP/seen" | cmp -s - "$TMP/want"; then ok "device 0 got 16, device 1 got 4"; else
  bad "per-device environments"; sed 's/^/#   /' "$TMP/seen"; fi
expect_in "child line, device 0" "$TMP/err" "device 0 (NVIDIA H200 (simulated)): CUDA_DEVICE_MAX_CONNECTIONS=16, pid "
expect_in "child line, device 1" "$TMP/err" "device 1 (NVIDIA H200 (simulated)): CUDA_DEVICE_MAX_CONNECTIONS=4, pid "

rm -f "$TMP/seen"
expect_rc "name and cc rules" 0 px --per-device 'cc>=9.1=2,name:h200 (SIM=9,*=1' -- \
  sh -c 'echo "$CUDA_DEVICE_MAX_CONNECTIONS" >>"$0"' "$TMP/seen"
if [ "$(sort -u "$TMP/seen")" = 9 ]; then ok "name match, case-insensitive"; else bad "name match: $(cat "$TMP/seen")"; fi

# A scheduler's CUDA_VISIBLE_DEVICES=5,7: ferry's device k is the k-th GPU of that list.
rm -f "$TMP/seen"
expect_rc "parent CUDA_VISIBLE_DEVICES mapped" 0 env CUDA_VISIBLE_DEVICES=5,7 "$FERRY" exec \
  --backend sim --per-device '*=8' -- sh -c 'echo "$FERRY_DEVICE_INDEX $CUDA_VISIBLE_DEVICES" >>"$0"' "$TMP/seen"
if [ "$(sort "$TMP/seen" | tr '\n' ' ')" = "0 5 1 7 " ]; then ok "device k gets entry k"; else
  bad "visible devices: $(cat "$TMP/seen")"; fi
expect_rc "parent CUDA_VISIBLE_DEVICES too short" 1 env CUDA_VISIBLE_DEVICES=5 "$FERRY" exec \
  --backend sim --per-device '*=8' -- true
expect_in "short list named" "$TMP/err" "CUDA_VISIBLE_DEVICES='5'"

expect_rc "worst exit status" 4 px --per-device '*=8' -- sh -c 'exit $((CUDA_VISIBLE_DEVICES + 3))'
expect_in "device 0 reported" "$TMP/err" "device 0 exited 3"
expect_in "device 1 reported" "$TMP/err" "device 1 exited 4"
expect_rc "a child killed by a signal" 137 px --per-device '*=8' -- \
  sh -c '[ "$CUDA_VISIBLE_DEVICES" = 1 ] && kill -KILL $$; exit 0'
expect_in "signal named" "$TMP/err" "device 1 killed by signal SIGKILL"
expect_rc "per-device missing command" 127 px --per-device '*=8' -- "$TMP/no-such-command"

expect_rc "no rule matches" 2 px --per-device 'index:5=4' -- true
expect_in "unmatched device named" "$TMP/err" "no --per-device rule matches device 0 (NVIDIA H200 (simulated), cc 9.0)"
for r in foo 'cc>=x=4' 'index:1' '=4' 'index:1=4,' 'cc:9=4' 'name:=4' 'index:x=4'; do
  expect_rc "malformed rule '$r'" 2 px --per-device "$r" -- true
  expect_in "malformed rule '$r': syntax shown" "$TMP/err" "index:K, name:TEXT, cc:X.Y, cc>=X.Y"
done
expect_rc "rule value out of range" 2 px --per-device 'index:0=33,*=8' -- true
expect_in "rule value: range named" "$TMP/err" "1..32"

# Signals: SIGTERM to ferry reaches both children, which trap it and exit 42. The children stop
# on their own when $TMP/stop appears, so a failing test leaves nothing running.
# (ferry itself, not the px function, goes to the background: $! must be ferry's pid.)
"$FERRY" exec --backend sim --per-device '*=8' -- sh -c 'trap "exit 42" TERM; touch "$0/ready.$CUDA_VISIBLE_DEVICES"
  while [ ! -e "$0/stop" ] && [ -d "$0" ]; do sleep 0.1; done; exit 1' "$TMP" 2>"$TMP/sigerr" &
pid=$!
for _ in $(seq 200); do
  [ -e "$TMP/ready.0" ] && [ -e "$TMP/ready.1" ] && break
  sleep 0.05
done
if [ -e "$TMP/ready.0" ] && [ -e "$TMP/ready.1" ]; then ok "both children running"; else bad "children not ready"; fi
kill -TERM "$pid"
# A watchdog, so that the test never hangs: after 20 s the children are told to stop and ferry
# is killed.
(for _ in $(seq 200); do sleep 0.1; [ -e "$TMP/done" ] && exit 0; done
  touch "$TMP/stop"; sleep 2; kill -KILL "$pid") >/dev/null 2>&1 &
watchdog=$!
wait "$pid"
got=$?
touch "$TMP/done"
wait "$watchdog"
if [ "$got" -eq 42 ]; then ok "SIGTERM forwarded (exit 42)"; else
  bad "SIGTERM forwarded: exit $got, expected 42"; sed 's/^/#   /' "$TMP/sigerr"; fi
touch "$TMP/stop"

# SIGKILL cannot be passed on, yet the children must die with ferry. They write their pids and
# wait for $TMP/stop, which the test creates in the end, so a failing test leaves nothing
# running for long.
rm -f "$TMP"/ready.* "$TMP/stop"
"$FERRY" exec --backend sim --per-device '*=8' -- sh -c 'echo $$ >"$0/pid.$CUDA_VISIBLE_DEVICES"
  mv "$0/pid.$CUDA_VISIBLE_DEVICES" "$0/ready.$CUDA_VISIBLE_DEVICES"
  while [ ! -e "$0/stop" ] && [ -d "$0" ]; do sleep 0.1; done' "$TMP" 2>"$TMP/killerr" &
pid=$!
for _ in $(seq 200); do
  [ -e "$TMP/ready.0" ] && [ -e "$TMP/ready.1" ] && break
  sleep 0.05
done
if [ -e "$TMP/ready.0" ] && [ -e "$TMP/ready.1" ]; then ok "SIGKILL: both children running"; else
  bad "SIGKILL: children not ready"; sed 's/^/#   /' "$TMP/killerr"; fi
kids="$(cat "$TMP/ready.0" "$TMP/ready.1" 2>/dev/null)"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
# alive PID: the process exists and is not a zombie (nobody may reap the orphans here).
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/^.*) //' "/proc/$1/stat" | cut -c1)" != Z ]; }
left=""
for _ in $(seq 100); do
  left=""
  for k in $kids; do alive "$k" && left="$left $k"; done
  [ -z "$left" ] && break
  sleep 0.05
done
if [ -n "$kids" ] && [ -z "$left" ]; then ok "SIGKILL: the children died with ferry"; else
  bad "SIGKILL: children still running:${left:- (none started)}"; fi
touch "$TMP/stop"
finish
