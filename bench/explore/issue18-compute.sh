#!/usr/bin/env bash
# Issue 18's compute-heavy target on one GPU in one device call: the fma workload at
# INTENSITIES (default "64 256"), where the GPU is bound by its link and the CPU, with the
# vector FMA loop (src/workloads/fma_simd.c), is a real share. Per round (ROUNDS, default 3),
# interleaved: `--devices 0` (the GPU alone), `--devices cpu` (the CPU alone, CPU_BYTES),
# `--devices 0,cpu` (a fresh guard trial each run) and `--devices 0,cpu --perf-model F` (the
# calibration run before the rounds writes F, the rounds load its verdict), for each of THREADS
# (the CPU device's threads, default 8); HOWS picks among gpu, cpu, set and setpm. Target: the
# set >= the GPU alone + 0.9 x the CPU alone. FERRY: a ferry binary built elsewhere
# (bench/explore/prebuild.sh) instead of building this tree; TAG: a field "tag" in each row
# (which binary). VERIFY (full, the default, or sample: a batch in 16) is ferry run's --verify:
# full verification of ~50 GB/s takes most of a 16-core host's cores, which the CPU device's
# threads then compete for. Writes $OUT/runs.jsonl (appends); prints a table last.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
rounds=${ROUNDS:-3}
bytes=${BYTES:-16G}
cpu_bytes=${CPU_BYTES:-2G}
verify=${VERIFY:-full}
f=${FERRY:-build-gpu/ferry}
if [ -z "${FERRY:-}" ]; then
  [ -x build-gpu/ferry ] && [ "${SKIP_BUILD:-0}" = 1 ] || build_gpu
fi
{ lscpu | grep -E "Model name|^CPU\(s\)|Thread"; grep -o -w -m1 "avx512f" /proc/cpuinfo; } >>"$OUT/machine.txt"
js() { python3 -c "import json,sys; j=json.load(sys.stdin); j.update($1); print(json.dumps(j))"; }
for r in $(seq 0 "$rounds"); do # round 0: the perf models' calibration runs alone
  for it in ${INTENSITIES:-64 256}; do
    for how in ${HOWS:-gpu cpu set setpm}; do
      for t in ${THREADS:-8}; do
        b=$bytes
        case $how in
          gpu) dv="--devices 0" ;;
          cpu) dv="--devices cpu" b=$cpu_bytes ;;
          set) dv="--devices 0,cpu" ;;
          setpm) dv="--devices 0,cpu --perf-model $OUT/pm-$it-$verify-$t.json" ;;
        esac
        [ "$how" = gpu ] && [ "$t" != "$(echo ${THREADS:-8} | cut -d" " -f1)" ] && continue # once a round
        [ "$r" = 0 ] && [ "$how" != setpm ] && continue
        # shellcheck disable=SC2086
        timeout 120 "$f" run --backend cuda --workload fma --intensity "$it" --bytes "$b" \
          $dv --cpu-threads "$t" --verify "$verify" --json 2>>"$OUT/runs.err" |
          js "{'how':'$how','it':$it,'round':$r,'verify':'$verify','t':$t,'tag':'${TAG:-}'}" >>"$OUT/runs.jsonl"
      done
    done
  done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for r in rows:  # the calibration runs: their verdicts, not their rates
    if r['round'] == 0:
        print('calibration, fma %d, %d threads: %.2f GB/s, cpu: %s' % (r['it'], r.get('t', 8), r['gbps_h2d'],
              [d.get('note') or 'kept' for d in r.get('devices', []) if d.get('index') == -1]))
rows = [r for r in rows if r['round'] > 0]
for tag, vf, it, t in sorted({(r.get('tag', ''), r['verify'], r['it'], r.get('t', 8)) for r in rows}):
    med = {}
    print('%s--verify %s, fma intensity %d, --cpu-threads %d' % (tag and tag + ': ', vf, it, t))
    for how in ('gpu', 'cpu', 'set', 'setpm'):
        v = [r for r in rows if r['it'] == it and r['how'] == how and r['verify'] == vf and
             r.get('tag', '') == tag and (how == 'gpu' or r.get('t', 8) == t)]
        if not v:
            continue
        med[how] = st.median(r['gbps_h2d'] for r in v)
        cpu = [d for r in v for d in r.get('devices', []) if d.get('index') == -1]
        print('fma %-4d %-6s %6.2f GB/s transport, e2e %6.2f, verified %s, runs %s%s' % (
            it, how, med[how], st.median(r['end_to_end_gbps'] for r in v),
            all(r.get('verified') for r in v), ' '.join('%.2f' % r['gbps_h2d'] for r in v),
            ' cpu share %s' % ' '.join('%.3f' % d['share'] for d in cpu) if cpu else ''))
        for d in cpu:
            print('      cpu: %s' % (d.get('note') or 'kept'))
    if {'gpu', 'cpu'} <= med.keys():
        want = med['gpu'] + 0.9 * med['cpu']
        for how in ('set', 'setpm'):
            if how in med:
                print('fma %-4d %-6s %.2f against the target %.2f (gpu %.2f + 0.9 x cpu %.2f): %s' % (
                    it, how, med[how], want, med['gpu'], med['cpu'],
                    'met' if med[how] >= want else 'NOT met'))
PY
