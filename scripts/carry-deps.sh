#!/usr/bin/env bash
# Prepare .carry/: the Debian packages ferry builds and tests with (cJSON, cmocka, libmicrohttpd, liburing,
# libxxhash), unpacked, for a machine that has no package manager (the GPU machine: libmicrohttpd's GnuTLS
# is there already). Run here; the GPU script
# (scripts/gpu-check.sh) points CMake and the loader at .carry/root. .carry/ is not tracked.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/debs .carry/root
(cd .carry/debs && apt-get download libcjson1 libcjson-dev libcmocka0 libcmocka-dev libmicrohttpd12 libmicrohttpd-dev liburing2 liburing-dev libxxhash0 libxxhash-dev python3-prometheus-client python3-decorator >/dev/null)
for d in .carry/debs/*.deb; do dpkg -x "$d" .carry/root; done
git rev-parse --short HEAD >.carry/commit 2>/dev/null || true
echo "carried: $(ls .carry/debs | tr '\n' ' ')"
