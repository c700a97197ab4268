#!/usr/bin/env bash
# The manual page and the bash completion, both generated from the option and command tables:
# the page is valid roff that man renders, names every command and option, and installs where
# `man ferry` finds it; the completion completes commands, flags and enum values, and offers
# every flag each command's --help shows.
. "$(dirname "$0")/lib.sh"
bin=$(dirname "$FERRY")

# ---- the manual page ------------------------------------------------------------------------
expect_rc "options --man" 0 "$FERRY" options --man
cp "$TMP/out" "$TMP/ferry.1"
expect_in "a man page" "$TMP/ferry.1" ".TH FERRY 1"
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -z "$TMP/ferry.1" 2>"$TMP/groff.err"
  if [ $? -eq 0 ] && [ ! -s "$TMP/groff.err" ]; then ok "groff: no warnings"; else
    bad "groff warns"; sed 's/^/#   /' "$TMP/groff.err" | head -5; fi
fi
# A minimized system (Ubuntu's images, the GPU machine's among them) has a `man` that only says
# so: there is nothing to render with, so the man checks are left out there, saying why.
real_man() { command -v man >/dev/null && ! man -l "$TMP/ferry.1" 2>&1 | grep -q "has been minimized"; }
if command -v man >/dev/null && ! real_man; then
  echo "# man is the stub of a minimized system: its checks are skipped here"
elif command -v man >/dev/null; then
  MANWIDTH=100 man -l "$TMP/ferry.1" >"$TMP/man.txt" 2>"$TMP/man.err"
  if [ -s "$TMP/man.txt" ]; then ok "man -l renders it"; else bad "man -l rendered nothing"; cat "$TMP/man.err"; fi
  expect_in "rendered: NAME" "$TMP/man.txt" "ferry - stream data through NVIDIA GPUs"
  tr -s ' \n' '  ' <"$TMP/man.txt" >"$TMP/man1line.txt" # justified text: runs of spaces
  "$FERRY" options --json >"$TMP/opts.json"
  missing=$(python3 - "$TMP/opts.json" "$TMP/man.txt" <<'PYEOF'
import json, sys
opts = json.load(open(sys.argv[1]))["options"]
page = open(sys.argv[2]).read()
print(" ".join(o["flag"] for o in opts if o["flag"] not in page or o["env"] not in page))
PYEOF
)
  if [ -z "$missing" ]; then ok "every option's flag and variable in the page"; else bad "not in the page: $missing"; fi
  for c in run probe bench options connections env exec; do
    expect_in "command $c in the page" "$TMP/man1line.txt" "see ferry $c --help"
  done
else
  bad "man is missing (man-db): scripts/deps.sh installs it"
fi
expect_rc "--man and --json together" 2 "$FERRY" options --man --json

# ---- installed: `man ferry` finds it --------------------------------------------------------
expect_rc "cmake --install" 0 cmake --install "$bin" --prefix "$TMP/prefix"
page=$(find "$TMP/prefix" -path '*/man1/ferry.1' | head -1)
if [ -n "$page" ] && [ "${page#"$TMP/prefix/"}" = "share/man/man1/ferry.1" ]; then ok "installed share/man/man1/ferry.1"; else
  bad "ferry.1 not in share/man/man1: '$page'"; fi
if [ -f "$TMP/prefix/share/bash-completion/completions/ferry" ]; then ok "installed share/bash-completion/completions/ferry"; else
  bad "completion not installed"; fi
if cmp -s "$page" "$TMP/ferry.1"; then ok "the installed page is the generated one"; else bad "installed page differs"; fi
if real_man; then
  # man-db looks beside each PATH directory (../share/man): the prefix's bin is enough.
  where=$(env -u MANPATH PATH="$TMP/prefix/bin:/usr/bin:/bin" man -w ferry 2>&1)
  if [ "$where" = "$TMP/prefix/share/man/man1/ferry.1" ]; then ok "man -w ferry finds the installed page"; else
    bad "man -w ferry: '$where'"; fi
  env -u MANPATH PATH="$TMP/prefix/bin:/usr/bin:/bin" MANPAGER=cat MANWIDTH=100 man ferry >"$TMP/man2.txt" 2>&1
  expect_in "man ferry shows it" "$TMP/man2.txt" "ferry - stream data through NVIDIA GPUs"
fi

# ---- bash completion ------------------------------------------------------------------------
expect_rc "options --bash-completion" 0 "$FERRY" options --bash-completion
cp "$TMP/out" "$TMP/ferry.bash"
if bash -n "$TMP/ferry.bash"; then ok "completion parses"; else bad "completion: bash -n"; fi
if cmp -s "$TMP/ferry.bash" "$TMP/prefix/share/bash-completion/completions/ferry"; then ok "installed completion is the generated one"; else
  bad "installed completion differs"; fi
# comp WORDS...: the completions bash offers for the command line WORDS (the last is the word
# being completed), one per line, sorted.
comp() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ferry; printf "%s\n" "${COMPREPLY[@]}" | sort' \
    _ "$TMP/ferry.bash" "$@"
}
got=$(bash -c 'source "$1"; complete -p ferry' _ "$TMP/ferry.bash")
if [ "$got" = "complete -F _ferry ferry" ]; then ok "complete -p ferry"; else bad "complete -p ferry: '$got'"; fi
same() { # NAME WANT GOT
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got '$(echo $3)', wanted '$(echo $2)'"; fi
}
same "commands" "$(printf '%s\n' --help --version bench connections env exec options probe run | sort)" "$(comp ferry '')"
same "r -> run" "run" "$(comp ferry r)"
same "run --ch" "--chunk-bytes" "$(comp ferry run --ch)"
same "run --backend values" "$(printf '%s\n' auto cuda sim)" "$(comp ferry run --backend '')"
same "run --workload values" "$(printf '%s\n' copy fma scale)" "$(comp ferry run --workload '')"
same "run --log-level values" "$(printf '%s\n' debug error info warn)" "$(comp ferry run --log-level '')"
same "bench subcommands" "$(printf '%s\n' copy io items pipeline)" "$(comp ferry bench '')"
same "bench copy --siz" "--sizes" "$(comp ferry bench copy --siz)"
same "env --format values" "$(printf '%s\n' docker k8s profile.d sh systemd)" "$(comp ferry env --format '')"
same "options --m" "$(printf '%s\n' --man --markdown)" "$(comp ferry options --m)"
same "env takes no option flags" "" "$(comp ferry env --dep)"
same "connections --ordering" "strict" "$(comp ferry connections --ordering '')"
touch "$TMP/some-input.bin"
same "run --input completes files" "$TMP/some-input.bin" "$(comp ferry run --input "$TMP/some-in")"
same "exec -- completes commands" "bash" "$(comp ferry exec --connections 8 -- bas | grep -x bash | sort -u)"
# Every flag a command's --help shows is offered for it.
for c in run probe bench options connections env exec; do
  offered=$(comp ferry "$c" --)
  [ "$c" = bench ] && offered=$(comp ferry bench copy --)
  "$FERRY" "$c" --help >"$TMP/help" 2>&1
  miss=""
  for f in $(grep -oE -- '--[a-z][a-z0-9-]*' "$TMP/help" | sort -u); do
    grep -qx -- "$f" <<<"$offered" || miss="$miss $f"
  done
  if [ -z "$miss" ]; then ok "$c: every flag of --help completes"; else bad "$c: --help flags not completed:$miss"; fi
done
finish
