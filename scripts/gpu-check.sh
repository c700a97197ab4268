#!/usr/bin/env bash
# One call on the GPU machine: build ferry with CUDA, run every test (the GPU ones included),
# the end-to-end runs and the benchmarks, write the results (with date, device, driver, commit
# and command) to $OUT (or bench/results/), and print a short table last.
# Needs .carry/ (scripts/carry-deps.sh) for cJSON, cmocka, libmicrohttpd, liburing, libxxhash and
# python3-prometheus-client: that machine has no apt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
mkdir -p "$out"
root=$PWD/.carry/root
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
export CPATH="$root/usr/include${CPATH:+:$CPATH}"
export PYTHONPATH="$root/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/usr/local/cuda/bin:$PATH"
build=${BUILD:-build-gpu}
log=$out/gpu-check.log
: >"$log"
step() { echo "== $*" | tee -a "$log"; }
# GPU_CHECK_TARGETS=1: the issue's target measurements alone (copy bench and the plain loop, the
# rings, calibration, both pipeline sweeps with the prediction, the peer, the interleaved
# rounds): no tests, end-to-end runs, link monitor, reports, connections or host benchmarks.
full() { [ "${GPU_CHECK_TARGETS:-0}" != 1 ]; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total \
  --format=csv,noheader 2>&1 | tee -a "$log"
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
# .carry/commit first: the copy of the tree on the GPU machine may carry an older .git.
commit=$(cat .carry/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
date=$(date -u +%Y-%m-%d)

step "build"
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu" \
  -DCMAKE_INCLUDE_PATH="$root/usr/include" >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
cmake --build "$build" -j "$(nproc)" >>"$log" 2>&1 || { tail -40 "$log"; exit 1; }
ferry=$build/ferry

step "probe"
"$ferry" probe | tee -a "$log"
"$ferry" probe --json >"$out/probe.json"

tests_rc=0
if full; then
step "tests"
# No package manager there, so no Chromium: the report pages are checked, not rendered.
FERRY_TEST_BROWSER=none ctest --test-dir "$build" --output-on-failure -j 4 >"$out/ctest.log" 2>&1
tests_rc=$?
tail -n 25 "$out/ctest.log" | tee -a "$log"
# what the trouble tests saw (pinning under a memlock limit, a GPU shared with another process)
{ "$build"/tests/gpu_test_trouble 2>&1; "$build"/tests/gpu_test_sticky 2>&1; "$build"/tests/gpu_test_hang 2>&1; } \
  | grep '^# ' | grep -v '^# seed' \
  | tee "$out/trouble.txt" | tee -a "$log"

# GPU_CHECK_QUICK=1: build and tests only (to check a fix without the benchmarks).
if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then
  grep -E "Failed|Passed" "$out/ctest.log" | tail -50
  exit $tests_rc
fi
fi

res=$out/gpu-${date}-${commit}.jsonl
printf '{"meta":{"date":"%s","device":"%s","driver":"%s","commit":"%s","command":"%sscripts/gpu-check.sh"}}\n' \
  "$date" "$gpu" "$driver" "$commit" "$(full || echo GPU_CHECK_TARGETS=1 )" >"$res"
if full; then
step "end to end: ferry run --backend cuda"
runs=(
  "--workload copy --bytes 4G"
  "--workload scale --bytes 4G"
  "--workload fma --intensity 64 --bytes 4G"
  "--workload scale --bytes 4G --chunk-bytes 1M"
  "--workload scale --bytes 4G --chunk-bytes 16M"
  "--workload scale --bytes 4G --single-stream"
)
for r in "${runs[@]}"; do
  for b in cuda sim; do
    # the simulator runs kernels on the CPU: leave the heavy fma run to the GPU
    case "$b $r" in "sim "*fma*) continue ;; esac
    # shellcheck disable=SC2086
    line=$("$ferry" run --backend $b $r --json 2>>"$log")
    echo "$line" | python3 -c "import json,sys; j=json.load(sys.stdin); j['args']='$r'; print(json.dumps(j))" >>"$res" 2>>"$log" \
      || echo "{\"args\":\"$r\",\"backend\":\"$b\",\"ok\":false}" >>"$res"
  done
done

step "two copy streams: engine busy sampled against every chunk timed"
# The union of a direction's copies: sampled (one chunk in 31 and its anchor) must read what
# every chunk timed reads, and a healthy run raises no alert either way.
for round in 1 2; do
  for t in sample all; do
    "$ferry" run --backend cuda --workload copy --bytes 4G --copy-streams 2 --op-timing $t --json \
      2>>"$out/copy2.err" | python3 -c "import json,sys; j=json.load(sys.stdin); j['kind']='copy2'; j['op_timing']='$t'; print(json.dumps(j))" >>"$res" 2>>"$log"
  done
done

step "link monitor: NVML's counter against ferry's own bytes, alone and beside another process"
# Alone, the link's traffic should be ferry's; with a hog process copying both ways on the
# same GPU, ferry's copies fall under the alert share and the alert should name the other
# process. Every chunk timed, so the bandwidth window fills within the run.
lm() { "$ferry" run --backend cuda --workload copy --bytes 8G --op-timing all --link-sample-ms 50 --json; }
lm >"$out/link-alone.json" 2>"$out/link-alone.err"
"$build"/bench/cuda_roundtrip hog --seconds 20 >"$out/hog.json" 2>>"$log" &
hog=$!
sleep 3
lm >"$out/link-shared.json" 2>"$out/link-shared.err"
wait $hog
for k in alone shared; do
  python3 - "$out/link-$k.json" "$out/link-$k.err" "$k" "$out/hog.json" <<'PY' >>"$res" 2>>"$log"
import json, sys
j = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read().splitlines()
j["kind"] = "link_" + sys.argv[3]
j["alert_lines"] = [l for l in err if "alert:" in l][:4]
j["alerts_naming_another_process"] = sum("another process moves data" in l for l in err)
if sys.argv[3] == "shared":
    try:
        j["hog"] = json.loads(open(sys.argv[4]).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        j["hog"] = None
print(json.dumps(j))
PY
done

fi

step "ferry bench copy"
"$ferry" bench copy --backend cuda --sizes 4K,64K,1M,4M,16M,64M,256M,1G --json >"$out/bench-copy.json" 2>>"$log"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['kind']='bench_copy'; print(json.dumps(j))" "$out/bench-copy.json" >>"$res" 2>>"$log"

step "hand-written CUDA: a plain cudaMemcpyAsync loop, and the well-scheduled round trip"
"$build"/bench/cuda_roundtrip copy --sizes 4K,64K,1M,4M,16M,64M,256M,1G >>"$res" 2>>"$log" \
  || echo "cuda_roundtrip copy failed (see log)" | tee -a "$log"
"$build"/bench/cuda_roundtrip roundtrip --chunks 256K,1M,4M,16M --compute-streams 2 --slots 4 \
  --timing-events 0,1 >>"$res" 2>>"$log" || echo "cuda_roundtrip roundtrip failed (see log)" | tee -a "$log"
# the same ring with copies coalesced: one copy each way for 2 or 4 chunks, a kernel per chunk
"$build"/bench/cuda_roundtrip roundtrip --chunks 1M,4M --compute-streams 2 --slots 4 --group 2,4 \
  >>"$res" 2>>"$log" || echo "cuda_roundtrip roundtrip --group failed (see log)" | tee -a "$log"

step "ferry probe --calibrate"
"$ferry" probe --calibrate -o "$out/h200-calibrated.json" --backend cuda --json >"$out/calibration.json" 2>>"$log"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['kind']='calibration'; print(json.dumps(j))" "$out/calibration.json" >>"$res" 2>>"$log"

step "ferry bench pipeline --coalesce-bytes 0 --compare (a copy per chunk; simulator on the calibrated profile)"
"$ferry" bench pipeline --backend cuda --chunks 256K,1M,4M,16M --streams 1,2 --intensity 0,64 --coalesce-bytes 0 --compare \
  --compare-profile "$out/h200-calibrated.json" \
  --json >"$out/bench-pipeline.json" 2>>"$log"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['kind']='bench_pipeline'; print(json.dumps(j))" "$out/bench-pipeline.json" >>"$res" 2>>"$log"

step "ferry bench pipeline, defaults (copies coalesced up to 8 MiB within a batch of 4 chunks)"
"$ferry" bench pipeline --backend cuda --chunks 256K,1M,4M,16M --streams 1,2 --intensity 0 \
  --compare --compare-profile "$out/h200-calibrated.json" \
  --json >"$out/bench-pipeline-coalesced.json" 2>>"$log"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['kind']='bench_pipeline_coalesced'; print(json.dumps(j))" "$out/bench-pipeline-coalesced.json" >>"$res" 2>>"$log"

if full; then
step "ferry bench pipeline with every chunk timed (FERRY_OP_TIMING=all): what timing costs"
FERRY_OP_TIMING=all "$ferry" bench pipeline --backend cuda --chunks 256K,1M,4M,16M --streams 2 --intensity 0 \
  --json >"$out/bench-pipeline-all-timed.json" 2>>"$log"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['kind']='bench_pipeline_all_timed'; print(json.dumps(j))" "$out/bench-pipeline-all-timed.json" >>"$res" 2>>"$log"

fi

step "monitoring and watchdog cost, the plan's depth and copy streams: interleaved rounds"
# full: the defaults (copies coalesced up to 8 MiB: 4 chunks of 1 MiB, 2 of 4 MiB per copy; one
# copy group in 31 timed, watchdog every 1 ms, heartbeat every 100 ms, link sampled every
# 200 ms); bare: no timed events, no heartbeat, watchdog every second, no link sampling;
# untimed: the defaults without timed events; percopy, percopy_bare: full and bare with a copy
# per chunk (coalesce_bytes 0).
bare_env=(FERRY_OP_TIMING=off FERRY_HEARTBEAT_MS=0 FERRY_WATCHDOG_MS=1000 FERRY_LINK_SAMPLE_MS=0)
for round in 1 2 3; do
  for mode in full bare untimed percopy percopy_bare; do
    case $mode in
      full) envs=() ;;
      bare) envs=("${bare_env[@]}") ;;
      untimed) envs=(FERRY_OP_TIMING=off) ;;
      percopy) envs=(FERRY_COALESCE_BYTES=0) ;;
      percopy_bare) envs=(FERRY_COALESCE_BYTES=0 "${bare_env[@]}") ;;
    esac
    env "${envs[@]}" "$ferry" bench pipeline --backend cuda --chunks 1M,4M --streams 1 --intensity 0 \
      --json 2>>"$log" | python3 -c "import json,sys; j=json.load(sys.stdin); j['kind']='bench_pipeline_mode'; j['mode']='$mode'; j['round']=$round; print(json.dumps(j))" >>"$res" 2>>"$log"
  done
