#!/usr/bin/env bash
# `cmake --install` gives headers, libraries, the CMake package and ferry.pc; the example
# builds against the installed package with CMake and with pkg-config, and runs.
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(dirname "$FERRY")
expect_rc "cmake --install" 0 cmake --install "$bin" --prefix "$TMP/prefix"
for f in include/ferry.h include/ferry/error.h bin/ferry share/ferry/profiles/h200.json; do
  if [ -e "$TMP/prefix/$f" ]; then ok "installed $f"; else bad "missing $f"; fi
done
pc=$(find "$TMP/prefix" -name ferry.pc | head -1)
cfgdir=$(dirname "$(find "$TMP/prefix" -name ferryConfig.cmake | head -1)")
if [ -n "$pc" ]; then ok "ferry.pc installed"; else bad "ferry.pc missing"; fi
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
# shellcheck disable=SC2086
expect_rc "configure example with find_package" 0 cmake -S "$src/examples" -B "$TMP/ex" $gen -DCMAKE_PREFIX_PATH="$TMP/prefix"
expect_rc "build example" 0 cmake --build "$TMP/ex"
expect_rc "run example (CMake build)" 0 "$TMP/ex/stream_scale"
expect_in "example verified" "$TMP/out" "batches ok"
expect_rc "build example with pkg-config" 0 sh -c "PKG_CONFIG_PATH=$(dirname "$pc") cc -o '$TMP/ex2' '$src/examples/stream_scale.c' \$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs --static ferry)"
expect_rc "run example (pkg-config build)" 0 env LD_LIBRARY_PATH="$TMP/prefix/lib:$TMP/prefix/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$TMP/ex2"
[ -n "$cfgdir" ] && ok "CMake package in $(basename "$cfgdir")"
finish
