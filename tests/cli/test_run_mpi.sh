#!/usr/bin/env bash
# `mpirun -n N ferry run --input F --output G`: a job over MPI ranks (libferry_mpi, docs/mpi.md),
# ranks on the simulated H200, oversubscribed on a small machine. For N = 1..4 the output is
# byte for byte what one process writes; every stripe is run once, by some rank; a rank killed
# mid-job fails the job, and `--resume` finishes it from the journal (the output identical, the
# stripes finished before not run again, the ones the dead rank held run again); a rank on a
# slower simulated device (paced in real time) takes fewer stripes, the job near the ideal split;
# and what cannot work is refused with a
# message: the flags of a job outside one, each rank's metrics in a file of its own labelled with
# its rank, a GPU fault inside a rank (handled there), --verify full and sample (each rank checks
# its batches against the CPU reference), a stream or no file, a journal of
# another job, a resume with no journal, stripes that cut a float.
# Skipped (77) without mpirun or without MPI in this ferry, and under the sanitizers: Open MPI's
# own threads and allocations are not ferry's to vouch for.
. "$(dirname "$0")/lib.sh"

command -v mpirun >/dev/null || { echo "skip: no mpirun (scripts/deps.sh installs openmpi-bin)"; exit 77; }
[ "${FERRY_TEST_SCALE:-}" = sanitizer ] && { echo "skip: not under the sanitizers"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { timeout 120 mpirun --oversubscribe "$@"; }

head -c $((24 << 20)) /dev/urandom >"$TMP/in.bin"
mpi -n 1 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/probe.bin" --stripe-bytes 8M >"$TMP/out" 2>&1
if grep -q "built without MPI" "$TMP/out"; then echo "skip: this ferry was built without MPI"; exit 77; fi

# one process's output, the reference
expect_rc "the reference, one process" 0 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/ref.bin" --quiet
for n in 1 2 3 4; do
  expect_rc "$n rank(s)" 0 mpi -n $n "$FERRY" run --input "$TMP/in.bin" --output "$TMP/out$n.bin" \
    --stripe-bytes 256K --json
  cp "$TMP/out" "$TMP/j$n.json"
  if cmp -s "$TMP/out$n.bin" "$TMP/ref.bin"; then ok "$n rank(s): the output is one process's"; else bad "$n rank(s): the output differs"; fi
  json_check "$n rank(s): one summary (rank 0), every stripe once" "$TMP/j$n.json" \
    "j['ranks'] == $n and j['stripes'] == 96 and j['stripes_done'] == 96 and sum(r['stripes'] for r in j['per_rank']) == 96 and sum(r['bytes'] for r in j['per_rank']) == j['bytes'] == 24 << 20 and j['ok']"
done
# the simulator's target: 4 ranks, each its own simulated H200, >= 0.9 x 4 x one rank's rate on
# the devices' clocks, the job's time being the slowest rank's (storage is not modelled). The
# ranks take stripes in real time, four of them on this machine's two cores, so one that the
# kernel runs more takes more (24-28 of 96 in 7 runs: 0.86-1.00 of 4x, docs/mpi.md); the test
# holds 0.8, and prints the figure
python3 - "$TMP/j1.json" "$TMP/j4.json" <<'PY' && ok "4 ranks >= 0.8 x 4 x one rank (devices' clocks)" || bad "4 ranks under 0.8 x 4 x one rank"
import json, sys
one, four = (json.load(open(f)) for f in sys.argv[1:3])
r = four['device_gbps'] / (4 * one['device_gbps'])
print('# one rank %.2f GB/s, 4 ranks %.2f GB/s (%.3f of 4x; stripes by rank %s)' % (
    one['device_gbps'], four['device_gbps'], r, [k['stripes'] for k in four['per_rank']]))
sys.exit(0 if r >= 0.8 else 1)
PY
# the text summary names each rank
expect_rc "text summary" 0 mpi -n 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/t.bin" --stripe-bytes 4M
expect_in "text summary: rank 1's line" "$TMP/out" "rank 1"
expect_in "text summary: the job's line" "$TMP/out" "stripe(s) run in"

# each rank's metrics: a file of its own (FILE.rankR.prom), every sample labelled rank="R"
expect_rc "metrics per rank" 0 mpi -n 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/t.bin" \
  --stripe-bytes 4M --metrics-file "$TMP/m.prom" --quiet
for r in 0 1; do
  if /usr/bin/python3 - "$TMP/m.rank$r.prom" "$r" <<'PY'; then ok "metrics of rank $r: parsed, every sample rank=\"$r\", the pipeline's series there"; else bad "metrics of rank $r"; fi
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(open(sys.argv[1]).read()))
samples = [s for f in fams for s in f.samples]
assert samples and all(s.labels.get('rank') == sys.argv[2] for s in samples), samples[:3]
assert any(f.name.startswith('ferry_pipeline_') for f in fams)
assert any(s.name == 'ferry_pipeline_bytes_total' and s.value > 0 for s in samples) or \
       any(s.name.startswith('ferry_pipeline_batches') and s.value > 0 for s in samples)
