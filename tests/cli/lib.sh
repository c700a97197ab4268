# Helpers for CLI tests: each test script gets the ferry binary as $1.
set -u
FERRY=${1:?usage: $0 path/to/ferry}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export FERRY_BACKEND=sim
fails=0
passes=0

ok() { passes=$((passes + 1)); echo "ok - $1"; }
bad() { fails=$((fails + 1)); echo "not ok - $1"; }

# expect_rc NAME RC CMD...: run CMD, keep stdout/stderr in $TMP/out $TMP/err, check the status.
expect_rc() {
  local name=$1 want=$2
  shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then ok "$name (exit $got)"; else
    bad "$name: exit $got, expected $want"; sed 's/^/#   /' "$TMP/err" | head -5; fi
}

# expect_in NAME FILE TEXT: FILE contains TEXT (fixed string).
expect_in() {
  if grep -qF -- "$3" "$2"; then ok "$1"; else
    bad "$1: '$3' not in $(basename "$2")"; sed 's/^/#   /' "$2" | head -8; fi
}

# expect_not_in NAME FILE TEXT: FILE does not contain TEXT (fixed string).
expect_not_in() {
  if ! grep -qF -- "$3" "$2"; then ok "$1"; else
    bad "$1: '$3' found in $(basename "$2")"; grep -F -- "$3" "$2" | sed 's/^/#   /' | head -3; fi
}

# json_check NAME FILE PYTHON-EXPR: the expression over `j` (the parsed JSON) is true.
json_check() {
  if python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($3) else 1)" "$2" 2>"$TMP/pyerr"; then
    ok "$1"; else bad "$1: $3"; head -c 600 "$2" | sed 's/^/#   /'; echo; cat "$TMP/pyerr"; fi
}

finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
