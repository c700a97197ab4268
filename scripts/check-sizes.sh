#!/usr/bin/env bash
# ferry's size limits on its own code: no file in src/ or tools/ over 900 lines, no function over
# 120 lines unless the line above its signature says why in a comment holding "long:"
# (clang-format puts a function's braces alone in column 0, which is what this reads).
# Usage: check-sizes.sh [ROOT]   (ROOT: the source tree, default: this script's parent)
#        check-sizes.sh --self-test
set -uo pipefail
max_file=900
max_fn=120

check() {
    local root=$1 bad=0 f n
    while IFS= read -r f; do
        n=$(wc -l <"$f")
        if [ "$n" -gt $max_file ]; then
            echo "check-sizes: ${f#"$root"/}: $n lines (at most $max_file)"
            bad=1
        fi
        awk -v file="${f#"$root"/}" -v max=$max_fn '
            /^[A-Za-z_].*\(/ { sig = $0; why_at = (prev ~ /long:/) }
            /^\{$/ { start = NR; name = sig; why = why_at }
            /^\}/ && start {
                if (NR - start - 1 > max && !why) {
                    sub(/\(.*/, "", name); n = split(name, w, /[ *]+/)
                    printf "check-sizes: %s:%d: %s is %d lines (at most %d; a comment with \"long:\" above it says why)\n", file, start, w[n], NR - start - 1, max
                    bad = 1
                }
                start = 0
            }
            { prev = $0 }
            END { exit bad }' "$f" || bad=1
    done < <(find "$root/src" "$root/tools" -name '*.c' -o -name '*.cu' -o -name '*.h' | sort)
    return $bad
}

if [ "${1:-}" = --self-test ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/src/a" "$tmp/tools"
    { echo "int f(void)"; echo "{"; for _ in $(seq 121); do echo "    ;"; done; echo "}"; } \
        >"$tmp/src/a/long.c"
    out=$(check "$tmp") && { echo "check-sizes self-test: a 121-line function passed"; exit 1; }
    grep -q "long.c:2: f is 121 lines" <<<"$out" || { echo "self-test: wrong text: $out"; exit 1; }
    { echo "/* long: one table */"; echo "int f(void)"; echo "{"; for _ in $(seq 121); do echo "    ;"; done; echo "}"; } \
        >"$tmp/src/a/long.c"
    check "$tmp" >/dev/null || { echo "check-sizes self-test: a function said long was refused"; exit 1; }
    for _ in $(seq 901); do echo ";"; done >"$tmp/tools/big.c"
    out=$(check "$tmp") && { echo "check-sizes self-test: a 901-line file passed"; exit 1; }
    grep -q "big.c: 901 lines" <<<"$out" || { echo "self-test: wrong text: $out"; exit 1; }
    echo "check-sizes self-test: ok"
    exit 0
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if check "$root"; then
    echo "check-sizes: ok (files at most $max_file lines, functions at most $max_fn)"
else
    exit 1
fi
