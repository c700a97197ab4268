#!/usr/bin/env bash
# `cmake --install` gives headers, libraries, the CMake package and ferry.pc; the example
# builds against the installed package with CMake and with pkg-config, shared and static, and
# runs; a user of the shared library needs no CUDA toolkit; libferry.so exports the API alone;
# the installed tree, moved to another prefix, finds its own profiles.
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
libso=$(find "$TMP/prefix" -name libferry.so | head -1)
libdir=$(dirname "$libso")
if [ -n "$libso" ] && [ -e "$libdir/libferry.a" ]; then ok "libferry.so and libferry.a installed"; else
  bad "libferry.so or libferry.a missing"; fi
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
# shellcheck disable=SC2086
expect_rc "configure example with find_package" 0 cmake -S "$src/examples" -B "$TMP/ex" $gen -DCMAKE_PREFIX_PATH="$TMP/prefix"
expect_rc "build example" 0 cmake --build "$TMP/ex"
expect_rc "run example (CMake build)" 0 "$TMP/ex/stream_scale"
expect_in "example verified" "$TMP/out" "batches ok"
expect_rc "build example with pkg-config" 0 sh -c "PKG_CONFIG_PATH=$(dirname "$pc") cc -o '$TMP/ex2' '$src/examples/stream_scale.c' \$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs --static ferry)"
expect_rc "run example (pkg-config build)" 0 env LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$TMP/ex2"
[ -n "$cfgdir" ] && ok "CMake package in $(basename "$cfgdir")"

# ---- the static library, from a project of C alone ----
# With the CUDA backend libferry.a holds cudart_static, which needs libstdc++ (__cxa_guard_*),
# librt, libdl and pthreads: the package and ferry.pc must bring them to a C link.
mkdir -p "$TMP/static-src"
cat >"$TMP/static-src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.24)
project(ferry_static_user LANGUAGES C)
find_package(ferry REQUIRED)
add_executable(stream_scale "$src/examples/stream_scale.c")
target_link_libraries(stream_scale PRIVATE ferry::ferry_static)
CMAKE
# shellcheck disable=SC2086
expect_rc "configure a C project with ferry::ferry_static" 0 cmake -S "$TMP/static-src" -B "$TMP/exs" $gen -DCMAKE_PREFIX_PATH="$TMP/prefix"
expect_rc "link it" 0 cmake --build "$TMP/exs"
expect_rc "run it (static, CMake)" 0 "$TMP/exs/stream_scale"
expect_in "static example verified" "$TMP/out" "batches ok"
if readelf -d "$TMP/exs/stream_scale" 2>/dev/null | grep -q 'libferry\.so'; then
  bad "the static example needs libferry.so"; else ok "the static example needs no libferry.so"; fi
expect_rc "link it with pkg-config --static" 0 sh -c "PKG_CONFIG_PATH=$(dirname "$pc") cc -o '$TMP/ex3' '$src/examples/stream_scale.c' \$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs --static ferry | sed 's/-lferry\\b/-l:libferry.a/')"
expect_rc "run it (static, pkg-config)" 0 "$TMP/ex3"
expect_in "static pkg-config example verified" "$TMP/out" "batches ok"

# ---- a user of the shared library needs no CUDA toolkit ----
# shellcheck disable=SC2086
expect_rc "configure the shared example without a CUDA toolkit" 0 cmake -S "$src/examples" -B "$TMP/ex-nocuda" $gen -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
expect_rc "build it" 0 cmake --build "$TMP/ex-nocuda"
# With the CUDA backend, asking for the static library without a toolkit fails, and says why.
if grep -q cudart_static "$pc"; then
  mkdir -p "$TMP/static-src2"
  sed 's/find_package(ferry REQUIRED)/find_package(ferry REQUIRED COMPONENTS static)/' \
    "$TMP/static-src/CMakeLists.txt" >"$TMP/static-src2/CMakeLists.txt"
  # shellcheck disable=SC2086
  expect_rc "COMPONENTS static with the toolkit" 0 cmake -S "$TMP/static-src2" -B "$TMP/exs2" $gen -DCMAKE_PREFIX_PATH="$TMP/prefix"
  # shellcheck disable=SC2086
  expect_rc "COMPONENTS static without a toolkit" 1 cmake -S "$TMP/static-src2" -B "$TMP/exs3" $gen -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
  cat "$TMP/out" >>"$TMP/err"
  expect_in "COMPONENTS static without a toolkit: says why" "$TMP/err" "needs the CUDA toolkit"
