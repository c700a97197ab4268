#!/usr/bin/env bash
# The include-layer check (DESIGN.md, "Layers"): every `#include "..."` in src/, tools/ and
# include/ must point down the rank table below, or stay inside its own folder. It fails, naming
# the file, the line and the edge, on an edge that points up, on two folders that include each
# other (either way), on a tool that includes anything but the public headers and its own
# files, on a public header that includes a private one, and on an include it cannot find.
# Usage: scripts/check-layers.sh [ROOT]   (ROOT: the tree to check; default: this repository)
#        scripts/check-layers.sh --self-test
set -euo pipefail

# The layers, bottom first: a folder may include its own files and those of folders of a lower
# rank. Folders of one rank are siblings: one may include another, never both ways. A subfolder
# listed here is a folder of its own (the simulator and the CUDA backend sit above backend.h
# and may not include each other); one not listed belongs to the folder above it.
RANKS='
base          0
backend       1
proc          1
backend/sim   2
backend/cuda  2
core          3
sched         4
fault         4
monitor       4
workloads     4
measure       4
io            4
pipeline      5
mpi           6
'

# Known edges that point up, "file include", each with the reason it is still there (none
# today; a line here needs its reason above it).
EXCEPTIONS='
'

rank_of() { # folder -> rank, or nothing when the folder is not in the table
    awk -v f="$1" '$1 == f { print $2 }' <<<"$RANKS"
}

