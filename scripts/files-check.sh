#!/usr/bin/env bash
# The main job on files on this machine's own disk: a file of SIZE (default 256M) made in the
# build tree, read alone by `ferry bench io`, then copied by `ferry run --workload copy --input
# F --output G` (the simulated H200 when there is no GPU); G must equal F (cmp). Prints both
# rates, the run's end-to-end rate over the storage's, and the bound the run names, and writes
# them as one JSON line to BUILD/files-check.json. CI runs it after the tests (.ci/run).
# Usage: scripts/files-check.sh [BUILD] [SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
size=${2:-256M}
ferry=$build/ferry
[ -x "$ferry" ] || { echo "files-check: no $ferry (build first: make build)" >&2; exit 2; }
dir=$(mktemp -d "$build/files-check.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$ferry" bench io --write --bytes "$size" "$dir/in.bin" >/dev/null
"$ferry" bench io --json "$dir/in.bin" >"$dir/io.json"
"$ferry" run --workload copy --input "$dir/in.bin" --output "$dir/out.bin" --json \
  >"$dir/run.json" 2>"$dir/run.err" || { cat "$dir/run.err" >&2; echo "files-check: ferry run failed" >&2; exit 1; }
cmp "$dir/in.bin" "$dir/out.bin" || { echo "files-check: the output differs from the input" >&2; exit 1; }
python3 - "$dir/io.json" "$dir/run.json" "$build/files-check.json" <<'PY'
import json, sys
io, run = (json.load(open(p)) for p in sys.argv[1:3])
rec = {"file_bytes": io["bytes"], "bench_io_gbps": io["gbps"], "direct": io["direct"],
       "backend": run["backend"], "run_end_to_end_gbps": run["end_to_end_gbps"],
       "run_transport_gbps": run["transport_gbps"], "bound": run["bound"],
       "end_to_end_over_storage": round(run["end_to_end_gbps"] / io["gbps"], 3) if io["gbps"] else None,
       "identical": True}
print("files-check: %d bytes on this disk: bench io %.2f GB/s (%s); ferry run copy (%s) end to end "
      "%.2f GB/s = %.0f%% of it, bound %s; output identical" % (
          io["bytes"], io["gbps"], "O_DIRECT" if io["direct"] else "buffered", run["backend"],
          run["end_to_end_gbps"], 100 * rec["end_to_end_over_storage"], run["bound"]))
open(sys.argv[3], "w").write(json.dumps(rec) + "\n")
PY