PY
done

# ---- a GPU fault inside a rank: that rank's pipeline handles it, the job goes on ----------------
# rank 0's device: a kernel fault (retried on the GPU a level lower), then a sticky one (its GPU
# path ends; the rest of its batches run on the CPU); rank 1 untouched
expect_rc "faults in a rank" 0 mpi -n 1 -x FERRY_INJECT=kernel@batch=2,sticky@batch=9 "$FERRY" run \
  --input "$TMP/in.bin" --output "$TMP/f.bin" --stripe-bytes 2M --batch-bytes 512K --json : -n 1 \
  "$FERRY" run --input "$TMP/in.bin" --output "$TMP/f.bin" --stripe-bytes 2M --batch-bytes 512K --json
cp "$TMP/out" "$TMP/f.json"
if cmp -s "$TMP/f.bin" "$TMP/ref.bin"; then ok "faults in a rank: the output is one process's"; else bad "faults in a rank: the output differs"; fi
json_check "faults in a rank: rank 0 reports them (a retry, the CPU), rank 1 none, no batch failed" "$TMP/f.json" \
  "j['ok'] and j['per_rank'][0]['faults'] >= 2 and j['per_rank'][0]['chunks_retried'] >= 1 and j['per_rank'][0]['chunks_cpu'] >= 1 and j['per_rank'][0]['batches_cpu'] >= 1 and j['per_rank'][1]['faults'] == 0 and sum(r['batches_failed'] for r in j['per_rank']) == 0 and j['stripes_done'] == 12"
expect_rc "faults in a rank, the text summary" 0 mpi -n 1 -x FERRY_INJECT=kernel@batch=2 "$FERRY" run \
  --input "$TMP/in.bin" --output "$TMP/f.bin" --stripe-bytes 2M --batch-bytes 512K : -n 1 \
  "$FERRY" run --input "$TMP/in.bin" --output "$TMP/f.bin" --stripe-bytes 2M --batch-bytes 512K
expect_in "faults in a rank: the summary says which rank had them" "$TMP/out" "faults: 1 failed GPU attempt(s), 1 chunk(s) retried"

# ---- a rank killed mid-job, then --resume ----------------------------------------------------
wl="--workload fma --intensity 3000"
kwl="--workload fma --intensity 100000" # slow enough to kill a rank mid-job
head -c $((4 << 20)) "$TMP/in.bin" >"$TMP/kin.bin"
# shellcheck disable=SC2086
expect_rc "the slow fma reference" 0 "$FERRY" run --input "$TMP/kin.bin" --output "$TMP/kref.bin" $kwl --quiet
# shellcheck disable=SC2086
expect_rc "the fma reference" 0 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/fref.bin" $wl --quiet
done_records() { # finished stripes in the journal files of $1
  python3 - "$1" <<'PY'
import glob, struct, sys
n = 0
for f in glob.glob(sys.argv[1] + '.journal.*'):
    b = open(f, 'rb').read()
    for i in range(0, len(b) - 47, 48):
        magic, kind = struct.unpack_from('<II', b, i)
        n += magic == 0x3152464a and kind == 2
print(n)
PY
}
# shellcheck disable=SC2086
mpi -n 3 "$FERRY" run --input "$TMP/kin.bin" --output "$TMP/k.bin" $kwl --stripe-bytes 128K \
  --json >"$TMP/k.out" 2>"$TMP/k.err" &
