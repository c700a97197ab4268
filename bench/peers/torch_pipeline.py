#!/usr/bin/env python3
"""The round trip H2D -> kernel -> D2H written the way a PyTorch user would: a pinned host
tensor, chunks round-robin over N streams, non_blocking copies, and the same kernel source as
ferry's `scale` workload through CuPy's RawKernel on the same stream. Timed with CUDA events,
after a warm-up, median of --reps; output checked against the CPU first. One JSON line per
configuration, for scripts/gpu-check.sh to set beside ferry's sweep."""
import argparse
import json
import statistics
import sys

import cupy as cp
import torch

KERNEL = r"""
extern "C" __global__ void scale(const float *in, float *out, unsigned long long n, float f)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        out[i] = __fmul_rn(in[i], f);
}
"""
FACTOR = 1.0009765625  # ferry's default, exact in binary


def run(total, chunk, nstreams, reps, kern, host_in, host_out):
    n_el = chunk // 4
    pool_chunks = host_in.numel() // n_el
    streams = [torch.cuda.Stream() for _ in range(nstreams)]
    d_in = [torch.empty(n_el, dtype=torch.float32, device="cuda") for _ in range(nstreams)]
    d_out = [torch.empty(n_el, dtype=torch.float32, device="cuda") for _ in range(nstreams)]
    nchunks = total // chunk
    times = []
    for rep in range(reps + 1):  # the first is a warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for i in range(nchunks):
            k = i % nstreams
            s = streams[k]
            if i < nstreams:
                s.wait_event(start)  # the timed region starts for every stream at `start`
            at = (i % pool_chunks) * n_el
            with torch.cuda.stream(s):
                d_in[k].copy_(host_in[at:at + n_el], non_blocking=True)
                with cp.cuda.ExternalStream(s.cuda_stream):
                    kern((1056,), (256,), (d_in[k].data_ptr(), d_out[k].data_ptr(),
                                           cp.uint64(n_el), cp.float32(FACTOR)))
                host_out[at:at + n_el].copy_(d_out[k], non_blocking=True)
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        end.record()
        end.synchronize()
        if rep > 0:
            times.append(start.elapsed_time(end) / 1e3)
    t = statistics.median(times)
    return nchunks * chunk / t / 1e9, min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bytes", type=int, default=4 << 30)
    ap.add_argument("--chunks", default="1M,4M,16M")
    ap.add_argument("--streams", default="2,4")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()

    def size(s):
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)

    pool = min(a.bytes, 1 << 30)
    g = torch.Generator().manual_seed(1)
    host_in = (torch.rand(pool // 4, generator=g) + 1.0).pin_memory()  # floats in [1, 2)
    host_out = torch.empty_like(host_in).pin_memory()
    kern = cp.RawKernel(KERNEL, "scale")
    ref = host_in * torch.tensor(FACTOR, dtype=torch.float32)
    for chunk in map(size, a.chunks.split(",")):
        for ns in map(int, a.streams.split(",")):
            total = a.bytes - a.bytes % chunk
            host_out.fill_(0)
            gbps, best = run(total, chunk, ns, a.reps, kern, host_in, host_out)
            torch.cuda.synchronize()
            ok = bool(torch.equal(host_out[: min(pool, total) // 4], ref[: min(pool, total) // 4]))
            print(json.dumps({"peer": "torch+cupy", "chunk_bytes": chunk, "streams": ns,
                              "gbps_each_way": round(gbps, 3), "verified": ok,
                              "torch": torch.__version__, "cupy": cp.__version__}))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
