#!/usr/bin/env bash
# Issue 17 on the H200 in one device call: this tree and the one before the issue's work
# (.baseline17/, a `git archive` of it) built side by side; this tree's tests; the host's memory
# bandwidth (bench/host/host_membw) and pinning (bench/host/bench_pin); storage (`ferry bench
# io`) on a tmpfs file and a disk file; `ferry run --workload copy --input F --output G` (cmp
# checked) and `ferry run --bytes 16G` from both trees interleaved; a sweep of depth and batch
# size; the simulator's predictions of the same runs; the host's memory shared by the DMA and
# the CPU (bench/host/host_dma_contend: the round trip while 0-16 threads read, write or copy;
# CONTEND_ARGS adds to its arguments). Writes under $OUT; prints a table last.
# the file read by 8 threads of preadv, 8 MiB each (the issue's peer for storage: "peer"); the
# round-trip ceiling in the same lease (`ferry bench pipeline`, 16 MiB chunks: "ceiling").
# STEPS=... limits the steps (build tests host contend io peer files ceiling gen sweep sim;
# default all).
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
steps=${STEPS:-build tests host contend io peer files ceiling gen sweep sim}
rounds=${ROUNDS:-3}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
new=build-gpu/ferry base=build-base/ferry
shm=/dev/shm/ferry-issue17
mkdir -p $shm
trap 'rm -rf $shm /var/tmp/ferry-issue17' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null || echo "commit: no git here"; } >>$OUT/machine.txt
nproc >>$OUT/machine.txt; free -g | head -2 >>$OUT/machine.txt
cat /sys/kernel/mm/transparent_hugepage/enabled >>$OUT/machine.txt
df -h /dev/shm /var/tmp >>$OUT/machine.txt
if has build; then
  # the tree before is built only for the steps that compare with it
  if has files || has gen; then
    # shellcheck disable=SC2086
    { cmake -S .baseline17 -B build-base $cfg && cmake --build build-base -j 8 --target ferry; } \
      >$OUT/build-base.log 2>&1 &
  else
    true &
  fi
  # shellcheck disable=SC2086
  { cmake -S . -B build-gpu $cfg && cmake --build build-gpu -j 12; } >$OUT/build.log 2>&1
  rc_new=$?
  wait $!
  rc_base=$?
  [ $rc_new = 0 ] || { tail -30 $OUT/build.log; exit 1; }
  [ $rc_base = 0 ] || { tail -30 $OUT/build-base.log; exit 1; }
fi
if has tests; then
  FERRY_TEST_BROWSER=none timeout 300 ctest --test-dir build-gpu -j 6 --output-on-failure \
    >$OUT/ctest.log 2>&1
  echo "ctest rc=$?"
  grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.log | tail -8
fi
js() { python3 -c "import json,sys; j=json.load(sys.stdin); j.update($1); print(json.dumps(j))"; }
if has host; then
  build-gpu/bench/host_membw 4 >$OUT/host-membw.jsonl 2>&1
  build-gpu/bench/bench_pin 4 >$OUT/pin.jsonl 2>&1
  tail -3 $OUT/pin.jsonl
fi
if has contend; then
  # about 80 s with the defaults (3 modes x 7 thread counts x 3.5 s, and 20 GiB touched first)
  # shellcheck disable=SC2086
  build-gpu/bench/host_dma_contend ${CONTEND_ARGS:-} >$OUT/contend.jsonl 2>$OUT/contend.err
  rc=$?
  echo "contend rc=$rc"
  [ $rc = 0 ] || tail -5 $OUT/contend.err
  grep -E "^(largest total|read|write|copy): " $OUT/contend.err
fi
if has io; then
  for where in $shm /var/tmp/ferry-issue17; do
    mkdir -p $where
    $new bench io --write --bytes 4G --json $where/in.bin >>$OUT/io.jsonl 2>>$OUT/io.err
    for r in 1 2 3; do
      $new bench io --json $where/in.bin | js "{'round':$r}" >>$OUT/io.jsonl 2>>$OUT/io.err
    done
    [ $where = $shm ] || rm -f $where/in.bin
  done
fi
if has peer; then
  [ -f $shm/in.bin ] || $new bench io --write --bytes 4G $shm/in.bin >/dev/null
  for r in 1 2 3; do
    python3 - $shm/in.bin $r >>$OUT/peer.jsonl <<'PY'
import json, os, sys, threading, time
path, rnd = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
n = os.fstat(fd).st_size
req, nthreads = 8 << 20, 8
nxt = iter(range(0, n, req))
lock = threading.Lock()
def work():
    buf = bytearray(req)
    while True:
        with lock:
            off = next(nxt, None)
        if off is None:
            return
        os.preadv(fd, [buf], off)
t0 = time.perf_counter()
ts = [threading.Thread(target=work) for _ in range(nthreads)]
[t.start() for t in ts]
[t.join() for t in ts]
dt = time.perf_counter() - t0
print(json.dumps({'what': 'preadv', 'threads': nthreads, 'request_bytes': req, 'bytes': n,
                  'seconds': dt, 'gbps': n / dt / 1e9, 'round': rnd}))
PY
  done
fi
if has files; then
  [ -f $shm/in.bin ] || $new bench io --write --bytes 4G $shm/in.bin >/dev/null
  for r in $(seq 1 "$rounds"); do
    for t in base new; do
      f=$new; [ $t = base ] && f=$base
      rm -f $shm/out.bin
      $f run --backend cuda --workload copy --input $shm/in.bin --output $shm/out.bin --json \
        2>>$OUT/files.err | js "{'tree':'$t','round':$r}" >>$OUT/files.jsonl
      if cmp -s $shm/in.bin $shm/out.bin; then echo "$t $r cmp ok"; else echo "$t $r CMP DIFFERS"; fi
    done
  done | tee $OUT/files-cmp.txt
  rm -f $shm/out.bin
