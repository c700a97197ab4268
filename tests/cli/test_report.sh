#!/usr/bin/env bash
# --report FILE.html on `ferry bench copy`, `ferry bench pipeline` and `ferry run`: each page is
# well-formed, self-contained (no script, nothing fetched), names the run, holds its charts as
# <svg data-chart=...> with the series the run measured (values checked against --json), and
# renders in headless Chromium to a page that is not blank. Bad paths are refused before the
# run. Needs Debian's chromium and python3-pil (scripts/deps.sh); fails, not skips, without.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3 # Debian's, which has python3-pil (scripts/deps.sh)

# FERRY_TEST_BROWSER=none (the GPU machine, which has no package manager) checks the pages
# without rendering them, and says so; nothing else turns the rendering off.
BROWSER=${FERRY_TEST_BROWSER:-chromium}
if [ "$BROWSER" = none ]; then
  echo "# FERRY_TEST_BROWSER=none: the pages are checked, not rendered"
elif [ "$BROWSER" != chromium ]; then
  bad "FERRY_TEST_BROWSER='$BROWSER': accepted are chromium (the default) and none"
  finish
  exit 1
elif ! command -v chromium >/dev/null 2>&1; then
  bad "chromium is not installed: run scripts/deps.sh (it installs chromium and python3-pil)"
  finish
  exit 1
elif ! "$PY" -c 'import PIL' 2>/dev/null; then
  bad "python3-pil is not installed for $PY: run scripts/deps.sh"
  finish
  exit 1
fi
VERSION=$("$FERRY" --version | awk '{print $2}')

# check_page NAME FILE CHECKS: the structural checks common to every page, then CHECKS (a
# python expression over `charts`, {data-chart: ElementTree of its <svg>}, and `page`, the text).
check_page() {
  local name=$1 file=$2 checks=$3
  if "$PY" - "$file" "$VERSION" "$checks" >"$TMP/py.out" 2>&1 <<'PYEOF'; then ok "$name"; else bad "$name"; sed 's/^/#   /' "$TMP/py.out" | tail -15; fi
import re, sys, xml.etree.ElementTree as ET
from html.parser import HTMLParser
path, version, checks = sys.argv[1:4]
page = open(path, encoding="utf-8").read()
VOID = {"meta", "br", "img", "hr", "input", "link"}
SVG_VOID = {"line", "path", "circle", "rect"}  # written self-closed, or with a <title> inside
class Check(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.tags = [], []
    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)
    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()
c = Check()
c.feed(page)
c.close()
assert c.stack == [], f"unclosed: {c.stack}"
names = [t for t, _ in c.tags]
assert names[:1] == ["html"] and page.startswith("<!DOCTYPE html>"), "not an HTML document"
for banned in ("script", "link", "img", "iframe", "object", "embed"):
    assert banned not in names, f"<{banned}> in a self-contained page"
assert not any("src" in a or "href" in a for _, a in c.tags), "a src/href attribute"
assert re.findall(r"https?://", page) == ["http://"] * page.count("http://www.w3.org/2000/svg"), \
    "a URL other than the SVG namespace"
# the identity of the run
assert re.search(r"<h1>ferry (run|bench copy|bench pipeline): report</h1>", page), "title"
assert re.search(r"<code>ferry (run|bench) [^<]*--report [^<]*\.html", page), "command line"
assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", page), "date"
assert "NVIDIA H200 (simulated)" in page and "simulated: times are virtual" in page, "device"
assert f"<td>{version}</td>" in page, "ferry version"
# every chart parses as XML and is named
charts = {}
for m in re.finditer(r"<svg .*?</svg>", page, re.S):
    svg = ET.fromstring(m.group(0))
    charts[svg.get("data-chart")] = svg
NS = "{http://www.w3.org/2000/svg}"
def all_(svg, tag):
    return svg.findall(f".//{NS}{tag}")
def titles(svg, tag):
    return [e.find(f"{NS}title").text for e in all_(svg, tag) if e.find(f"{NS}title") is not None]
def texts(svg):
    return [e.text or "" for e in all_(svg, "text")]
ok = eval(checks)
assert ok is True, f"check failed: {checks}"
PYEOF
}

# shot NAME FILE: headless Chromium renders FILE; the PNG has many colours, and at least two of
# the series colours cover some pixels (series, op rectangles, bars): the charts were drawn.
shot() {
  local name=$1 file=$2 png=$2.png
  [ "$BROWSER" = none ] && return 0
  rm -f "$png"
  timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$TMP/chromium" --screenshot="$png" --window-size=1200,2400 \
    "file://$file" >"$TMP/chromium.log" 2>&1
  if "$PY" - "$png" >"$TMP/py.out" 2>&1 <<'PYEOF'; then ok "$name renders"; else bad "$name renders"; sed 's/^/#   /' "$TMP/py.out"; tail -3 "$TMP/chromium.log" | sed 's/^/#   /'; fi
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
assert im.size == (1200, 2400), im.size
colours = im.getcolors(1 << 22)
assert len(colours) > 40, f"{len(colours)} colours: blank page"
palette = [(0x00, 0x72, 0xb2), (0xd5, 0x5e, 0x00), (0x00, 0x9e, 0x73), (0xcc, 0x79, 0xa7)]
drawn = {c: n for n, c in colours if c in palette and n >= 30}
assert len(drawn) >= 2 and sum(drawn.values()) >= 200, f"chart colours drawn: {drawn}"
PYEOF
}