done

if full; then
step "reports: ferry run and ferry bench pipeline --report (HTML)"
"$ferry" run --backend cuda --bytes 1G --report "$out/report-run.html" --quiet 2>>"$log" \
  || echo "run --report failed (see log)" | tee -a "$log"
"$ferry" bench pipeline --backend cuda --bytes 1G --chunks 1M,4M,16M --streams 1,2 --intensity 0 \
  --report "$out/report-bench-pipeline.html" >/dev/null 2>>"$log" \
  || echo "bench pipeline --report failed (see log)" | tee -a "$log"

fi

step "peer: PyTorch + CuPy"
timeout 300 python3 bench/peers/torch_pipeline.py --chunks 1M,4M,16M --streams 2,4 >>"$res" 2>>"$log" \
  || echo "peer failed (see log)" | tee -a "$log"

if full; then
step "ferry connections --measure (one child process per value)"
"$ferry" connections --measure --backend cuda --json >"$out/connections.json" 2>>"$log"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['kind']='connections'; print(json.dumps(j))" "$out/connections.json" >>"$res" 2>>"$log" \
  || echo "connections sweep failed (see log)" | tee -a "$log"

step "host benchmarks"
for bb in "$build"/bench/bench_*; do "$bb" >>"$res" 2>>"$log"; done