fi
if has ceiling; then
  $new bench pipeline --backend cuda --chunks 16M --streams 2 --intensity 0 --json \
    >$OUT/ceiling.json 2>$OUT/ceiling.err
fi
if has gen; then
  for r in $(seq 1 "$rounds"); do
    for t in base new; do
      f=$new; [ $t = base ] && f=$base
      $f run --backend cuda --bytes 16G --json 2>>$OUT/gen.err \
        | js "{'tree':'$t','round':$r}" >>$OUT/gen.jsonl
    done
  done
fi
if has sweep; then
  # SWEEP: depth:batch pairs, each run ROUNDS times, the rounds interleaved
  for r in $(seq 1 "$rounds"); do
    for db in ${SWEEP:-8:64M 16:64M 32:64M 8:128M 16:128M 32:128M 16:256M 32:256M}; do
      d=${db%%:*} bb=${db#*:}
      $new run --backend cuda --bytes 16G --depth $d --batch-bytes $bb --json 2>>$OUT/sweep.err \
        | js "{'depth':$d,'batch':'$bb','round':$r}" >>$OUT/sweep.jsonl
    done
  done
fi
if has sim; then
  $new run --backend sim --bytes 4G --json 2>>$OUT/sim.err | js "{'what':'gen'}" >>$OUT/sim.jsonl
  [ -f $shm/in.bin ] && $new run --backend sim --workload copy --input $shm/in.bin \
    --output $shm/sim-out.bin --json 2>>$OUT/sim.err | js "{'what':'files'}" >>$OUT/sim.jsonl
  rm -f $shm/sim-out.bin
fi
python3 - "$OUT" <<'PY'
import json, os, sys, statistics as st
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.startswith('{')] if os.path.exists(p) else []
for r in rows('pin.jsonl'):
    print('pin %-26s %.2f GiB %8.1f ms' % (r['way'], r['bytes'] / 2**30, r['ms']))
best = {}
for r in rows('host-membw.jsonl'):
    best[r['kind']] = max(best.get(r['kind'], (0, 0)), (r['gbps'], r['threads']))
for k, (g, t) in best.items():
    print('host memory %-5s best %.1f GB/s at %d threads' % (k, g, t))
cont = rows('contend.jsonl')
if cont:
    top = max(cont, key=lambda r: r['total_gbps'])
    print('host memory under DMA: largest total %.1f GB/s (%s, %d threads: H2D %.1f D2H %.1f '
          'CPU %.1f)' % (top['total_gbps'], top['mode'], top['threads'], top['h2d_gbps'],
                         top['d2h_gbps'], top['cpu_traffic_gbps']))
for r in rows('io.jsonl'):
    print('bench io %-5s %s %.2f GB/s direct=%s' % (r.get('mode'), r.get('file'),
          r.get('gbps', 0), r.get('direct')))
for r in rows('peer.jsonl'):
    print('peer %s %d threads %.2f GB/s' % (r['what'], r['threads'], r['gbps']))
cj = os.path.join(out, 'ceiling.json')
if os.path.exists(cj):
    try:
        c = json.load(open(cj))
        print('ceiling %.2f GB/s round trip; bench pipeline 16M %.2f (%.1f%%)' % (
            c['ceiling_gbps'], c['results'][0]['gbps_h2d'], 100 * c['results'][0]['fraction']))
    except (ValueError, KeyError, IndexError) as e:
        print('ceiling: unreadable (%s)' % e)
def e2e(r):
    return r.get('end_to_end_gbps') or (r['bytes'] / r['wall_s'] / 1e9 if r.get('wall_s') else 0)
for name in ('files.jsonl', 'gen.jsonl'):
    rs = rows(name)
    for t in ('base', 'new'):
        v = [r for r in rs if r.get('tree') == t]
        if v:
            print('%-11s %-4s transport %6.2f  end-to-end %6.2f  ok %s  bound %s' % (
                name[:-6], t, st.median(r['gbps_h2d'] for r in v), st.median(e2e(r) for r in v),
                all(r['ok'] for r in v), v[-1].get('bound', '-')))
sw = {}
for r in rows('sweep.jsonl'):
    sw.setdefault((r['depth'], r['batch']), []).append(r)
for (d, bb), v in sorted(sw.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    print('sweep depth %2d batch %4s transport %6.2f end-to-end %6.2f (median of %d) bound %s' % (
        d, bb, st.median(r['gbps_h2d'] for r in v), st.median(e2e(r) for r in v), len(v),
        v[-1].get('bound', '-')))
# the simulator's prediction for the profile's host against the GPU's end to end (same shapes)
for r in rows('sim.jsonl'):
    p = r.get('predicted') or {}
    real = [e2e(x) for x in rows(r['what'] + '.jsonl') if x.get('tree') == 'new']
    m = st.median(real) if real else 0
    print('sim %-5s transport %6.2f predicted %6.2f (%s) measured %6.2f ratio %s' % (
        r['what'], r['gbps_h2d'], p.get('end_to_end_gbps', 0), p.get('bound', '-'), m,
        '%.3f' % (p.get('end_to_end_gbps', 0) / m) if m else '-'))
PY
# the device call brings back a limited number of files: the small ones go back as one archive
# (build logs stay out: they name the machine's paths)
(cd "$OUT" && rm -f build.log build-base.log && ls | grep -v '^results.tgz$' >.list &&
  tar -czf results.tgz -T .list && xargs rm -f <.list && rm -f .list)
