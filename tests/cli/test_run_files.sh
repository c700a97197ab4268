#!/usr/bin/env bash
# `ferry run` with regular files through the asynchronous source and sink (run_files.c): the
# output is the input byte for byte (copy) for sizes that are not multiples of the batch, the
# request or 4 KiB, an empty and a 1-byte file, on the disk and in tmpfs (/dev/shm), with
# --bytes as a limit; a file into stdout and stdin into a file; scale's output matches a stream
# run's (the same bytes by another path).
. "$(dirname "$0")/lib.sh"

# copy_check NAME IN OUT ARGS...: copy IN to OUT and compare
copy_check() {
  local name=$1 in=$2 out=$3
  shift 3
  expect_rc "$name" 0 "$FERRY" run --workload copy --input "$in" --output "$out" --quiet "$@"
  if cmp -s "$in" "$out"; then ok "$name: output identical"; else
    bad "$name: output differs ($(stat -c %s "$out" 2>/dev/null || echo none) bytes)"; fi
}

for n in 0 1 4095 4097 1048576 3145733; do
  head -c "$n" /dev/urandom >"$TMP/in$n.bin"
done
copy_check "empty file" "$TMP/in0.bin" "$TMP/out0.bin"
copy_check "1-byte file" "$TMP/in1.bin" "$TMP/out1.bin"
copy_check "4095 bytes, batches of 1000" "$TMP/in4095.bin" "$TMP/o.bin" --batch-bytes 1000
copy_check "4097 bytes" "$TMP/in4097.bin" "$TMP/o.bin"
copy_check "1 MiB in batches of 256K" "$TMP/in1048576.bin" "$TMP/o.bin" --batch-bytes 256K
copy_check "3 MiB + 5 in batches of 1M" "$TMP/in3145733.bin" "$TMP/o.bin" --batch-bytes 1M
copy_check "3 MiB + 5 in batches of 12340" "$TMP/in3145733.bin" "$TMP/o.bin" --batch-bytes 12340

# a file past one request of the source (8 MiB), not a multiple of the batch
head -c 9437187 /dev/urandom >"$TMP/big.bin"
copy_check "9 MiB + 3 in batches of 2M" "$TMP/big.bin" "$TMP/o.bin" --batch-bytes 2M

# --bytes: at most that many of the file
expect_rc "--bytes 1000001" 0 "$FERRY" run --workload copy --input "$TMP/big.bin" --output "$TMP/lim.bin" --bytes 1000001 --batch-bytes 256K --json
json_check "--bytes 1000001: summary" "$TMP/out" "j['bytes'] == 1000001"
if [ "$(stat -c %s "$TMP/lim.bin")" = 1000001 ] && cmp -s -n 1000001 "$TMP/big.bin" "$TMP/lim.bin"; then
  ok "--bytes 1000001: the first bytes"; else bad "--bytes 1000001: $(stat -c %s "$TMP/lim.bin") bytes"; fi

# tmpfs: input and output in /dev/shm
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  shm=$(mktemp -d /dev/shm/ferry-run-files-XXXXXX)
  cp "$TMP/in3145733.bin" "$shm/in.bin"
  copy_check "tmpfs in, tmpfs out" "$shm/in.bin" "$shm/out.bin" --batch-bytes 1M
  copy_check "tmpfs in, disk out" "$shm/in.bin" "$TMP/o2.bin" --batch-bytes 768K
  copy_check "disk in, tmpfs out" "$TMP/in4097.bin" "$shm/out2.bin"
  rm -rf "$shm"
else
  ok "# skip tmpfs: no writable /dev/shm"
fi

# scale: the file path gives the bytes the stream path gives
expect_rc "scale, file to file" 0 "$FERRY" run --workload scale --input "$TMP/in3145733.bin" --output "$TMP/s1.bin" --batch-bytes 1M
expect_rc "scale, stream to stream" 0 sh -c '"$0" run --workload scale --input - --output - --batch-bytes 1M <"$1" >"$2"' "$FERRY" "$TMP/in3145733.bin" "$TMP/s2.bin"
if cmp -s "$TMP/s1.bin" "$TMP/s2.bin"; then ok "scale: file and stream outputs identical"; else bad "scale: outputs differ"; fi

# a file read ahead into a stream written in order, and a stream into a file written at offsets
expect_rc "file to stdout" 0 sh -c '"$0" run --workload copy --input "$1" --output - --batch-bytes 1M --quiet >"$2"' "$FERRY" "$TMP/big.bin" "$TMP/m1.bin"
if cmp -s "$TMP/big.bin" "$TMP/m1.bin"; then ok "file to stdout: identical"; else bad "file to stdout: differs"; fi
expect_rc "stdin to file" 0 sh -c '"$0" run --workload copy --input - --output "$2" --batch-bytes 1M --quiet <"$1"' "$FERRY" "$TMP/big.bin" "$TMP/m2.bin"
if cmp -s "$TMP/big.bin" "$TMP/m2.bin"; then ok "stdin to file: identical"; else bad "stdin to file: differs"; fi

# a missing input: named, with the errno text
expect_rc "missing input" 1 "$FERRY" run --workload copy --input "$TMP/none.bin" --output "$TMP/o3.bin"
expect_in "missing input: said" "$TMP/err" "No such file or directory"
if [ -e "$TMP/o3.bin" ]; then bad "missing input: an output was made"; else ok "missing input: no output"; fi

finish
