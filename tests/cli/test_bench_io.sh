#!/usr/bin/env bash
# `ferry bench io FILE`: a read of a file whose size is no multiple of the request, its JSON,
# --bytes as a read limit, --write making a new file and refusing an existing one (--force
# replaces it), a directory, a FIFO (without blocking) and a missing file refused, tmpfs read
# buffered (its files live in the page cache), a file system that refuses O_DIRECT (a preloaded
# shim) read and written buffered and saying so, and every bad flag value refused by name.
. "$(dirname "$0")/lib.sh"

head -c $((9 * 1048576 + 4097)) /dev/urandom >"$TMP/in.bin"
expect_rc "read" 0 "$FERRY" bench io "$TMP/in.bin" --request-bytes 4M --depth 8
expect_in "read: the rate" "$TMP/out" "GB/s  9441281 bytes in"
expect_in "read: request size and depth" "$TMP/out" "requests of 4.00 MiB, depth 8"
expect_rc "read --json" 0 "$FERRY" bench io "$TMP/in.bin" --json
cp "$TMP/out" "$TMP/read.json"
json_check "read --json: the members" "$TMP/read.json" \
  "j['command'] == 'bench io' and j['mode'] == 'read' and j['bytes'] == 9441281 and j['request_bytes'] == 8388608 and j['depth'] == 16 and isinstance(j['direct'], bool) and j['gbps'] >= 0 and j['seconds'] >= 0 and j['ok']"
expect_rc "read --bytes limit" 0 "$FERRY" bench io "$TMP/in.bin" --bytes 5M --json
json_check "read --bytes: at most that many" "$TMP/out" "j['bytes'] == 5242880"
: >"$TMP/empty.bin"
expect_rc "empty file" 0 "$FERRY" bench io "$TMP/empty.bin" --json
json_check "empty file: 0 bytes" "$TMP/out" "j['bytes'] == 0 and j['gbps'] == 0"

# ---- --write ---------------------------------------------------------------------------------
expect_rc "write" 0 "$FERRY" bench io "$TMP/w.bin" --write --bytes 5000001 --json
json_check "write --json" "$TMP/out" "j['mode'] == 'write' and j['bytes'] == 5000001"
if [ "$(stat -c %s "$TMP/w.bin")" = 5000001 ]; then ok "write: the size"; else bad "write: size $(stat -c %s "$TMP/w.bin")"; fi
# every 8-byte little-endian word holds its offset (the last one cut at the file's end)
python3 - "$TMP/w.bin" <<'PY' && ok "write: each word holds its offset" || bad "write: the pattern"
import struct, sys
d = open(sys.argv[1], 'rb').read()
whole = b''.join(struct.pack('<Q', o) for o in range(0, len(d) + 8, 8))[:len(d)]
sys.exit(0 if d == whole else 1)
PY
expect_rc "write refuses an existing file" 1 "$FERRY" bench io "$TMP/in.bin" --write --bytes 1M
expect_in "write: why" "$TMP/err" "exists"
if [ "$(stat -c %s "$TMP/in.bin")" = 9441281 ]; then ok "write: the existing file untouched"; else bad "write touched the existing file"; fi
expect_rc "write --force replaces it" 0 "$FERRY" bench io "$TMP/w.bin" --write --bytes 1M --force
if [ "$(stat -c %s "$TMP/w.bin")" = 1048576 ]; then ok "write --force: the new size"; else bad "write --force: size"; fi
expect_rc "write --force onto a directory" 1 "$FERRY" bench io "$TMP" --write --bytes 1M --force
expect_in "write --force onto a directory: why" "$TMP/err" "is a directory"
expect_rc "write without --bytes" 2 "$FERRY" bench io "$TMP/new.bin" --write
expect_in "write without --bytes: why" "$TMP/err" "--bytes"
expect_rc "--force without --write" 2 "$FERRY" bench io "$TMP/in.bin" --force

