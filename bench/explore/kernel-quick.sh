#!/usr/bin/env bash
# The copy kernel's check in a short device call (run it with OUT set; carry .carry): gpu.device
# (.carry/tests/gpu_test_device: copy_pieces by the kernel, pieces of 1 byte to 20 KiB at aligned
# and odd addresses) and gpu.gather (small pinned batches through a pipeline), `ferry probe --calibrate` (engines against the kernel at 4, 16 and
# 64 KiB pieces), and `bench items` at 4K and 16K, main against HEAD (.carry/bin).
set -u
o=$OUT
# shellcheck source=bench/explore/carry-env.sh
. bench/explore/carry-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/machine.txt"
sed 's/^/carried HEAD: /' .carry/commit 2>/dev/null
for t in gpu_test_device gpu_test_gather; do
  CMOCKA_MESSAGE_OUTPUT=stdout FERRY_BACKEND=sim timeout 100 ".carry/tests/$t" >"$o/$t.txt" 2>&1
  echo "$t: rc $?"
  grep -E "OK|FAILED|small pinned|differs|ERROR|bit-exact|written" "$o/$t.txt" | head -12
done
timeout 90 .carry/bin/ferry-HEAD probe --calibrate -o "$o/cal.json" --backend cuda --json \
  >"$o/cal-out.json" 2>"$o/cal-err.txt"
echo "calibrate: rc $?"
python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
for p in j['pieces']:
    print('pieces of %6d: engines %6.2f GB/s, kernel %6.2f GB/s' % (p['bytes'], p['engines_gbps'], p['kernel_gbps']))
print('piece_kernel_max %d' % j['piece_kernel_max'])" "$o/cal-out.json" || tail -3 "$o/cal-err.txt"
# main (1956f00) has no --scattered: its items side by side (each copied into its slab there,
# wherever it lies); HEAD side by side (merged runs by the engines) and --scattered (the kernel)
for c in main: HEAD: HEAD:--scattered; do
  v=${c%%:*} f=${c#*:}
  # shellcheck disable=SC2086
  FERRY_GATHER_BYTES=8M timeout 40 ".carry/bin/ferry-$v" bench items --backend cuda --threads 8 \
    --item-sizes 4K,16K --bytes 256M $f --json >"$o/items-$v$f.json" 2>"$o/items-$v$f.err"
  python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
for x in j['results']:
    print('%-16s %6d %5.1f%% of %.2f ferry %.2f us %.0f a slab %.1f pieces a slab p99 %.0f ok %s' % (
        sys.argv[2], x['item_bytes'], 100 * x['fraction'], j['ceiling_gbps'],
        x['cpu_us_per_item_ferry'], x['items'] / max(x['slabs'], 1),
        x['gather_pieces'] / max(x['slabs'], 1), x['latency_p99_us'], x['verified']))" \
    "$o/items-$v$f.json" "$v$f" || tail -3 "$o/items-$v$f.err"
done
