#!/usr/bin/env bash
# `ferry probe` and `ferry options`: text and JSON, the simulator's profile, and the reason a
# backend is unavailable.
. "$(dirname "$0")/lib.sh"

expect_rc "probe" 0 "$FERRY" probe
expect_in "probe shows the sim backend" "$TMP/out" "backend sim: available"
expect_in "probe shows SMs" "$TMP/out" "132 SMs"
expect_in "probe shows the link" "$TMP/out" "Gen5 x16"
expect_in "probe shows priorities" "$TMP/out" "0 (least) .. -5 (greatest)"
expect_in "probe shows the profile" "$TMP/out" "h200.json"
if "$FERRY" probe --backend cuda >/dev/null 2>&1; then gpu=1; else gpu=0; fi
if [ $gpu = 0 ]; then
  expect_in "probe explains cuda" "$TMP/out" "backend cuda: unavailable"
fi

expect_rc "probe --json" 0 "$FERRY" probe --json
json_check "json: sim device" "$TMP/out" \
  "[b for b in j['backends'] if b['name'] == 'sim'][0]['devices'][0]['sms'] == 132"
json_check "json: sim props" "$TMP/out" \
  "(lambda d: d['simulated'] and d['copy_engines'] == 3 and d['cc'] == '9.0' and abs(d['link_gbps'] - 63) < 0.5 and d['priority_greatest'] == -5)([b for b in j['backends'] if b['name'] == 'sim'][0]['devices'][0])"
if [ $gpu = 0 ]; then
  json_check "json: cuda has a reason" "$TMP/out" \
    "(lambda c: not c['available'] and len(c['reason']) > 5)([b for b in j['backends'] if b['name'] == 'cuda'][0])"
else
  json_check "json: cuda device listed" "$TMP/out" \
    "(lambda c: c['available'] and c['devices'][0]['sms'] > 0)([b for b in j['backends'] if b['name'] == 'cuda'][0])"
fi

expect_rc "probe shows the environment" 0 env CUDA_DEVICE_MAX_CONNECTIONS=abc "$FERRY" probe --backend sim
expect_in "connections variable listed" "$TMP/out" "CUDA_DEVICE_MAX_CONNECTIONS"
expect_in "invalid value explained" "$TMP/out" "treats it as unset"
expect_rc "probe environment json" 0 env CUDA_DEVICE_MAX_CONNECTIONS=16 "$FERRY" probe --backend sim --json
json_check "environment in json" "$TMP/out" "j['environment']['CUDA_DEVICE_MAX_CONNECTIONS'] == '16' and j['environment']['CUDA_LAUNCH_BLOCKING'] is None"
expect_rc "probe only sim" 0 "$FERRY" probe --backend sim --json
json_check "only sim listed" "$TMP/out" "[b['name'] for b in j['backends']] == ['sim']"
if [ $gpu = 0 ]; then
  expect_rc "probe only cuda, no GPU" 1 "$FERRY" probe --backend cuda
  expect_in "no usable device said, on stderr" "$TMP/err" "ferry probe: no usable device"
fi

# calibrating the simulator gives back its own profile
expect_rc "probe --calibrate" 0 "$FERRY" probe --calibrate -o "$TMP/cal.json" --backend sim --json
json_check "calibration: 1 MiB H2D near 43.2" "$TMP/out" "abs([c for c in j['copy'] if c['bytes'] == 2**20][0]['h2d_gbps'] / 43.2 - 1) < 0.01"
json_check "calibration: host costs of the profile" "$TMP/out" "j['copy_submit_ns'] == 2500 and j['launch_ns'] == 4600 and j['event_record_ns'] == 1500"
json_check "calibration: shared link" "$TMP/out" "abs(j['bidirectional_factor'] - 0.87) < 0.01"
json_check "calibrated profile is valid JSON with a name" "$TMP/cal.json" "'calibrated' in j['name'] and j['format'] == 'ferry-profile-1'"
json_check "calibration: small pieces each way, no copy kernel in the profile" "$TMP/out" \
  "[p['bytes'] for p in j['pieces']] == [4096, 16384, 65536] and j['piece_kernel_max'] == 0 and all(p['engines_gbps'] == p['kernel_gbps'] > 0 for p in j['pieces'])"
json_check "calibrated profile: piece_kernel_max 0" "$TMP/cal.json" "j['copy']['piece_kernel_max'] == 0"
# a profile whose copy kernel beats the engines up to 16 KiB: calibration finds 16 KiB again
python3 - "${FERRY_PROFILE:-$(dirname "$0")/../../profiles/h200.json}" "$TMP/pk.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j['copy']['piece_kernel_max'] = 16384
json.dump(j, open(sys.argv[2], 'w'))
PY
expect_rc "probe --calibrate, copy kernel to 16 KiB" 0 "$FERRY" probe --calibrate -o "$TMP/cal2.json" --backend sim --profile "$TMP/pk.json" --json
json_check "calibration: the kernel faster at 4 and 16 KiB, not at 64" "$TMP/out" \
  "j['piece_kernel_max'] == 16384 and [p['kernel_gbps'] > p['engines_gbps'] for p in j['pieces']] == [True, True, False]"
json_check "calibrated profile: piece_kernel_max 16384" "$TMP/cal2.json" "j['copy']['piece_kernel_max'] == 16384"
expect_rc "probe --calibrate, text" 0 "$FERRY" probe --calibrate -o "$TMP/cal3.json" --backend sim --profile "$TMP/pk.json"
expect_in "text: the copy kernel's reach" "$TMP/out" "copy kernel          pieces up to 16384 bytes"
expect_rc "run on the calibrated profile" 0 "$FERRY" run --backend sim --profile "$TMP/cal.json" --bytes 64M
expect_in "calibrated profile in use" "$TMP/out" "calibrated"
expect_rc "--calibrate without -o" 2 "$FERRY" probe --calibrate
expect_in "says what is missing" "$TMP/err" "-o FILE"
expect_rc "--calibrate to an unwritable path" 1 "$FERRY" probe --calibrate -o "$TMP/no/dir/x.json" --backend sim
expect_in "path named" "$TMP/err" "no/dir/x.json"
expect_in "before calibrating: the directory named" "$TMP/err" "its directory"

expect_rc "options" 0 "$FERRY" options
expect_in "options lists chunk_bytes" "$TMP/out" "FERRY_CHUNK_BYTES"
expect_rc "options --json" 0 "$FERRY" options --json
json_check "options json" "$TMP/out" "any(o['name'] == 'depth' and o['accepted'] == '1..64' and o['flag'] == '--depth' for o in j['options'])"
expect_rc "options --markdown" 0 "$FERRY" options --markdown
expect_in "markdown table" "$TMP/out" "| \`depth\` | \`--depth\` | \`FERRY_DEPTH\` |"
finish
