#!/usr/bin/env bash
# The examples in README.md and docs/*.md still run and still print what they show.
#
# The convention (docs that follow it are checked, so that they cannot go stale):
# - A fenced block opened with ```sh is runnable: every line of it that starts with `$ ` is a
#   command (a line ending in a backslash continues on the next), run by sh in a scratch
#   directory of its own per file, with `ferry` (or `build/ferry`) the binary under test,
#   FERRY_BACKEND=sim and a `profiles/` beside it. The lines that follow a command, up to the
#   next `$ ` line or the block's end, are its sample output.
# - A ```sh block without `$ ` lines (`make run  # ...`) runs only its lines that start with
#   `ferry `, without a sample. Any other fence (```, ```text, ```c) is never run: use one for
#   what needs a GPU, a program that is not there, a fixed port or much time.
# - A command must exit 0, unless the next command is `$ echo $?`: its sample line is the
#   status the command must exit with (that line is not run).
# - A sample matches when each of its lines, numbers left out, is a line of what the command
#   printed (stdout and stderr, in any order). Numbers with their units (`22.9 ms`, `1.00 GiB`,
#   `46.9 GB/s`, `98.6%`, a pid) match any number, so that the docs stay true when a figure
#   moves; the words must not move. `...` matches anything: a line of its own stands for lines
#   left out, within a line for the text left out. A sample line that is a JSON object matches
#   a printed one that has each of its keys with the same value (any number for a number).
# - FERRY_TEST_SCALE=sanitizer: `ferry run` moves at most 64 MiB (`--bytes` lowered or added);
#   such a command must still exit as shown, but its sample, which depends on the size, is not
#   compared.
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/../.." && pwd)
# The commands run in directories of their own: the binary by its absolute path.
FERRY=$(cd "$(dirname "$FERRY")" && pwd)/$(basename "$FERRY")
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_MAX_CONNECTIONS CUDA_DEVICE_MAX_COPY_CONNECTIONS NO_COLOR

cat >"$TMP/check.py" <<'PY'
import json, os, re, subprocess, sys

ferry, src, tmp, scale = sys.argv[1:5]
files = sys.argv[5:]
sanitizer = scale == "sanitizer"
CAP = 64 << 20
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
                    r"(?:\s?(?:ns|us|µs|ms|s|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|GB/s|MB/s|TB/s|K|M|G|T|%|x))?"
                    r"(?![A-Za-z0-9])")


def norm(line):
    return " ".join(NUMBER.sub("#", line).split())


def pattern(line):
    # `... ms`: the unit goes with the number left out.
    line = re.sub(r"\.\.\.\s?(?:ns|us|µs|ms|s|B|KiB|MiB|GiB|TiB|GB/s|MB/s|TB/s|%)(?![A-Za-z0-9])",
                  "...", line)
    parts = [re.escape(p) for p in norm(line).split("...")]
    return re.compile(".*".join(parts))