mpirun_pid=$!
victim=""
for _ in $(seq 1 600); do
  if [ "$(done_records "$TMP/k.bin")" -ge 3 ]; then
    for p in $(pgrep -f -- "--output $TMP/k.bin"); do
      if tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; fi
    done
    [ -n "$victim" ] && break
  fi
  sleep 0.05
done
if [ -n "$victim" ]; then
  kill -9 "$victim"
  wait $mpirun_pid
  krc=$?
  if [ $krc -ne 0 ]; then ok "a rank killed mid-job: the job fails (exit $krc)"; else bad "a rank killed mid-job: the job exited 0"; fi
  expect_in "a rank killed mid-job: rank 0 names the stripes not finished, by rank" "$TMP/k.err" "claimed and not finished: rank"
  expect_in "a rank killed mid-job: and says how to finish" "$TMP/k.err" "with --resume to finish it"
  grep "the job stopped" "$TMP/k.err" | sed 's/^/# /' | head -2
  before=$(done_records "$TMP/k.bin")
  # shellcheck disable=SC2086
  expect_rc "resume with other stripes: refused" 1 mpi -n 2 "$FERRY" run --input "$TMP/kin.bin" \
    --output "$TMP/k.bin" $kwl --stripe-bytes 256K --resume
  expect_in "resume with other stripes: says the journal is of another job" "$TMP/err" "of another job"
  # shellcheck disable=SC2086
  expect_rc "--resume finishes it" 0 mpi -n 2 "$FERRY" run --input "$TMP/kin.bin" \
    --output "$TMP/k.bin" $kwl --stripe-bytes 128K --resume --json
  cp "$TMP/out" "$TMP/r.json"
  if cmp -s "$TMP/k.bin" "$TMP/kref.bin"; then ok "resumed: the output is one process's"; else bad "resumed: the output differs"; fi
  json_check "resumed: the $before stripes finished before are not run again, the rest are" "$TMP/r.json" \
    "j['stripes_resumed'] == $before < 32 and j['stripes_done'] + j['stripes_resumed'] == j['stripes'] == 32"
  json_check "resumed: names the stripes rank 1 held when it died" "$TMP/r.json" \
    "'rank 1: stripe(s) ' in j['unfinished'] and j['stripes_unfinished'] >= 1"
  echo "# killed rank 1 after $before finished stripes; resume: $(python3 -c "import json;j=json.load(open('$TMP/r.json'));print(j['stripes_done'],'run;',j['stripes_unfinished'],'claimed and unfinished:',j['unfinished'])")"
else
  bad "a rank to kill: none found (the job ended before 3 stripes were journaled?)"
  wait $mpirun_pid
fi

# ---- --verify under MPI: each rank checks its batches against the CPU reference ---------------
# shellcheck disable=SC2086
expect_rc "--verify full" 0 mpi -n 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/v.bin" $wl \
  --stripe-bytes 4M --batch-bytes 1M --verify full --json
cp "$TMP/out" "$TMP/v.json"
if cmp -s "$TMP/v.bin" "$TMP/fref.bin"; then ok "--verify full: the output is one process's"; else bad "--verify full: the output differs"; fi
json_check "--verify full: every batch (24) and byte checked by the ranks" "$TMP/v.json" \
  "j['verify'] == 'full' and j['verified'] and j['batches_checked'] == 24 and j['bytes_checked'] == 24 << 20 and j['batches_check_failed'] == 0 and sum(r['batches_checked'] for r in j['per_rank']) == 24"
# shellcheck disable=SC2086
expect_rc "--verify sample" 0 mpi -n 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/v.bin" $wl \
  --stripe-bytes 4M --batch-bytes 512K --verify sample
expect_in "--verify sample: the summary says how much was checked" "$TMP/out" "verify    sample: 3 batch(es), 1.50 MiB, checked against the CPU reference: all match"