fi

step "summary"
python3 - "$res" "$tests_rc" <<'PY' 2>&1 | tee -a "$log"
import json, os, sys
rows = []
for line in open(sys.argv[1]):
    if line.startswith("{"):  # benchmarks may print comment lines too
        rows.append(json.loads(line))
meta = rows[0]["meta"]
print(f"{meta['date']}  {meta['device']}  driver {meta['driver']}  commit {meta['commit']}")
print(f"tests: {'skipped (GPU_CHECK_TARGETS=1)' if 'GPU_CHECK_TARGETS' in meta['command'] else 'PASS' if sys.argv[2] == '0' else 'FAIL (see ctest.log)'}")
try:
    for line in open(os.path.join(os.path.dirname(sys.argv[1]), "trouble.txt")):
        print("trouble " + line.strip())
except OSError:
    pass
print(f"{'ferry run':48s} {'backend':7s} {'ok':3s} {'H2D GB/s':>9s} {'D2H GB/s':>9s} {'overlap':>8s}")
for r in rows:
    if "args" in r:
        print(f"{r['args']:48s} {r.get('backend','?'):7s} {'yes' if r.get('ok') else 'NO':3s} "
              f"{r.get('gbps_h2d',0):9.1f} {r.get('gbps_d2h',0):9.1f} {r.get('overlap',0):8.2f}")
