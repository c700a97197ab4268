#!/usr/bin/env bash
# Issue 17's first target in one short device call: the round-trip ceiling (`ferry bench
# pipeline`, 16 MiB chunks) and ROUNDS (default 4) runs of `ferry run --bytes 16G` with every
# byte verified, end to end against the target (>= 46 GB/s and >= 92% of the ceiling). Writes
# $OUT/gen.jsonl and $OUT/ceiling.json; prints a table last.
set -u
# shellcheck source=bench/explore/carry-env.sh
. "$(dirname "$0")/carry-env.sh"
build_gpu
cp .carry/commit "$OUT/commit.txt" 2>/dev/null
build-gpu/ferry bench pipeline --backend cuda --chunks 16M --streams 2 --intensity 0 --json \
  >"$OUT/ceiling.json" 2>"$OUT/ceiling.err"
for r in $(seq 1 "${ROUNDS:-4}"); do
  build-gpu/ferry run --backend cuda --bytes 16G --json 2>>"$OUT/gen.err" >>"$OUT/gen.jsonl"
done
python3 - "$OUT" <<'PY'
import json, sys, statistics as st
o = sys.argv[1]
ceil = json.load(open(o + '/ceiling.json'))['ceiling_gbps']
rows = [json.loads(l) for l in open(o + '/gen.jsonl') if l.startswith('{')]
for r in rows:
    print('16G transport %6.2f end to end %6.2f (%.1f%% of the ceiling %.2f) verified %s bound %s: %s' % (
        r['gbps_h2d'], r['end_to_end_gbps'], 100 * r['end_to_end_gbps'] / ceil, ceil,
        r['verified'], r['bound'], r['bound_why']))
e = st.median(r['end_to_end_gbps'] for r in rows)
print('median end to end %.2f GB/s, %.1f%% of %.2f: target (>= 46 and >= 92%%) %s' % (
    e, 100 * e / ceil, ceil, 'met' if e >= 46 and e >= 0.92 * ceil else 'NOT met'))
PY
