#!/usr/bin/env bash
# Issue 18, the GPU taking the CPU device's queue, in one device call: this tree built with the
# CUDA backend; gpu.set_steal (a CPU that falls behind its plan: the GPU takes its queued
# chunks, every batch bit-exact); then ROUNDS (default 3) interleaved rounds of `ferry run
# --workload scale --bytes BYTES` (default 16G) as a pipeline of one device, as `--devices 0`
# and as `--devices 0,cpu`, a first run each (no saved model). Writes $OUT/steal.log and
# $OUT/runs.jsonl; prints a table.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
rounds=${ROUNDS:-3}
bytes=${BYTES:-16G}
build_gpu gpu_test_set_steal
build-gpu/tests/gpu_test_set_steal >$OUT/steal.log 2>&1
echo "gpu.set_steal: rc $?"
grep -E "GPU|OK|FAIL|ERROR" $OUT/steal.log
js() { python3 -c "import json,sys; j=json.load(sys.stdin); j.update($1); print(json.dumps(j))"; }
for r in $(seq 1 "$rounds"); do
  for how in one set0 set0cpu; do
    case $how in
      one) dv="" ;;
      set0) dv="--devices 0" ;;
      set0cpu) dv="--devices 0,cpu" ;;
    esac
    # shellcheck disable=SC2086
    build-gpu/ferry run --backend cuda --workload scale --bytes "$bytes" $dv --json 2>>$OUT/runs.err |
      js "{'how':'$how','round':$r}" >>$OUT/runs.jsonl
  done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
base = st.median(r['gbps_h2d'] for r in rows if r['how'] == 'one')
for how in ('one', 'set0', 'set0cpu'):
    v = [r for r in rows if r['how'] == how]
    g = [r['gbps_h2d'] for r in v]
    print('scale %-8s transport %s median %6.2f (x%.3f of one) end-to-end %6.2f ok %s' % (
        how, ' / '.join('%.2f' % x for x in g), st.median(g), st.median(g) / base,
        st.median(r['end_to_end_gbps'] for r in v), all(r['ok'] for r in v)))
    for r in v:
        for d in r.get('devices', []):
            if d.get('index') == -1 or d.get('bytes_stolen'):
                print('      %s: share %.3f stolen %s %s' % (
                    'cpu' if d['index'] == -1 else 'gpu', d['share'], d.get('bytes_stolen'),
                    d.get('note') or ''))
PY
