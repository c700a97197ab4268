#!/usr/bin/env bash
# Metrics: `ferry run --metrics-file` writes the Prometheus text format (parsed here with the
# real parser, python3-prometheus-client from Debian) with the run's numbers in it;
# `--metrics-addr localhost:0` serves /metrics while the run goes, and the values move;
# [::1] is served too (ferry bench); bad addresses and paths are refused by name;
# `ferry bench` serves and writes its cases, results and running pipeline.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3 # Debian's, which has python3-prometheus-client (scripts/deps.sh)
# Sanitizer builds generate and move data many times slower: the served runs below, which only
# need to outlast a few scrapes, are shorter there (4G took ThreadSanitizer past the test's
# 600 s on a busy 2-core machine).
run_bytes=4G bench_bytes=512M
if [ "${FERRY_TEST_SCALE:-}" = sanitizer ]; then run_bytes=1G bench_bytes=64M; fi

expect_rc "run with a metrics file" 0 "$FERRY" run --bytes 256M --batch-bytes 32M --metrics-file "$TMP/m.prom"
if "$PY" - "$TMP/m.prom" <<'PYEOF'; then ok "textfile parses, names, types and values right"; else bad "textfile"; fi
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
def val(name, **labels):
    for s in fams[name].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()) and s.name == name + "_total":
            return s.value
    raise KeyError(name)
assert fams["ferry_pipeline_batches"].type == "counter"
assert val("ferry_pipeline_batches", where="gpu") == 8, val("ferry_pipeline_batches", where="gpu")
assert val("ferry_pipeline_transfer_bytes", direction="h2d") == 256 << 20
assert fams["ferry_pipeline_slots_in_use"].type == "gauge"
h = fams["ferry_pipeline_batch_latency_seconds"]
assert h.type == "histogram"
count = [s for s in h.samples if s.name.endswith("_count")][0].value
assert count == 8, count
for name in fams:
    assert name.startswith("ferry_"), name
PYEOF
if ! ls "$TMP"/m.prom.tmp.* >/dev/null 2>&1; then ok "no temporary file left"; else bad "temporary file left"; fi

# The Grafana dashboard (docs/grafana/ferry.json) queries only series ferry exposes.
dash="$(dirname "$0")/../../docs/grafana/ferry.json"
if "$PY" - "$dash" "$TMP/m.prom" <<'PYEOF'; then ok "dashboard queries exposed series"; else bad "dashboard"; fi
import json, re, sys
from prometheus_client.parser import text_string_to_metric_families
d = json.load(open(sys.argv[1]))
names = set()
for f in text_string_to_metric_families(open(sys.argv[2]).read()):
    for s in f.samples:
        names.add(s.name)
exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
assert exprs
for e in exprs:
    for n in re.findall(r"\bferry_[a-z_]+", e):
        assert n in names, (n, e)
PYEOF

# The endpoint, scraped twice while a longer run goes on. `localhost` is resolved (issue 15,
# point 9): to 127.0.0.1 or ::1, whichever the resolver gives first.
"$FERRY" run --bytes "$run_bytes" --metrics-addr localhost:0 >"$TMP/run.out" 2>"$TMP/run.err" &
pid=$!
addr=""
for _ in $(seq 1 900); do # up to 90 s: sanitizer builds generate the data slowly
  addr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$TMP/run.err" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
case "$addr" in
  127.0.0.1:* | "[::1]:"*) ok "localhost:0 bound as a loopback address ($addr)" ;;
  *) bad "localhost:0 bound as '$addr'"; cat "$TMP/run.err" ;;
esac
curl -sfg --max-time 5 "http://$addr/metrics" >"$TMP/s1.prom"; r1=$?
code=$(curl -sg --max-time 5 -o /dev/null -w '%{http_code}' "http://$addr/other")
# Scrape until the chunk count moves (at most 30 s: sanitizer builds run slowly).
if "$PY" - "http://$addr/metrics" "$TMP/s1.prom" <<'PYEOF'; then ok "values move as the job runs"; else bad "values did not move"; fi
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
def chunks(text):
    for f in text_string_to_metric_families(text):
        if f.name == "ferry_pipeline_chunks":
            return f.samples[0].value
    raise KeyError