for r in rows:
    if r.get("kind", "").startswith("link_"):
        hog = r.get("hog") or {}
        print(f"{r['kind']:12s} ferry {r.get('gbps_h2d', 0):5.1f}/{r.get('gbps_d2h', 0):5.1f} GB/s, "
              f"{r.get('link_samples', 0)} link samples, last: link {r.get('link_gbps_h2d', -1):5.1f}/"
              f"{r.get('link_gbps_d2h', -1):5.1f}, own {r.get('link_own_gbps_h2d', -1):5.1f}/"
              f"{r.get('link_own_gbps_d2h', -1):5.1f}; alerts {r.get('bw_alerts', 0)}, naming "
              f"another process {r['alerts_naming_another_process']}"
              + (f"; hog {hog.get('gbps_each_way', 0):.1f} GB/s each way" if hog else ""))
        for l in r["alert_lines"]:
            print("  " + l[:160])
for r in rows:
    if r.get("kind") == "copy2":
        print(f"two copy streams, op_timing {r['op_timing']:6s}: {r.get('gbps_h2d', 0):5.1f}/{r.get('gbps_d2h', 0):5.1f} GB/s, "
              f"engines busy H2D {r.get('util_h2d', 0) * 100:5.1f}% D2H {r.get('util_d2h', 0) * 100:5.1f}%, "
              f"overlap {r.get('overlap', 0):.2f}, alerts {r.get('bw_alerts', '?')}")
    if r.get("kind") == "calibration":
        print(f"calibration: host copy {r['copy_submit_ns']:.0f} ns, launch {r['launch_ns']:.0f} ns, "
              f"record {r['event_record_ns']:.0f} ns, wait {r['stream_wait_ns']:.0f} ns, "
              f"both-ways factor {r['bidirectional_factor']:.3f}, kernel {r['d2d_gbps']:.0f} GB/s")
raw_copy = {(r["direction"], r["bytes"]): r for r in rows
            if r.get("peer") == "cuda" and r.get("kind") == "copy"}
for r in rows:
    if r.get("kind") == "bench_copy":
        big = [x for x in r["results"] if x["bytes"] >= 16 << 20 and x["memory"] == "pinned"]
        print("copy (pinned, best GB/s): " + ", ".join(
            f"{x['direction']} {x['bytes'] >> 20}M {x['best_gbps']:.1f}" for x in big))
        for x in big:
            raw = raw_copy.get((x["direction"], x["bytes"]))
            if raw:
                print(f"copy {x['direction']:4s} {x['bytes'] >> 20:5d}M  ferry {x['best_gbps']:6.1f}  "
                      f"plain cudaMemcpyAsync loop {raw['best_gbps']:6.1f}  "
                      f"ratio {x['best_gbps'] / raw['best_gbps']:.3f}")