# ---- a rank on a slower simulated device takes fewer stripes -------------------------------
# sim_pace 200: each simulated device runs 200x slower in real time (the host's work is then
# small beside it), so ranks that take stripes in real time see their devices' rates: rank 0 on
# the A100 PCIe profile (a link half the H200's), rank 1 on the H200. Each alone first, then
# both: the slower one takes fewer stripes, and the job's time is held against the ideal split
# in proportion to the rates alone (the issue's target: within 10%; the test holds 25% on a
# shared CI machine, and prints the figure; docs/mpi.md has the measurements).
export FERRY_SIM_PACE=200
head -c $((128 << 20)) /dev/urandom >"$TMP/bin.bin"
a100="$(dirname "$0")/../../profiles/a100-pcie.json"
expect_rc "the A100 alone" 0 mpi -n 1 "$FERRY" run --profile "$a100" --input "$TMP/bin.bin" \
  --output "$TMP/ba.bin" --stripe-bytes 4M --json
cp "$TMP/out" "$TMP/ba.json"
expect_rc "the H200 alone" 0 mpi -n 1 "$FERRY" run --input "$TMP/bin.bin" --output "$TMP/bh.bin" \
  --stripe-bytes 4M --json
cp "$TMP/out" "$TMP/bh.json"
expect_rc "a slower rank" 0 mpi -n 1 "$FERRY" run --profile "$a100" --input "$TMP/bin.bin" \
  --output "$TMP/bb.bin" --stripe-bytes 4M --json : -n 1 "$FERRY" run --input "$TMP/bin.bin" \
  --output "$TMP/bb.bin" --stripe-bytes 4M --json
cp "$TMP/out" "$TMP/bb.json"
unset FERRY_SIM_PACE
if cmp -s "$TMP/bb.bin" "$TMP/bh.bin" && cmp -s "$TMP/ba.bin" "$TMP/bh.bin"; then ok "a slower rank: the output is one process's"; else bad "a slower rank: the output differs"; fi
python3 - "$TMP/ba.json" "$TMP/bh.json" "$TMP/bb.json" <<'PY' && ok "a slower rank: fewer stripes, the job within 25% of the ideal split" || bad "a slower rank: the stripes or the job's time"
import json, sys
a, h, b = (json.load(open(f)) for f in sys.argv[1:4])
ra, rh = a['gbps'], h['gbps']  # GB/s in real time, each alone
ideal = b['bytes'] / 1e9 / (ra + rh)
ratio = b['seconds'] / ideal
st = [r['stripes'] for r in b['per_rank']]
print('# alone: A100 %.3f GB/s, H200 %.3f GB/s; together %.3f s, ideal %.3f s: %.3f of the ideal; '
      'stripes A100 %d, H200 %d (in proportion: %.1f)' % (ra, rh, b['seconds'], ideal, ratio, st[0],
      st[1], b['stripes'] * ra / (ra + rh)))
assert 'A100' in b['per_rank'][0]['device'] and 'H200' in b['per_rank'][1]['device'], b['per_rank']
assert rh > 1.5 * ra, (ra, rh)  # the pace makes the slower device slower in real time
assert st[0] < st[1] and sum(st) == b['stripes'] == 32, st
assert ratio <= 1.25, ratio
PY

# ---- what is refused -------------------------------------------------------------------------
expect_rc "--resume outside MPI" 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/x.bin" --resume
expect_in "--resume outside MPI: says where it applies" "$TMP/err" "only for a job over MPI ranks"
expect_rc "no files under mpirun" 2 mpi -n 2 "$FERRY" run --bytes 1M
expect_in "no files under mpirun: says what is needed" "$TMP/err" "--input FILE and --output FILE"
expect_rc "stdin under mpirun" 2 mpi -n 2 "$FERRY" run --input - --output "$TMP/x.bin"
expect_rc "resume with no journal" 1 mpi -n 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/out1.bin" \
  --journal "$TMP/none" --resume
expect_in "resume with no journal: says so" "$TMP/err" "no journal"
expect_rc "stripes that cut a float" 1 mpi -n 2 "$FERRY" run --input "$TMP/in.bin" --output "$TMP/x.bin" --stripe-bytes 1001
expect_in "stripes that cut a float: names the granularity" "$TMP/err" "granularity"
finish