fi

# ---- libferry.so exports the API and nothing else ----
# Every dynamic symbol it defines is a ferry_ name that a public header declares.
grep -rhoE '\bferry_[A-Za-z0-9_]+[[:space:]]*\(' "$TMP/prefix/include" | tr -d ' (\t' | sort -u >"$TMP/declared"
nm -D --defined-only "$libso" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u >"$TMP/exported"
if [ -s "$TMP/exported" ] && grep -q '^ferry_runtime_create$' "$TMP/exported"; then ok "libferry.so exports the API"; else
  bad "libferry.so: no ferry_runtime_create among its exports"; fi
comm -23 "$TMP/exported" "$TMP/declared" >"$TMP/undeclared"
if [ ! -s "$TMP/undeclared" ]; then ok "libferry.so exports only what the headers declare"; else
  bad "libferry.so exports $(wc -l <"$TMP/undeclared") symbol(s) no header declares"; sed 's/^/#   /' "$TMP/undeclared"; fi

# ---- the installed tree, moved ----
# No FERRY_PROFILE: the simulator must find the profiles of the tree it runs from, also when
# the source tree it was built from is still there; a marked copy shows which one it read. A
# program of the user's, linked with the shared library, prints the device name it sees.
cat >"$TMP/name.c" <<'C'
#include <stdio.h>
#include <ferry.h>
int main(void)
{
    ferry_runtime_config_t cfg = FERRY_RUNTIME_CONFIG_INIT;
    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    cfg.backend = "sim";
    if (ferry_runtime_create(&cfg, &rt) != 0 || ferry_device_get(rt, 0, &dev) != 0 ||
        ferry_device_props(dev, &p) != 0) {
        fprintf(stderr, "%s\n", ferry_last_error());
        ferry_runtime_destroy(rt);
        return 1;
    }
    printf("device: %s\n", p.name);
    ferry_runtime_destroy(rt);
    return 0;
}
C
expect_rc "build a device lister with pkg-config" 0 sh -c "PKG_CONFIG_PATH=$(dirname "$pc") cc -o '$TMP/name' '$TMP/name.c' \$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs ferry)"
mv "$TMP/prefix" "$TMP/moved"
python3 - "$TMP/moved/share/ferry/profiles/h200.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["name"] = "NVIDIA H200 (simulated, moved)"
json.dump(p, open(sys.argv[1], "w"), indent=2)
PY
expect_rc "moved: ferry probe --backend sim" 0 env -u FERRY_PROFILE "$TMP/moved/bin/ferry" probe --backend sim
expect_in "moved: the moved tree's profile" "$TMP/out" "profile             $TMP/moved/share/ferry/profiles/h200.json"
expect_in "moved: the moved tree's device" "$TMP/out" "NVIDIA H200 (simulated, moved)"
expect_rc "moved: ferry run --backend sim" 0 env -u FERRY_PROFILE "$TMP/moved/bin/ferry" run --backend sim --bytes 16M
# The shared library finds the profiles beside itself, whatever program loads it.
movedlib=$TMP/moved${libdir#"$TMP/prefix"}
expect_rc "moved: a program linked with libferry.so" 0 env -u FERRY_PROFILE LD_LIBRARY_PATH="$movedlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$TMP/name"
expect_in "moved: libferry.so read the moved tree's profile" "$TMP/out" "device: NVIDIA H200 (simulated, moved)"
finish
