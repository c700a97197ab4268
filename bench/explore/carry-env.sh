# Sourced by the device scripts here: the CUDA toolkit on PATH, the carried Debian packages
# (scripts/carry-deps.sh unpacks them in .carry/root) for the compiler and the loader, and $cfg,
# the CMake arguments of a Release build with the CUDA backend against them.
export PATH=/usr/local/cuda/bin:$PATH
root=$PWD/.carry/root
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu
export CPATH=$root/usr/include PYTHONPATH=$root/usr/lib/python3/dist-packages
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_WITH_CUDA=ON -DCMAKE_PREFIX_PATH=$root/usr"
cfg="$cfg -DCMAKE_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu -DCMAKE_INCLUDE_PATH=$root/usr/include"
export cfg

# build_gpu [TARGET...]: the GPU's name and driver into $OUT/machine.txt, then this tree with the
# CUDA backend into build-gpu (ferry and the TARGETs), its log in $OUT/build.log; on a failure
# the log's tail, and the script ends. With FERRY set (a binary bench/explore/prebuild.sh made)
# and no TARGET, that binary is build-gpu/ferry instead: no build on a short lease.
build_gpu() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
  if [ -n "${FERRY:-}" ] && [ $# -eq 0 ]; then
    mkdir -p build-gpu && cp "$FERRY" build-gpu/ferry && return
    echo "FERRY=$FERRY: no such binary"; exit 1
  fi
  # shellcheck disable=SC2086
  { cmake -S . -B build-gpu $cfg && cmake --build build-gpu -j 14 --target ferry "$@"; } \
    >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
}
