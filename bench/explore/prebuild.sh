#!/usr/bin/env bash
# Build, on this machine (the CUDA toolkit at /usr/local/cuda, no GPU needed), the ferry binaries a
# short lease runs instead of building there (host-cost.sh and no-regress.sh with
# PREBUILT=.carry/bin): this tree as .carry/bin/ferry-HEAD and each carried tree .carry/v-NAME.tgz
# as .carry/bin/ferry-NAME. Release, the CUDA backend (sm_90 code and compute_75 PTX), without
# MPI (the GPU machine has no Open MPI); the Debian libraries they load are carried in .carry/root.
# KERNEL_MAX=N builds them with the copy kernel on for pieces up to N bytes
# (FERRY_CUDA_PIECE_KERNEL_MAX). VARIANTS="NAME:FLAGS ..." builds this tree again with the C
# flags FLAGS (e.g. prof:-DFERRY_PROF=1, nospells:-DFERRY_CUDA_WAIT_SPELLS=0) as
# .carry/bin/ferry-NAME. It copies the GPU tests of this tree to .carry/tests and builds
# bench/explore/slab_graph.cu as .carry/bin/slab_graph.
set -eu
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p .carry/bin
build() { # build SRC NAME [ferry-only [CFLAGS]]
  local b=/tmp/ferry-prebuild-$2
  local flags="${KERNEL_MAX:+-DFERRY_CUDA_PIECE_KERNEL_MAX=${KERNEL_MAX}u} ${4:-}"
  cmake -S "$1" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON \
    -DFERRY_WITH_MPI=OFF "-DCMAKE_C_FLAGS=$flags" \
    >"$b.log" 2>&1 && cmake --build "$b" ${3:+--target ferry} >>"$b.log" 2>&1 ||
    { tail -20 "$b.log"; exit 1; }
  cp "$b/ferry" ".carry/bin/ferry-$2"
  echo "ferry-$2: $(md5sum <".carry/bin/ferry-$2" | cut -c1-12)"
}
build "$PWD" HEAD
mkdir -p .carry/tests && cp /tmp/ferry-prebuild-HEAD/tests/gpu_test_* .carry/tests/
nvcc -O2 -arch=sm_90 -o .carry/bin/slab_graph bench/explore/slab_graph.cu
for v in ${VARIANTS:-}; do
  build "$PWD" "${v%%:*}" ferry-only "${v#*:}"
done
for t in .carry/v-*.tgz; do
  [ -e "$t" ] || continue
  v=${t#.carry/v-}; v=${v%.tgz}
  rm -rf "/tmp/ferry-prebuild-src-$v" && mkdir -p "/tmp/ferry-prebuild-src-$v"
  tar xzf "$t" -C "/tmp/ferry-prebuild-src-$v"
  build "/tmp/ferry-prebuild-src-$v" "$v" ferry-only
done
{
  git rev-parse --short HEAD
  [ -z "${KERNEL_MAX:-}" ] || echo "copy kernel up to $KERNEL_MAX"
  [ -z "${VARIANTS:-}" ] || echo "variants $VARIANTS"
} >.carry/commit