best_ferry = {}
best_default = {}
best_frac = {}
for r in rows:
    if r.get("kind") in ("bench_pipeline", "bench_pipeline_coalesced"):
        print(f"pipeline ({'copies coalesced' if r['kind'].endswith('coalesced') else 'a copy per chunk'}) "
              f"ceiling {r['ceiling_gbps']:.2f} GB/s each way")
        print(f"{'chunk':>9s} {'copy':>6s} {'str':>3s} {'int':>4s} {'H2D':>7s} {'D2H':>7s} {'ceil%':>6s} {'sim':>7s} {'err%':>6s} ok")
        for x in r["results"]:
            c = x["chunk_bytes"]
            if r["kind"] == "bench_pipeline":  # against the ring: a copy per chunk, as its
                best_ferry[c] = max(best_ferry.get(c, 0), min(x["gbps_h2d"], x["gbps_d2h"]))
            else:  # ferry as it comes: copies coalesced
                best_default[c] = max(best_default.get(c, 0), min(x["gbps_h2d"], x["gbps_d2h"]))
            key = (c, x.get("copy_bytes", c))
            best_frac[key] = max(best_frac.get(key, 0), x["fraction"])
            print(f"{c >> 10:8d}K {x.get('copy_bytes', c) >> 10:5d}K {x['compute_streams']:3d} {x['intensity']:4d} {x['gbps_h2d']:7.2f} "
                  f"{x['gbps_d2h']:7.2f} {x['fraction'] * 100:6.1f} {x.get('sim_gbps_h2d', 0):7.2f} "
                  f"{x.get('sim_error', 0) * 100:+6.1f} {'yes' if x['verified'] else 'NO'}")
for (c, cb), f in sorted(best_frac.items()):
    print(f"best fraction of the ceiling, chunk {c >> 10}K copy {cb >> 10}K: {f * 100:.1f}%")
raw_rt = {}
for r in rows:
    if r.get("peer") == "cuda" and r.get("kind") == "roundtrip":
        print(f"hand-written CUDA ring chunk {r['chunk_bytes'] >> 10}K x{r.get('copy_group', 1)} per copy "
              f"slots {r['slots']} timing events "
              f"{'on ' if r['timing_events'] else 'off'}: {r['gbps_each_way']:.2f} GB/s each way, "
              f"verified {r['verified']}")
        if not r["timing_events"] and r.get("copy_group", 1) == 1:
            raw_rt[r["chunk_bytes"]] = r["gbps_each_way"]
for c, v in sorted(best_ferry.items()):
    if c in raw_rt:
        print(f"ferry best at {c >> 10}K / hand-written CUDA ring: {v:.2f} / {raw_rt[c]:.2f} = {v / raw_rt[c]:.3f}x")
for r in rows:
    if r.get("kind") == "bench_pipeline_all_timed":
        print("every chunk timed: " + ", ".join(
            f"{x['chunk_bytes'] >> 10}K {x['gbps_h2d']:.2f} ({x['fraction'] * 100:.1f}%)" for x in r["results"]))
peer = [r for r in rows if r.get("peer") == "torch+cupy"]
if peer:
    best_peer = max(p["gbps_each_way"] for p in peer)
    for p in peer:
        print(f"peer {p['peer']} chunk {p['chunk_bytes'] >> 20}M streams {p['streams']}: "
              f"{p['gbps_each_way']:.2f} GB/s each way, verified {p['verified']}")
    for name, best in (("a copy per chunk", best_ferry), ("defaults", best_default)):
        for c, v in sorted(best.items()):
            same = [p["gbps_each_way"] for p in peer if p["chunk_bytes"] == c]
            if same:
                print(f"ferry ({name}) best at {c >> 20}M / peer's best at {c >> 20}M: {v:.2f} / {max(same):.2f} = "
                      f"{v / max(same):.3f}x (peer's best at any chunk {best_peer:.2f}: {v / best_peer:.3f}x)")
