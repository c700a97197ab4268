#!/usr/bin/env bash
# The open GPU targets in one device call (run it with OUT set; carry .carry): issue 17's
# generated 16 GiB run (issue17-gen.sh, 3 rounds; on an H200, or with GEN=1) and issue 20's gathered items at 64K and 256K
# (8 MiB slabs, and 8 MiB x 6); with ISSUE18=1 also issue 18's compute-heavy CPU+GPU target
# (issue18-compute.sh, fma 64, --verify sample, 2 rounds) with the CPU device's threads niced
# (option cpu_nice 10, the default) and not (0). The targets are the H200's; another GPU's
# figures are recorded as that GPU's. Everything lands in $OUT/all.tgz.
set -u
o=$OUT
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
build_gpu
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$o/g" "$o/i" "$o/n0" "$o/n10"
echo "== $gpu"
# issue 17: one tmpfs file written by several threads, pwrite against a shared mapping
echo "== tmpfs writes (shmem THP: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null))"
[ "${TMPFS:-1}" = 1 ] && gcc -O2 -pthread -o "$o/tmpfs-write" bench/explore/tmpfs-write.c &&
  "$o/tmpfs-write" /dev/shm/ferry-tw.bin 4 1 4 8 14 | tee "$o/tmpfs-write.txt" && rm -f "$o/tmpfs-write"
{
  if [[ $gpu == *H200* || ${GEN:-0} = 1 ]]; then
    OUT=$o/g ROUNDS=3 bash bench/explore/issue17-gen.sh 2>&1 | tail -4
  fi
  # closed loop (as fast as 8 threads submit), then offered on a schedule at the issue's
  # rates (64K at 75% of the ceiling, 256K at 90%): p99 against gather_us + a slab's round trip
  k=0
  for g in 8M 8M:6 8M@64K:75% 8M@256K:90% 8M; do
    case $g in
      *@*) sizes=${g#*@}; rate=${sizes#*:}; sizes=${sizes%:*}; slabs=0; gb=${g%@*}
           args=(--item-sizes "$sizes" --rate "$rate") ;;
      *) s=${g#*:}; [ "$s" = "$g" ] && s=0; slabs=$s; gb=${g%:*}; args=(--item-sizes "64K,256K") ;;
    esac
    k=$((k + 1))
    f=$o/i/f$k-${g//[:@%]/_}.json
    FERRY_GATHER_SLABS=$slabs FERRY_GATHER_BYTES=$gb build-gpu/ferry bench items --backend cuda \
      --threads 8 "${args[@]}" --json >"$f" 2>>"$o/i/err"
    python3 - "$f" "$g" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j['results']:
    print('items %s %7d %6.2f GB/s %5.1f%% of %.2f p50 %.0f p99 %.0f us (bound %s) cpu %.2f us, ferry %s, ok %s' % (
        sys.argv[2], r['item_bytes'], r['gbps_h2d'], 100 * r['fraction'], j['ceiling_gbps'],
        r['latency_p50_us'], r['latency_p99_us'],
        '%.0f' % j['latency_bound_us'] if j.get('latency_bound_us') else '-', r['cpu_us_per_item'],
        '%.2f' % r['cpu_us_per_item_ferry'] if 'cpu_us_per_item_ferry' in r else '-', r['verified']))
    print('  max %.0f us at %.3f of the pass' % (r['latency_max_us'], r['latency_max_at']))
    print('  cpu by thread: ' + ' '.join('%s %.2f' % kv for kv in r.get('cpu_us_per_item_by_thread', {}).items()))
PY
  done
}
for n in 10 0; do
  [ "${ISSUE18:-0}" = 1 ] || break
  echo "== cpu_nice $n"
  OUT=$o/n$n FERRY_CPU_NICE=$n SKIP_BUILD=1 VERIFY=sample INTENSITIES=64 ROUNDS=2 \
    bash bench/explore/issue18-compute.sh 2>&1 | tail -6
done
cp "$o/g/machine.txt" "$o/machine.txt" 2>/dev/null || nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$o/machine.txt"
(cd "$o" && touch tmpfs-write.txt && tar czf all.tgz g i n0 n10 machine.txt tmpfs-write.txt && rm -rf g i n0 n10)
