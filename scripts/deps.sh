#!/usr/bin/env bash
# Install what ferry needs to build and test, from Debian's packages. As root it runs
# apt-get; otherwise it prints the exact command to run. Quiet when everything is present.
#   scripts/deps.sh          build + test dependencies
#   scripts/deps.sh --check  only report what is missing (exit 1 if anything is)
set -euo pipefail

# package  : a file (or command) that proves it is installed
need=(
  "cmake:/usr/bin/cmake"
  "ninja-build:/usr/bin/ninja"
  "gcc:/usr/bin/gcc"
  "clang:/usr/bin/clang"
  "libclang-rt-14-dev:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a"
  "pkg-config:/usr/bin/pkg-config"
  "libcjson-dev:/usr/include/cjson/cJSON.h"
  "libcmocka-dev:/usr/include/cmocka.h"
  # the metrics endpoint is served by libmicrohttpd
  "libmicrohttpd-dev:/usr/include/microhttpd.h"
  # files are read and written with io_uring (`ferry bench io`)
  "liburing-dev:/usr/include/liburing.h"
  # `ferry run` checks its output against XXH3 digests of the reference
  "libxxhash-dev:/usr/include/xxhash.h"
  # jobs across nodes (`mpirun -n N ferry run`, libferry_mpi): Open MPI
  "libopenmpi-dev:/usr/include/x86_64-linux-gnu/openmpi/mpi.h"
  "openmpi-bin:/usr/bin/mpirun"
  "python3:/usr/bin/python3"
  # the metrics tests parse ferry's exposition with a real Prometheus parser, and scrape it
  "python3-prometheus-client:/usr/lib/python3/dist-packages/prometheus_client/__init__.py"
  "curl:/usr/bin/curl"
  # the report tests render ferry's HTML pages headless and look at the screenshot
  "chromium:/usr/bin/chromium"
  "python3-pil:/usr/lib/python3/dist-packages/PIL/__init__.py"
  # the progress-bar test runs ferry on a pseudo-terminal with script(1)
  "bsdutils:/usr/bin/script"
  # the man-page test renders ferry.1 with man (groff comes with it) and finds it installed
  "man-db:/usr/bin/man"
)

missing=()
for entry in "${need[@]}"; do
  pkg=${entry%%:*}
  file=${entry#*:}
  if [ ! -e "$file" ] && ! dpkg -s "$pkg" >/dev/null 2>&1; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "missing packages: ${missing[*]}" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ferry needs these Debian packages: ${missing[*]}" >&2
  echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "scripts/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