first = chunks(open(sys.argv[2]).read())
deadline = time.time() + 30
while time.time() < deadline:
    time.sleep(0.2)
    now = chunks(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
    if now > first:
        sys.exit(0)
sys.exit(1)
PYEOF
wait "$pid"; rrc=$?
if [ $r1 -eq 0 ]; then ok "scraped with curl"; else bad "scrape failed ($r1)"; fi
if [ "$code" = "404" ]; then ok "other paths are 404"; else bad "other path: $code"; fi
if [ $rrc -eq 0 ]; then ok "run finished"; else bad "run exit $rrc"; fi

expect_rc "not loopback" 1 "$FERRY" run --bytes 1M --metrics-addr 0.0.0.0:9100
expect_in "loopback required" "$TMP/err" "loopback"
expect_rc "bad address" 1 "$FERRY" run --bytes 1M --metrics-addr localhost
expect_in "accepted form named" "$TMP/err" "127.0.0.1:PORT"
expect_rc "IPv6 not loopback" 1 "$FERRY" run --bytes 1M --metrics-addr "[::]:9100"
expect_in "IPv6 loopback required" "$TMP/err" "not loopback"
expect_rc "IPv6 without brackets" 1 "$FERRY" run --bytes 1M --metrics-addr "::1:9100"
expect_in "brackets asked for" "$TMP/err" "[::1]:PORT"
expect_rc "unwritable metrics file" 1 "$FERRY" run --bytes 1M --metrics-file /nonexistent/dir/m.prom
expect_in "path named" "$TMP/err" "/nonexistent/dir/m.prom"

# `ferry bench` serves and writes them too (issue 15, point 10): the cases done, each result,
# and the pipeline of the pass that runs.
expect_rc "bench copy with a metrics file" 0 "$FERRY" bench copy --sizes 4K,64K --reps 2 --no-pageable --metrics-file "$TMP/bc.prom"
if "$PY" - "$TMP/bc.prom" <<'PYEOF'; then ok "bench copy: cases and results in the file"; else bad "bench copy metrics"; fi
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
assert fams["ferry_bench_cases"].type == "counter"
done = fams["ferry_bench_cases"].samples
assert done[0].labels == {"bench": "copy"} and done[0].value == 6, done
planned = fams["ferry_bench_cases_planned"].samples
assert planned[0].value == 6, planned
r = fams["ferry_bench_copy_bytes_per_second"].samples
assert len(r) == 12, r  # 2 sizes x 3 directions x best, median
assert {s.labels["bytes"] for s in r} == {"4096", "65536"}
assert all(s.value > 1e8 for s in r), r
PYEOF
# ... on IPv6 loopback in brackets (issue 15, point 9) where the host has it.
baddr="[::1]:0"
if ! python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  echo "# this host has no IPv6 loopback: bench served on 127.0.0.1"; baddr=127.0.0.1:0
fi
"$FERRY" bench pipeline --bytes "$bench_bytes" --chunks 256K,1M --streams 1 --intensity 0 --metrics-addr "$baddr" >"$TMP/bp.out" 2>"$TMP/bp.err" &
pid=$!
if "$PY" - "$TMP/bp.err" "$pid" "$baddr" <<'PYEOF'; then ok "bench pipeline: endpoint on $baddr serves the running pass"; else bad "bench pipeline endpoint"; fi
import os, re, sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
err, pid = sys.argv[1], int(sys.argv[2])
def alive():
    try:
        os.kill(pid, 0)
        return open("/proc/%d/stat" % pid).read().split()[2] != "Z"
    except OSError:
        return False
url = None
deadline = time.time() + 120
while url is None and time.time() < deadline and alive():
    m = re.search(r"metrics on (http://\S+/metrics)", open(err).read())
    url = m.group(1) if m else None
    time.sleep(0.05)
assert url, "no endpoint address"
if sys.argv[3] == "[::1]:0":
    assert url.startswith("http://[::1]:"), url
seen_pipeline = seen_planned = False
while time.time() < deadline and alive() and not (seen_pipeline and seen_planned):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        break
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if s.name == "ferry_pipeline_chunks_total" and s.labels.get("pipeline") == "measured":
                seen_pipeline = True
            if s.name == "ferry_bench_cases_planned" and s.value == 2:
                seen_planned = True
    time.sleep(0.05)
print("# pipeline series seen: %s, cases planned seen: %s" % (seen_pipeline, seen_planned))
assert seen_pipeline and seen_planned
PYEOF
wait "$pid"; rrc=$?
if [ $rrc -eq 0 ]; then ok "bench pipeline finished"; else bad "bench pipeline exit $rrc"; cat "$TMP/bp.err"; fi
expect_rc "bench: not loopback" 1 "$FERRY" bench copy --sizes 4K --reps 1 --metrics-addr 0.0.0.0:9100
expect_in "bench: loopback required" "$TMP/err" "loopback"
expect_not_in "bench: refused before any case" "$TMP/out" "h2d"
expect_rc "bench: unwritable metrics file" 1 "$FERRY" bench copy --sizes 4K --reps 1 --metrics-file /nonexistent/dir/b.prom
expect_in "bench: path named" "$TMP/err" "/nonexistent/dir/b.prom"
finish
