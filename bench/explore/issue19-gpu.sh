#!/usr/bin/env bash
# Issue 19 on one GPU in one device call: this tree built with the CUDA backend; then ROUNDS
# (default 3) interleaved rounds of `ferry run --workload scale --bytes BYTES` (default 16G) at
# 8 MiB and 1 MiB chunks, in one process (--isolation thread) and in a worker process
# (--isolation process); then one process-mode run whose worker is killed (SIGKILL) 2 s in, to
# read the recovery time (worker_recovery_ms) from its --json. Writes $OUT/runs.jsonl; prints a
# table. First gpu.process ROUNDS times (a sticky fault and a SIGKILL mid-stream, recovery
# figures). `ferry run`'s buffers come from ferry_host_alloc, which isolation=process makes
# shared memory: the worker reads and writes them in place (docs/architecture.md, "Worker
# processes"); the rounds say what the process boundary costs on a GPU.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
rounds=${ROUNDS:-3}
bytes=${BYTES:-16G}
build_gpu gpu_test_process
# gpu.process: an illegal-address kernel in the worker, and the worker killed, mid-stream (each
# in a child of its own): correctness checked, recovery figures printed as RESULT lines
for k in $(seq 1 "$rounds"); do
  build-gpu/tests/gpu_test_process >>$OUT/gpu_process.log 2>&1
  echo "gpu.process run $k: rc $?"
done
grep -E "^# (fault|kill|connections|child)|RESULT" $OUT/gpu_process.log | sed 's/^RESULT //' | tail -24
js() { python3 -c "import json,sys; j=json.load(sys.stdin); j.update($1); print(json.dumps(j))"; }
for r in $(seq 1 "$rounds"); do
  for chunk in 8M 1M; do
    for iso in thread process; do
      build-gpu/ferry run --backend cuda --workload scale --bytes "$bytes" --chunk-bytes $chunk \
        --isolation $iso --json 2>>$OUT/runs.err |
        js "{'iso':'$iso','chunk':'$chunk','round':$r}" >>$OUT/runs.jsonl
    done
  done
done
# a worker killed mid-run: the helper is the run's child, the worker the helper's
build-gpu/ferry run --backend cuda --workload scale --bytes 256G --isolation process --json \
  >$OUT/killed.json 2>$OUT/killed.err &
run=$!
sleep 2
helper=$(pgrep -P $run | head -1)
worker=$(pgrep -P "$helper" | head -1)
echo "killing worker $worker (helper $helper, run $run)"
kill -KILL "$worker"
wait $run
python3 - "$OUT/runs.jsonl" "$OUT/killed.json" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for chunk in ('8M', '1M'):
    base = st.median(r['gbps_h2d'] for r in rows if r['chunk'] == chunk and r['iso'] == 'thread')
    for iso in ('thread', 'process'):
        v = [r for r in rows if r['chunk'] == chunk and r['iso'] == iso]
        g = [r['gbps_h2d'] for r in v]
        print('scale %s %-8s transport %s median %6.2f (x%.3f of thread) e2e %6.2f ok %s' % (
            chunk, iso, ' / '.join('%.2f' % x for x in g), st.median(g), st.median(g) / base,
            st.median(r['end_to_end_gbps'] for r in v), all(r['ok'] for r in v)))
k = json.load(open(sys.argv[2]))
print('killed worker: ok %s, restarts %s, back on the device in %s ms, %s GB/s' % (
    k.get('ok'), k.get('worker_restarts'), k.get('worker_recovery_ms'), k.get('gbps_h2d')))
PY
