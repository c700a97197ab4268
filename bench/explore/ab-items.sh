#!/usr/bin/env bash
# Issue 20's small items, two prebuilt ferry binaries interleaved in one device call (run it with
# OUT set; carry .carry): A and B (default main and HEAD: $PREBUILT/ferry-A, from
# bench/explore/prebuild.sh, PREBUILT .carry/bin) over ROUNDS rounds (default 3), each round
# 64 KiB items closed loop, 64 KiB offered at 75% of the ceiling and 256 KiB at 90% (8 threads,
# 8 MiB slabs; EXTRA_ENV, e.g. FERRY_DEPTH=4, applies to both, ENV_A and ENV_B to one; A and B
# may name one binary with two ENVs: A=HEAD B=HEAD:4 runs ferry-HEAD, the tag after ':' naming it). One line a run: rate, p50/p99
# against the run's bound, ferry's CPU an item and by thread, items a slab (with
# EXTRA_ENV=FERRY_LOG_LEVEL=debug, the CUDA backend's event waits an item too, and from a
# FERRY_PROF=1 build, e.g. VARIANTS=prof:-DFERRY_PROF=1 in prebuild.sh, the wall time of each
# phase of src/base/prof.h an item, with how many an item). Then, on an H200
# and with LIMIT (default 540 s) leaving room, open-targets.sh with $PREBUILT/ferry-$TARGETS
# (default A). JSON in $OUT/ab.tgz, the targets' in $OUT/ot.tgz.
set -u
o=$OUT
limit=${LIMIT:-540}
pre=${PREBUILT:-.carry/bin}
a=${A:-main} b=${B:-HEAD}
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/machine.txt"
sed 's/^/carried HEAD: /' .carry/commit 2>/dev/null
mkdir -p "$o/ab"
# shellcheck disable=SC2206
env_extra=(${EXTRA_ENV:-})
reserve=0
[[ $gpu == *H200* ]] && reserve=${TARGETS_S:-200}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in "$a" "$b"; do
    for m in 64K 64K:75% 256K:90%; do
      [ $((limit - reserve - SECONDS)) -gt 25 ] || break 3
      args=(--item-sizes "${m%:*}")
      [ "${m#*:}" != "$m" ] && args+=(--rate "${m#*:}")
      f=$o/ab/${v//:/_}-${m//[:%]/_}-$r.json
      # shellcheck disable=SC2206
      own=(${ENV_A:-})
      # shellcheck disable=SC2206
      [ "$v" = "$b" ] && own=(${ENV_B:-})
      env "${env_extra[@]}" "${own[@]}" FERRY_GATHER_BYTES=8M timeout 60 "$pre/ferry-${v%%:*}" bench items \
        --backend cuda --threads 8 "${args[@]}" --json >"$f" 2>"$f.err"
      python3 - "$f" "$v" "$m" "$r" <<'PY'
import json, re, sys
# FERRY_LOG_LEVEL=debug in EXTRA_ENV: the CUDA backend's count of its event waits, over the
# warm-up and the measured passes, an item
waits = ''
prof = ''  # a FERRY_PROF=1 build: the phases' wall time, the process's sums at the last destroy
for l in open(sys.argv[1] + '.err'):
    w = re.search(r'event waits: (\d+) \((\d+) ended, (\d+) timed out\), (\d+) queries, (\d+) yields, (\d+) naps', l)
    if w:
        waits = [int(g) for g in w.groups()]
    if ' prof: ' in l:
        prof = re.findall(r' (\w+) (\d+)/(\d+)', l.split('(us/count):')[1])
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print('%-5s %-8s r%s: no result (%s)' % (sys.argv[2], sys.argv[3], sys.argv[4], e)); sys.exit()
for x in j['results']:
    by = x.get('cpu_us_per_item_by_thread', {})
    print('%-5s %-8s r%s %5.1f%% of %.2f p50 %5.0f p99 %5.0f bound %s ferry %.2f us [%s] %.0f a slab ok %s' % (
        sys.argv[2], sys.argv[3], sys.argv[4], 100 * x['fraction'], j['ceiling_gbps'],
        x['latency_p50_us'], x['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-',
        x.get('cpu_us_per_item_ferry', -1),
        ' '.join('%s %.2f' % (k.replace('ferry-', ''), v) for k, v in by.items() if v >= 0.03),
        x['items'] / max(x.get('slabs', 1), 1), x['verified']))
    if waits:
        k = x['items'] * (x.get('passes', 1) + 1)
        print('      waits an item: %.3f (%.3f timed out), queries %.2f, yields %.2f, naps %.3f' % (
            waits[0] / k, waits[2] / k, waits[3] / k, waits[4] / k, waits[5] / k))
    if prof:
        k = x['items'] * (x.get('passes', 1) + 1)
        print('      us an item: ' + ' '.join('%s %.3f (%.2f)' % (name, int(us) / k, int(n) / k)
                                          for name, us, n in prof if int(n) > 0))
PY
    done
  done
done
(cd "$o" && tar czf ab.tgz ab && rm -rf ab)
left=$((limit - SECONDS))
echo "== $left s left"
if [[ $gpu == *H200* ]] && [ "$left" -gt 60 ]; then
  mkdir -p "$o/ot"
  timeout "$left" env OUT="$o/ot" TMPFS=0 FERRY="$pre/ferry-${TARGETS:-${a%%:*}}" \
    bash bench/explore/open-targets.sh 2>&1 | grep -v "cpu by thread" | tail -40
  (cd "$o/ot" && tar czf ../ot.tgz . && cd .. && rm -rf ot)
fi