def as_json(line):
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def json_within(want, have):
    """A JSON sample holds when every key it shows is there with the same value, numbers
    excepted: a command may add keys (a version, a timestamp) without making the docs stale."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and json_within(v, have[k])
                                              for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(
            json_within(a, b) for a, b in zip(want, have))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        return isinstance(have, (int, float)) and not isinstance(have, bool)
    if isinstance(want, str) and isinstance(have, str):
        return norm(want) == norm(have)
    return want == have


def examples(path):
    """(line number, command, sample lines) for each runnable command of @path."""
    out = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+)\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        body = lines[i + 1:j]
        start = i + 2
        i = j + 1
        if info != "sh":
            continue
        if not any(b.startswith("$ ") for b in body):
            for k, b in enumerate(body):
                if re.match(r"^(build/)?ferry ", b):
                    out.append((start + k, b, None))
            continue
        k = 0
        while k < len(body):
            if not body[k].startswith("$ "):
                k += 1
                continue
            no = start + k
            cmd = body[k][2:]
            while cmd.endswith("\\") and k + 1 < len(body):
                k += 1
                cmd += "\n" + body[k]
            k += 1
            sample = []
            while k < len(body) and not body[k].startswith("$ "):
                sample.append(body[k])
                k += 1
            out.append((no, cmd, sample))
    return out


def scaled(cmd):
    """The command as run under FERRY_TEST_SCALE=sanitizer, and whether it was changed."""
    if not re.search(r"(^|\s)ferry run\b", cmd):
        return cmd, False

    def lower(m):
        v = int(m.group(2)) * UNITS[m.group(3).upper()]
        return m.group(1) + ("64M" if v > CAP else m.group(2) + m.group(3))

    new = re.sub(r"(--bytes[ =])(\d+)([KkMmGgTt]?)\b", lower, cmd)
    if "--bytes" not in new and "--input" not in new:
        new = re.sub(r"(ferry run)\b", r"\1 --bytes 64M", new, count=1)
    return new, new != cmd


os.makedirs(os.path.join(tmp, "bin"), exist_ok=True)
wrapper = os.path.join(tmp, "bin", "ferry")
with open(wrapper, "w") as f:
    f.write('#!/bin/sh\nexec "%s" "$@"\n' % ferry)
os.chmod(wrapper, 0o755)
env = dict(os.environ)
env["PATH"] = os.path.join(tmp, "bin") + os.pathsep + env.get("PATH", "")
env["FERRY_BACKEND"] = "sim"

ran = failed = 0
for path in files:
    name = os.path.relpath(path, src) if path.startswith(src) else os.path.basename(path)
    work = os.path.join(tmp, "work", re.sub(r"[^A-Za-z0-9]", "_", name))
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(os.path.join(work, "profiles")):
        os.symlink(os.path.join(src, "profiles"), os.path.join(work, "profiles"))
    cmds = examples(path)
    for n, (no, cmd, sample) in enumerate(cmds):
        if cmd.strip() == "echo $?":
            continue
        want = 0
        if n + 1 < len(cmds) and cmds[n + 1][1].strip() == "echo $?":
            status = [s for s in cmds[n + 1][2] if s.strip()]
            want = int(status[0]) if status and status[0].strip().isdigit() else -1
        run = re.sub(r"(^|\n|\s)build/ferry\b", r"\1ferry", cmd)
        changed = False
        if sanitizer:
            run, changed = scaled(run)
        where = "%s:%d: %s" % (name, no, cmd.split("\n")[0])
        ran += 1
        try:
            p = subprocess.run(["sh", "-c", run], cwd=work, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=300 if sanitizer else 120)
            got, text = p.returncode, p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            got, text = "timeout", (e.stdout or b"").decode("utf-8", "replace")
        problems = []
        if got != want:
            problems.append("exit %s, the docs show %s" % (got, want))
        if sample and not changed:
            have = [norm(a) for a in text.split("\n")]
            have_json = [j for j in map(as_json, text.split("\n")) if j is not None]
            for s in sample:
                if not s.strip() or s.strip() == "...":
                    continue
                want_json = as_json(s)
                if want_json is not None:
                    if not any(json_within(want_json, h) for h in have_json):
                        problems.append("JSON sample not printed: " + s.strip())
                    continue
                pat = pattern(s)
                if not any(pat.fullmatch(h) for h in have):
                    problems.append("sample line not printed: " + s.strip())
        if problems:
            failed += 1
            print("not ok - %s" % where)
            for p_ in problems:
                print("#   " + p_)
            print("#   it printed:")
            for a in text.rstrip("\n").split("\n")[:40]:
                print("#     " + a)
        else:
            print("ok - %s%s" % (where, " (scaled down, sample not compared)" if changed else ""))
print("docs: %d command(s) run, %d failed" % (ran, failed))
sys.exit(0 if ran > 0 and failed == 0 else 1)
PY

scale=${FERRY_TEST_SCALE:-}
check() { python3 "$TMP/check.py" "$FERRY" "$src" "$1" "$scale" "${@:2}"; }

# The check itself can fail: a sample that no longer matches, a command that exits 1 where the
# docs show 0 and one that exits 0 where they show 2 are each reported.
mkdir -p "$TMP/self"
cat >"$TMP/self/stale.md" <<'MD'
```sh
$ ferry env --connections 16 --format sh
export CUDA_DEVICE_MAX_CONNECTIONS=16 # a comment ferry does not print
$ ferry run --bytes 1M --input /nonexistent/file
$ ferry env --connections 16 --format sh
$ echo $?
2
```
MD
check "$TMP/self" "$TMP/self/stale.md" >"$TMP/self.out" 2>&1
if grep -q "docs: 3 command(s) run, 3 failed" "$TMP/self.out"; then ok "the check catches stale docs"; else
  bad "the check missed stale docs"; sed 's/^/#   /' "$TMP/self.out"; fi
cat >"$TMP/self/fresh.md" <<'MD'
```sh
$ ferry env --connections 16 --format sh
export CUDA_DEVICE_MAX_CONNECTIONS=16
$ ferry env --connections 33 --format sh
ferry env: --connections: 33 is out of range: accepted 1..32 (0 means unset to CUDA, above 32 is undocumented)
...
$ echo $?
2
```
MD
check "$TMP/self" "$TMP/self/fresh.md" >"$TMP/self.out" 2>&1
if grep -q "docs: 2 command(s) run, 0 failed" "$TMP/self.out"; then ok "the check passes docs that hold"; else
  bad "the check failed docs that hold"; sed 's/^/#   /' "$TMP/self.out"; fi

# The project's own docs.
check "$TMP/docs" "$src/README.md" "$src"/docs/*.md >"$TMP/docs.out" 2>&1
status=$?
cat "$TMP/docs.out"
if [ $status -eq 0 ]; then ok "every runnable example in the docs runs and prints its sample"; else
  bad "$(tail -1 "$TMP/docs.out")"; fi
finish
