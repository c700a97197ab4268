#!/usr/bin/env bash
# Issue 15 on the H200 in one device call: build, every test (GPU ones too), ferry run with the
# defaults, every chunk timed, two copy streams (busy unions, alerts judged against the copy
# curve), and the abort-poll benchmark. Writes under $OUT.
set -u
export PATH=/usr/local/cuda/bin:$PATH; root=$PWD/.carry/root
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu CPATH=$root/usr/include PYTHONPATH=$root/usr/lib/python3/dist-packages
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON -DCMAKE_PREFIX_PATH=$root/usr -DCMAKE_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu -DCMAKE_INCLUDE_PATH=$root/usr/include > $OUT/build.log 2>&1 && cmake --build build-gpu -j 16 >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FERRY_TEST_BROWSER=none timeout 300 ctest --test-dir build-gpu -j 4 --output-on-failure > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.log | tail -8
f=build-gpu/ferry
for a in "--bytes 4G" "--bytes 4G" "--bytes 4G --op-timing all --link-sample-ms 50" "--bytes 4G --copy-streams 2" "--bytes 4G --copy-streams 2 --op-timing all" "--workload copy --bytes 8G --op-timing all --link-sample-ms 50"; do
  $f run --backend cuda $a --json 2>>$OUT/run.err | python3 -c "import json,sys; j=json.load(sys.stdin); j['args']='$a'; print(json.dumps(j))" >> $OUT/runs.jsonl
done
python3 - $OUT/runs.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l); print(j['args'], {k:j.get(k) for k in ('ok','gbps_h2d','gbps_d2h','overlap','util_h2d','util_compute','util_d2h','bw_alerts','link_gbps_h2d','link_own_gbps_h2d','link_gbps_d2h','link_own_gbps_d2h','verified')})
PY
grep -c "alert" $OUT/run.err
./build-gpu/bench/bench_abort_poll 2>/dev/null | tee $OUT/abort_poll.jsonl