import statistics
modes, fracs = {}, {}
for r in rows:
    if r.get("kind") == "bench_pipeline_mode":
        for x in r["results"]:
            modes.setdefault((r["mode"], x["chunk_bytes"]), []).append(min(x["gbps_h2d"], x["gbps_d2h"]))
            fracs.setdefault((r["mode"], x["chunk_bytes"]), []).append(x["fraction"])
if modes:
    print("modes (median of 3 interleaved rounds, GB/s each way; ratio to bare, or to percopy_bare; of each round's ceiling):")
    for (m, c), v in sorted(modes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = modes.get(("percopy_bare" if m.startswith("percopy") else "bare", c))
        ratio = statistics.median(v) / statistics.median(base) if base else float("nan")
        print(f"  {m:12s} {c >> 10:6d}K  {statistics.median(v):6.2f}  (runs {', '.join(f'{y:.2f}' for y in v)})  x{ratio:.4f}"
              f"  {statistics.median(fracs[(m, c)]) * 100:5.1f}% of the ceiling")
for r in rows:
    if r.get("kind") == "connections":
        print(f"connections law, {r['streams']} streams of A {r['a_ms']} ms then B {r['b_ms']} ms "
              f"(sweep {r['sweep_s']:.1f} s, worst error {r['worst_error'] * 100:.1f}%):")
        for x in r["results"]:
            c = x["child"]
            print(f"  C={x['connections']:2d}  law {x['law_ms']:7.2f} ms  measured {c['total_ms']:7.2f} ms  "
                  f"err {x['error'] * 100:+5.1f}%  queues {'>=' if c['at_least'] else ''}{c['effective_queues']:.1f}  "
                  f"round-robin {c['roundrobin_ms']:.2f} ms  memory {x['memory_vs_base_bytes'] / 1024:+.0f} KiB")
for r in rows:
    if r.get("bench") == "abort_poll" and r["case"] == "kernel_us":
        p = lambda m: r.get(m + "_paired", r[m + "_over_none"])
        print(f"abort poll, {r['bytes'] >> 20} MiB byte-wise kernel, {r['blocks']} blocks, {r.get('bytes_per_thread', 16)} B a thread: none {r['none_us']:.2f} us; "
              f"every thread before the work {p('threads_first'):.3f}x (reading the word at every poll {p('threads_ungated'):.3f}x); "
              f"block's first thread + barrier {p('block_first'):.3f}x; read before, used after {p('block_late'):.3f}x; "
              f"mapped host word {r['host_block_over_none']:.1f}x; no poll again {p('none_again'):.3f}x")
    elif r.get("bench") == "abort_poll" and r["case"] == "gate":
        print(f"abort poll gate: {'on' if r['gated'] else 'OFF'}, abort_after {r['gate_ahead_ms_median']:.2f} ms ahead "
              f"of a kernel's start (min {r['gate_ahead_ms_min']:.2f}), span {r['abort_span_ms']:.1f} ms")
    elif r.get("bench") == "abort_poll":
        print(f"abort poll, a grid of {r['grid_blocks']} blocks holding every SM: retired {r['overrun_ms']:.3f} ms "
              f"past its deadline, gpu_lost {r['gpu_lost']}, output {'OK' if r['output_ok'] else 'WRONG'}")
    elif "bench" in r and "value" in r:
        print(f"bench {r['bench']}/{r['case']}: {r['value']:.1f} {r['unit']}")
PY
# The device machine's transfer brings back at most 8 files: under $OUT, the pieces (the sweeps'
# JSON, the link runs, the calibrated profile, the reports) go into one archive beside the
# results, the summary's log and the tests' log.
if [ -n "${OUT:-}" ]; then
  (cd "$out" && find . -maxdepth 1 -type f ! -name "gpu-*.jsonl" ! -name gpu-check.log \
      ! -name ctest.log ! -name console.log ! -name pieces.tar.gz -printf '%f\n' \
    | tar czf pieces.tar.gz -T - --remove-files) || echo "could not archive the pieces" | tee -a "$log"
fi
exit $tests_rc