folder_of() { # path relative to src/ -> its folder in the rank table
    local dir=${1%/*} top=${1%%/*}
    [[ $dir == "$1" ]] && dir=.
    if [[ -n $(rank_of "$dir") ]]; then
        printf '%s\n' "$dir"
    else
        printf '%s\n' "$top"
    fi
}

is_exception() {
    grep -qxF "$1 $2" <<<"$EXCEPTIONS"
}

# Check the tree at $1; prints one line per violation and returns 1 when there is any.
check() {
    local root=$1 bad=0 file line inc rel from to rf rt edges
    edges=$(mktemp)
    # shellcheck disable=SC2064
    trap "rm -f '$edges'" RETURN
    while IFS= read -r file; do
        rel=${file#"$root"/}
        while IFS=: read -r line inc; do
            inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$inc")
            case $rel in
            include/*)
                if [[ ! -f $root/include/$inc ]]; then
                    echo "$rel:$line: public header includes \"$inc\", which is not a public header"
                    bad=1
                fi
                continue
                ;;
            tools/*)
                if [[ ! -f $root/include/$inc && ! -f $(dirname "$file")/$inc ]]; then
                    echo "$rel:$line: tool includes \"$inc\": tools use the public headers and their own files only"
                    bad=1
                fi
                continue
                ;;
            esac
            # src/: a public header, a file of src/ by its path from src/, or one beside it.
            if [[ -f $root/include/$inc ]]; then
                continue
            elif [[ -f $root/src/$inc ]]; then
                to=$(folder_of "$inc")
            elif [[ -f $(dirname "$file")/$inc ]]; then
                to=$(folder_of "$(dirname "${rel#src/}")/$inc")
            else
                echo "$rel:$line: cannot find \"$inc\" (in include/, src/ or beside the file)"
                bad=1
                continue
            fi
            from=$(folder_of "${rel#src/}")
            [[ $from == "$to" ]] && continue
            rf=$(rank_of "$from")
            rt=$(rank_of "$to")
            if [[ -z $rf || -z $rt ]]; then
                [[ -z $rf ]] && rt=$from || rt=$to
                echo "$rel:$line: edge $from -> $to: folder $rt is not in the rank table (scripts/check-layers.sh)"
                bad=1
                continue
            fi
            if is_exception "$rel" "$inc"; then
                continue
            fi
            if ((rt > rf)); then
                echo "$rel:$line: edge $from -> $to (\"$inc\") points up: $from is rank $rf, $to rank $rt"
                bad=1
            fi
            echo "$from $to $rel:$line" >>"$edges"
        done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" || true)
    done < <(find "$root/src" "$root/tools" "$root/include" -type f \
        \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.def' \) 2>/dev/null | sort)
    # Two folders that include each other: name one edge of each direction.
    local pairs
    pairs=$(awk '{ e[$1 " " $2] = $3 }
        END { for (k in e) { split(k, f, " ");
                  if (f[1] < f[2] && ((f[2] " " f[1]) in e))
                      printf "%s and %s include each other: %s, %s\n", f[1], f[2], e[k], e[f[2] " " f[1]] } }' "$edges")
    if [[ -n $pairs ]]; then
        echo "$pairs"
        bad=1
    fi
    return $bad
}

# A tree with one fault of each kind must fail, naming each; the same tree without them passes.
self_test() {
    local t out rc=0
    t=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$t'" RETURN
    mkdir -p "$t/include/ferry" "$t/src/base" "$t/src/core" "$t/src/sched" "$t/src/monitor" \
        "$t/src/backend/sim" "$t/src/backend/cuda" "$t/tools/ferry"
    echo '#include "ferry/x.h"' >"$t/include/ferry.h"
    : >"$t/include/ferry/x.h"
    echo '#include "ferry.h"' >"$t/src/base/base.h"
    echo '#include "base/base.h"' >"$t/src/backend/sim/sim.h"
    printf '#include "sim.h"\n#include "backend/sim/sim.h"\n' >"$t/src/backend/sim/sim.c"
    echo '#include "base/base.h"' >"$t/src/backend/cuda/cuda.h"
    echo '#include "backend/sim/sim.h"' >"$t/src/core/runtime.h"
    echo '#include "core/runtime.h"' >"$t/src/sched/sched.h"
    echo '#include "core/runtime.h"' >"$t/src/monitor/m.h"
    echo '#include "sched/sched.h"' >"$t/src/monitor/m.c"
    printf '#include "ferry.h"\n#include "cli.h"\n' >"$t/tools/ferry/main.c"
    : >"$t/tools/ferry/cli.h"
    if ! out=$(check "$t"); then
        echo "self-test: a clean tree fails:"
        echo "$out"
        return 1
    fi
    expect() { # the check of $t fails with a line matching $1
        if out=$(check "$t"); then
            echo "self-test: the check passes a tree where it must find: $1"
            rc=1
        elif ! grep -qE -- "$1" <<<"$out"; then
            echo "self-test: the check fails without finding: $1"
            echo "$out"
            rc=1
        fi
    }
    echo '#include "core/runtime.h"' >>"$t/src/base/base.h"
    expect '^src/base/base.h:2: edge base -> core \("core/runtime.h"\) points up'
    sed -i '2d' "$t/src/base/base.h"
    echo '#include "backend/cuda/cuda.h"' >>"$t/src/backend/sim/sim.h"
    echo '#include "backend/sim/sim.h"' >>"$t/src/backend/cuda/cuda.h"
    expect '^backend/cuda and backend/sim include each other: src/backend/cuda/cuda.h:2, src/backend/sim/sim.h:2'
    sed -i '2d' "$t/src/backend/sim/sim.h" "$t/src/backend/cuda/cuda.h"
    echo '#include "monitor/m.h"' >>"$t/src/sched/sched.h"
    expect '^monitor and sched include each other'
    sed -i '2d' "$t/src/sched/sched.h"
    echo '#include "core/runtime.h"' >>"$t/tools/ferry/main.c"
    expect '^tools/ferry/main.c:3: tool includes "core/runtime.h"'
    sed -i '3d' "$t/tools/ferry/main.c"
    echo '#include "base/base.h"' >>"$t/include/ferry/x.h"
    expect '^include/ferry/x.h:1: public header includes "base/base.h"'
    : >"$t/include/ferry/x.h"
    mkdir -p "$t/src/extra" && echo '#include "base/base.h"' >"$t/src/extra/e.c"
    expect '^src/extra/e.c:1: edge extra -> base: folder extra is not in the rank table'
    rm -r "$t/src/extra"
    echo '#include "nowhere.h"' >>"$t/src/core/runtime.h"
    expect '^src/core/runtime.h:2: cannot find "nowhere.h"'
    sed -i '2d' "$t/src/core/runtime.h"
    if ! out=$(check "$t"); then
        echo "self-test: the tree with its faults removed fails:"
        echo "$out"
        rc=1
    fi
    [[ $rc == 0 ]] && echo "check-layers self-test: ok"
    return $rc
}

if [[ ${1:-} == --self-test ]]; then
    self_test
    exit
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if out=$(check "$root"); then
    echo "check-layers: ok (no include edge points up, no two folders include each other)"
else
    echo "$out"
    echo "check-layers: the includes above break the layer order (scripts/check-layers.sh)"
    exit 1
fi
