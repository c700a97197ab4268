#!/usr/bin/env bash
# Every command's --json output opens with the command, ferry's version and the UTC time it was
# printed (one helper writes them: json_command_begin in tools/ferry/json.c).
. "$(dirname "$0")/lib.sh"
unset CUDA_DEVICE_MAX_CONNECTIONS CUDA_DEVICE_MAX_COPY_CONNECTIONS FERRY_CONNECTIONS
version=$("$FERRY" --version | sed 's/^ferry //')
start=$(date -u +%s)

header() { # NAME COMMAND-FIELD RC ARGS...
  local name=$1 cmd=$2 want=$3
  shift 3
  expect_rc "$name" "$want" "$FERRY" "$@"
  json_check "$name: command" "$TMP/out" "j['command'] == '$cmd'"
  json_check "$name: ferry_version" "$TMP/out" "j['ferry_version'] == '$version'"
  json_check "$name: time_utc is ISO 8601 UTC, now" "$TMP/out" \
    "__import__('re').fullmatch(r'\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ', j['time_utc']) and \
     abs(__import__('calendar').timegm(__import__('time').strptime(j['time_utc'], '%Y-%m-%dT%H:%M:%SZ')) - $start) < 600"
}
header "run" run 0 run --backend sim --bytes 16M --json
header "probe" probe 0 probe --backend sim --json
header "probe --calibrate" probe 0 probe --backend sim --calibrate -o "$TMP/cal.json" --json
header "options" options 0 options --json
json_check "options: the table under 'options'" "$TMP/out" "any(o['name'] == 'depth' for o in j['options'])"
header "bench copy" "bench copy" 0 bench copy --backend sim --sizes 4K --reps 2 --no-pageable --json
header "bench pipeline" "bench pipeline" 0 bench pipeline --backend sim --bytes 16M --chunks 4M --streams 1 --intensity 0 --json
header "connections" connections 0 connections --json
header "connections --recommend" connections 0 connections --recommend --streams 4 --json
header "connections --measure" connections 0 connections --measure --backend sim --values 8 --streams 8 --reps 1 --json
header "env" env 0 env --connections 8 --format sh --json
finish
