#!/usr/bin/env bash
# Issue 18 on one GPU in one device call: this tree built with the CUDA backend, then `ferry run
# --bytes BYTES` (default 16G) as a pipeline of one device, as a set of that device alone
# (--devices 0) and with the CPU beside it (--devices 0,cpu), ROUNDS rounds interleaved (default
# 3), for the scale workload and a compute-heavy one (fma, intensity 64). Writes
# $OUT/runs.jsonl; prints a table.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
rounds=${ROUNDS:-3}
bytes=${BYTES:-16G}
build_gpu
js() { python3 -c "import json,sys; j=json.load(sys.stdin); j.update($1); print(json.dumps(j))"; }
for r in $(seq 1 "$rounds"); do
  for wl in "scale" "fma --intensity 64"; do
    for how in one set0 set0cpu; do
      case $how in
        one) dv="" ;;
        set0) dv="--devices 0" ;;
        set0cpu) dv="--devices 0,cpu" ;;
      esac
      # shellcheck disable=SC2086
      build-gpu/ferry run --backend cuda --workload $wl --bytes "$bytes" $dv --json 2>>$OUT/runs.err |
        js "{'how':'$how','wl':'${wl%% *}','round':$r}" >>$OUT/runs.jsonl
    done
  done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for wl in ('scale', 'fma'):
    base = [r['gbps_h2d'] for r in rows if r['wl'] == wl and r['how'] == 'one']
    for how in ('one', 'set0', 'set0cpu'):
        v = [r for r in rows if r['wl'] == wl and r['how'] == how]
        if not v:
            continue
        g = st.median(r['gbps_h2d'] for r in v)
        e = st.median(r['end_to_end_gbps'] for r in v)
        cpu = [d for r in v for d in r.get('devices', []) if d.get('index') == -1]
        print('%-5s %-8s transport %6.2f end-to-end %6.2f (x%.3f of one) ok %s%s' % (
            wl, how, g, e, g / st.median(base) if base else 0, all(r['ok'] for r in v),
            ' cpu share %.3f' % st.median(d['share'] for d in cpu) if cpu else ''))
        for d in cpu:  # the guard's decision (src/pipeline/set_guard.c), one line a run
            print('      cpu: %s' % (d.get('note') or 'no decision'))
PY