# ---- bench copy ---------------------------------------------------------------------------
expect_rc "bench copy --report" 0 "$FERRY" bench copy --backend sim --sizes 4K,64K,1M,16M --reps 2 --json --report "$TMP/r1.html"
cp "$TMP/out" "$TMP/r1.json"
if [ -s "$TMP/r1.html" ] && [ ! -e "$TMP/r1.html.tmp" ]; then ok "copy: page in place, no .tmp left"; else bad "copy: page missing or .tmp left"; fi
check_page "copy: page well-formed, self-contained, named" "$TMP/r1.html" "set(charts) == {'copy-bandwidth'}"
check_page "copy: 6 series of 4 points, the link's line" "$TMP/r1.html" \
  "len(all_(charts['copy-bandwidth'], 'path')) == 6 and all(p.get('d').count('L') == 3 for p in all_(charts['copy-bandwidth'], 'path')) and len(all_(charts['copy-bandwidth'], 'circle')) == 24 and any('63.0 GB/s per direction (theoretical' in t for t in titles(charts['copy-bandwidth'], 'line'))"
check_page "copy: the both series and rows say they come from the sum" "$TMP/r1.html" \
  "'both at once, (H2D+D2H sum) / 2, pinned' in texts(charts['copy-bandwidth'])"
if grep -qF "<td>both (H2D+D2H sum)</td>" "$TMP/r1.html"; then ok "copy: table rows say both is the sum"; else
  bad "copy: table rows of both"; fi
check_page "copy: axes labelled with units, log scale, legend" "$TMP/r1.html" \
  "any('bytes per copy (log scale)' == t for t in texts(charts['copy-bandwidth'])) and any('GB/s' in t for t in texts(charts['copy-bandwidth'])) and '16 MiB' in texts(charts['copy-bandwidth']) and 'H2D, pageable' in texts(charts['copy-bandwidth'])"
check_page "copy: H2D pinned markers rise left to right" "$TMP/r1.html" \
  "(lambda c: [float(e.get('cx')) for e in c] == sorted(float(e.get('cx')) for e in c) and [float(e.get('cy')) for e in c] == sorted((float(e.get('cy')) for e in c), reverse=True))([e for e in all_(charts['copy-bandwidth'], 'circle') if e.find(NS + 'title').text.startswith('H2D, pinned')])"
# the tooltips carry the numbers --json printed in the same run
"$PY" - "$TMP/r1.json" "$TMP/r1.html" <<'PYEOF' && ok "copy: chart values match --json" || bad "copy: chart values differ from --json"
import json, re, sys
j = json.load(open(sys.argv[1]))
page = open(sys.argv[2]).read()
names = {"h2d": "H2D", "d2h": "D2H", "both": "both at once, (H2D+D2H sum) / 2"}
sizes = {4096: "4.00 KiB", 65536: "64.0 KiB", 1 << 20: "1.00 MiB", 16 << 20: "16.0 MiB"}
shown = {m.group(1): float(m.group(2)) for m in re.finditer(r"<title>([^<]*), ([\d.]+) GB/s</title>", page)}
assert len(shown) == 24, len(shown)
for r in j["results"]:
    per_dir = r["best_gbps"] / (2 if r["direction"] == "both" else 1)
    key = f"{names[r['direction']]}, {r['memory']}: {sizes[r['bytes']]}"
    assert abs(shown[key] - per_dir) <= 0.006, (key, shown[key], per_dir)
PYEOF
shot "copy page" "$TMP/r1.html"

# ---- bench pipeline -----------------------------------------------------------------------
expect_rc "bench pipeline --report --compare" 0 "$FERRY" bench pipeline --backend sim --bytes 16M --chunks 256K,1M,4M --streams 1,2 --intensity 0 --compare --report "$TMP/r2.html"
expect_in "pipeline: text output names the report" "$TMP/out" "# report: $TMP/r2.html"
check_page "pipeline: page well-formed, self-contained, named" "$TMP/r2.html" "set(charts) == {'pipeline-throughput'}"
check_page "pipeline: a series per stream count, simulator dashed, ceiling line" "$TMP/r2.html" \
  "(lambda c: len(all_(c, 'path')) == 4 and sum(1 for p in all_(c, 'path') if p.get('stroke-dasharray')) == 2 and all(p.get('d').count('L') == 2 for p in all_(c, 'path')) and any(t.startswith('copy ceiling in this run') for t in titles(c, 'line')) and '2 compute streams (simulator)' in texts(c) and 'chunk size (log scale)' in texts(c))(charts['pipeline-throughput'])"
check_page "pipeline: 4 MiB chunks plotted above 256 KiB" "$TMP/r2.html" \
  "(lambda m: m['1 compute stream: 4.00 MiB'] < m['1 compute stream: 256.0 KiB'])({t.rsplit(',', 1)[0]: float(e.get('cy')) for e in all_(charts['pipeline-throughput'], 'circle') for t in [e.find(NS + 'title').text]})"
