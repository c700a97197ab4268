#!/usr/bin/env bash
# Issue 18, the CPU guard's verdict kept with the perf model, on one GPU in one device call:
# this tree built with the CUDA backend, then ROUNDS rounds (default 4) of `ferry run --workload
# scale --bytes 16G` as `--devices 0`, as `--devices 0,cpu --perf-model F` with F new (the trial
# runs and writes its verdict) and once more with F (the run starts decided), interleaved.
# Writes $OUT/runs.jsonl; prints a table.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
rounds=${ROUNDS:-4}
build_gpu
js() { python3 -c "import json,sys; j=json.load(sys.stdin); j.update($1); print(json.dumps(j))"; }
for r in $(seq 1 "$rounds"); do
  pm=$OUT/pm$r.json
  rm -f "$pm"
  for how in set0 fresh saved; do
    case $how in
      set0) dv="--devices 0" ;;
      *) dv="--devices 0,cpu --perf-model $pm" ;;
    esac
    # shellcheck disable=SC2086
    build-gpu/ferry run --backend cuda --workload scale --bytes 16G $dv --json 2>>$OUT/runs.err |
      js "{'how':'$how','round':$r}" >>$OUT/runs.jsonl
  done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
base = st.median(r['gbps_h2d'] for r in rows if r['how'] == 'set0')
for how in ('set0', 'fresh', 'saved'):
    v = [r for r in rows if r['how'] == how]
    g = st.median(r['gbps_h2d'] for r in v)
    print('%-6s transport %s median %6.2f (x%.3f of --devices 0) ok %s' % (
        how, ' / '.join('%.2f' % r['gbps_h2d'] for r in v), g, g / base, all(r['ok'] for r in v)))
    for r in v:
        for d in r.get('devices', []):
            if d.get('index') == -1:
                print('      cpu: %s' % (d.get('note') or '-'))
PY
