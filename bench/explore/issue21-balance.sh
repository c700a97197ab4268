#!/usr/bin/env bash
# Issue 21's balance target on the simulator, in real time: ranks on simulated devices paced by
# option sim_pace (PACE, default 200: a device 200x slower in real time than modelled, so that
# the host's own work is small beside it), one of them on the A100 PCIe profile (a link half the
# H200's). Per round: each profile alone (one rank), then the job over one A100 rank and
# FAST (default 1) H200 ranks; the ideal split is bytes / (the sum of the rates alone), the job's
# time the slowest rank's (from the start barrier to its last write). Target: <= 1.10 of the
# ideal. With SLOW=0 no rank is an A100: the job over FAST H200 ranks against FAST x one alone
# (the issue's scaling target, >= 0.9, here in real time). Writes $OUT/balance.jsonl (a line per
# job) and prints a table last.
# Usage: OUT=dir [ROUNDS=5 PACE=200 FAST=1 SLOW=1 MIB=256 STRIPE=8M] bench/explore/issue21-balance.sh BUILD
set -u
build=${1:?usage: $0 BUILD_DIR}
out=${OUT:?set OUT}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export FERRY_BACKEND=sim FERRY_SIM_PACE=${PACE:-200}
a100=$(dirname "$0")/../../profiles/a100-pcie.json
in=$out/in.bin
head -c $((${MIB:-256} << 20)) /dev/urandom >"$in"
run() { # NAME MPIRUN-ARGS...: one job, its JSON summary as a line of balance.jsonl
  local name=$1
  shift
  mpirun --oversubscribe "$@" 2>>"$out/err" | python3 -c "import json,sys; j=json.load(sys.stdin); j['name']='$name'; print(json.dumps(j))" >>"$out/balance.jsonl"
}
f=(--input "$in" --output "$out/o.bin" --stripe-bytes "${STRIPE:-8M}" --json)
: >"$out/balance.jsonl"
for r in $(seq 1 "${ROUNDS:-5}"); do
  if [ "${SLOW:-1}" = 0 ]; then
    run h200 -n 1 "$build/ferry" run "${f[@]}"
    run job -n "${FAST:-1}" "$build/ferry" run "${f[@]}"
    continue
  fi
  run a100 -n 1 "$build/ferry" run --profile "$a100" "${f[@]}"
  run h200 -n 1 "$build/ferry" run "${f[@]}"
  run job -n 1 "$build/ferry" run --profile "$a100" "${f[@]}" : -n "${FAST:-1}" "$build/ferry" run "${f[@]}"
done
rm -f "$in" "$out/o.bin" "$out"/o.bin.journal.*
python3 - "$out/balance.jsonl" "${FAST:-1}" "${SLOW:-1}" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
fast = int(sys.argv[2])
if sys.argv[3] == '0':
    ratios = []
    for i in range(0, len(rows) - 1, 2):
        h, j = rows[i:i + 2]
        ratios.append(j['gbps'] / (fast * h['gbps']))
        print('one H200 rank %.3f GB/s; %d ranks %.3f GB/s in %.3f s: %.3f of %dx; stripes %s' % (
            h['gbps'], fast, j['gbps'], j['seconds'], ratios[-1], fast, [r['stripes'] for r in j['per_rank']]))
    m = st.median(ratios)
    print('median %.3f of %dx one rank over %d rounds: target (>= 0.9) %s' % (
        m, fast, len(ratios), 'met' if m >= 0.9 else 'NOT met'))
    sys.exit(0)
ratios = []
for i in range(0, len(rows) - 2, 3):
    a, h, j = rows[i:i + 3]
    ideal = j['bytes'] / 1e9 / (a['gbps'] + fast * h['gbps'])
    ratios.append(j['seconds'] / ideal)
    print('alone: A100 %.3f GB/s, H200 %.3f GB/s; job %.3f s, ideal %.3f s: %.3f; stripes %s' % (
        a['gbps'], h['gbps'], j['seconds'], ideal, ratios[-1], [r['stripes'] for r in j['per_rank']]))
m = st.median(ratios)
print('median %.3f of the ideal split (max %.3f) over %d rounds: target (<= 1.10) %s' % (
    m, max(ratios), len(ratios), 'met' if m <= 1.10 else 'NOT met'))
PY