shot "pipeline page" "$TMP/r2.html"

# ---- run ----------------------------------------------------------------------------------
# 96 chunks of 1 MiB: only the first 64 are recorded and timed for the timeline (plus the one
# chunk in 31 sampled as without a report: chunk 93); the timeline ends where the H2D records
# do, as chunk 65's H2D is not recorded, so 60 to 64 of them are done in it.
echo stale >"$TMP/r3.html"
expect_rc "run --report" 0 "$FERRY" run --backend sim --bytes 96M --batch-bytes 8M --chunk-bytes 1M --coalesce-bytes 0 --json --report "$TMP/r3.html"
json_check "run: json names the report, 64 + 1 chunks timed" "$TMP/out" "j['report'].endswith('r3.html') and j['chunks'] == 96 and j['chunks_timed'] == 65"
if ! grep -q stale "$TMP/r3.html" && [ ! -e "$TMP/r3.html.tmp" ]; then ok "run: old page replaced, no .tmp left"; else bad "run: old page kept or .tmp left"; fi
check_page "run: page well-formed, self-contained, named" "$TMP/r3.html" "set(charts) == {'timeline', 'engine-utilisation'}"
check_page "run: timeline rows per stream, ops of the first 64 chunks" "$TMP/r3.html" \
  "(lambda c, ops, done: ['stream 0 (H2D)', 'stream 1 (compute)', 'stream 2 (compute)', 'stream 3 (D2H)'] == [t for t in texts(c) if t.startswith('stream')] and 60 <= done <= 64 and done * 3 <= len(ops) <= 64 * 3 and {o.split(',')[0] for o in ops} == {'H2D', 'compute', 'D2H'} and all(re.search(r', batch \d+ chunk \d+: 1.00 MiB, [\d.]+ to [\d.]+ (us|ms)$', o) for o in ops))(charts['timeline'], titles(charts['timeline'], 'rect'), int(re.search(r': (\d+) chunk\(s\) done$', charts['timeline'].find(NS + 'title').text).group(1)))"
check_page "run: utilisation bars per engine and stream, H2D busy" "$TMP/r3.html" \
  "(lambda b: len(b) == 7 and b[0].startswith('H2D engine: ') and 50 < float(b[0].split(': ')[1].split('%')[0]) <= 100)(titles(charts['engine-utilisation'], 'rect'))"
check_page "run: summary table" "$TMP/r3.html" \
  "'96.0 MiB in 12 batch(es)' in page and '12 on the GPU, 0 on the CPU, 0 failed' in page and 'OK: 96.0 MiB of 96.0 MiB match' in page"
shot "run page" "$TMP/r3.html"

# with --trace the whole run is recorded; the report still shows the first 64 chunks
expect_rc "run --report --trace" 0 "$FERRY" run --backend sim --bytes 96M --chunk-bytes 1M --coalesce-bytes 0 --json --report "$TMP/r4.html" --trace "$TMP/t4.json"
json_check "run --trace: every chunk timed" "$TMP/out" "j['chunks_timed'] == 96"
json_check "run --trace: the trace has every chunk" "$TMP/t4.json" "sum(1 for e in j['traceEvents'] if e['ph'] == 'X') == 96 * 3 * 2"
check_page "run --trace: timeline of the first 64 chunks" "$TMP/r4.html" "charts['timeline'].find(NS + 'title').text.endswith(': 64 chunk(s) done')"

# ---- bad paths: refused before any work, by name ------------------------------------------
expect_rc "run: --report in a missing directory" 2 "$FERRY" run --bytes 1M --report "$TMP/missing/r.html"
expect_in "missing directory named" "$TMP/err" "--report '$TMP/missing/r.html': directory '$TMP/missing' does not exist"
expect_in "accepted paths said" "$TMP/err" "accepted: a file path"
if [ ! -s "$TMP/out" ]; then ok "missing directory: nothing ran"; else bad "missing directory: the run went ahead"; fi
expect_rc "bench copy: --report a directory" 2 "$FERRY" bench copy --sizes 4K --reps 1 --report "$TMP"
expect_in "directory refused" "$TMP/err" "is a directory, not a file"
expect_rc "bench pipeline: --report in a missing directory" 2 "$FERRY" bench pipeline --bytes 1M --chunks 1M --report "$TMP/no/such/r.html"
expect_in "pipeline: missing directory named" "$TMP/err" "directory '$TMP/no/such' does not exist"
expect_rc "run: --report under a file" 2 "$FERRY" run --bytes 1M --report "$TMP/r1.html/x.html"
expect_in "a file is not a directory" "$TMP/err" "is not a directory"
expect_rc "run: --report without a value" 2 "$FERRY" run --bytes 1M --report
expect_in "missing value named" "$TMP/err" "--report needs a value"
expect_rc "run: --report empty" 2 "$FERRY" run --bytes 1M --report ""
expect_in "empty path refused" "$TMP/err" "empty path"
finish