# ---- what is not a regular file, or not there --------------------------------------------
expect_rc "missing file" 1 "$FERRY" bench io "$TMP/missing.bin"
expect_in "missing file: name and errno text" "$TMP/err" "open '$TMP/missing.bin' for read: No such file or directory"
expect_rc "directory" 1 "$FERRY" bench io "$TMP"
expect_in "directory: why" "$TMP/err" "is a directory"
mkfifo "$TMP/fifo"
expect_rc "FIFO (refused, not waited on)" 1 timeout 10 "$FERRY" bench io "$TMP/fifo"
expect_in "FIFO: why" "$TMP/err" "is a FIFO"
expect_rc "no FILE" 2 "$FERRY" bench io
expect_in "no FILE: why" "$TMP/err" "io needs a FILE"
expect_rc "FILE after the flags" 0 "$FERRY" bench io --bytes 1M --json "$TMP/in.bin"
json_check "FILE after the flags: that file read" "$TMP/out" "j['bytes'] == 1048576"
expect_rc "two FILEs" 2 "$FERRY" bench io "$TMP/in.bin" "$TMP/in.bin"
expect_in "two FILEs: the second named" "$TMP/err" "unknown argument '$TMP/in.bin'"
expect_rc "no FILE, flags only" 2 "$FERRY" bench io --json
expect_in "no FILE: why" "$TMP/err" "io needs a FILE"

# ---- tmpfs: buffered (its files live in the page cache: O_DIRECT, where a kernel takes it,
# bypasses nothing), and said so -----------------------------------------------------------
shm=/dev/shm/ferry-bench-io-$$
if [ -d /dev/shm ] && head -c 3000000 /dev/urandom >"$shm"; then
  expect_rc "tmpfs read" 0 "$FERRY" bench io "$shm"
  expect_in "tmpfs: buffered, said so" "$TMP/out" "buffered (the file system refused O_DIRECT, or keeps the file in the page cache: tmpfs)"
  expect_rc "tmpfs read --json" 0 "$FERRY" bench io "$shm" --json
  json_check "tmpfs: not O_DIRECT" "$TMP/out" "j['direct'] == False and j['bytes'] == 3000000"
  rm -f "$shm"
else
  ok "# skip tmpfs: no /dev/shm"
fi

# ---- a file system that refuses O_DIRECT, whatever this kernel's tmpfs does: fcntl's
# F_SETFL with O_DIRECT fails with EINVAL through a preloaded shim, as on such a file system
cat >"$TMP/refuse_direct.c" <<'CEOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    if (cmd == F_SETFL && (arg & O_DIRECT)) {
        errno = EINVAL;
        return -1;
    }
    int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl");
    return real(fd, cmd, arg);
}
CEOF
if cc -shared -fPIC -o "$TMP/refuse_direct.so" "$TMP/refuse_direct.c" -ldl 2>"$TMP/cc.err"; then
  expect_rc "O_DIRECT refused: read" 0 env LD_PRELOAD="$TMP/refuse_direct.so" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$FERRY" bench io "$TMP/in.bin"
  expect_in "O_DIRECT refused: buffered, said so" "$TMP/out" "buffered (the file system refused O_DIRECT, or keeps the file in the page cache: tmpfs)"
  expect_in "O_DIRECT refused: every byte" "$TMP/out" "GB/s  9441281 bytes in"
  expect_rc "O_DIRECT refused: write" 0 env LD_PRELOAD="$TMP/refuse_direct.so" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$FERRY" bench io "$TMP/wb.bin" --write --bytes 4097 --json
  json_check "O_DIRECT refused: write buffered" "$TMP/out" "j['direct'] == False and j['bytes'] == 4097"
  if [ "$(stat -c %s "$TMP/wb.bin")" = 4097 ]; then ok "O_DIRECT refused: the written size"; else bad "written size $(stat -c %s "$TMP/wb.bin")"; fi
else
  ok "# skip the O_DIRECT shim: no C compiler ($(head -1 "$TMP/cc.err"))"
fi

# ---- bad values, refused by name -----------------------------------------------------------
for v in 1M 5000000 17M 0 x; do
  expect_rc "--request-bytes $v" 2 "$FERRY" bench io "$TMP/in.bin" --request-bytes "$v"
  expect_in "--request-bytes $v: named" "$TMP/err" "--request-bytes"
done
for v in 0 7 33 x; do
  expect_rc "--depth $v" 2 "$FERRY" bench io "$TMP/in.bin" --depth "$v"
  expect_in "--depth $v: named" "$TMP/err" "--depth"
done
expect_rc "--bytes 0" 2 "$FERRY" bench io "$TMP/in.bin" --bytes 0
expect_in "--bytes 0: named" "$TMP/err" "--bytes"
expect_rc "--csv is not a flag of io" 2 "$FERRY" bench io "$TMP/in.bin" --csv
expect_in "--csv: named" "$TMP/err" "--csv"
expect_rc "unknown benchmark" 2 "$FERRY" bench disk
expect_in "unknown benchmark: the accepted ones" "$TMP/err" "copy, pipeline, io"
finish
