#!/usr/bin/env python3
"""Small items through the GPU written the ways a PyTorch user would, for `ferry bench items`:
each item its own tensor view of pinned memory, the same kernel as ferry's `scale` workload
(CuPy RawKernel on the item's stream). Two ways, each swept, the best reported:
  each    an H2D, a kernel and a D2H per item, round-robin over S streams;
  gather  B items copied into a pinned staging buffer (torch.cat), one H2D, one kernel, one D2H
          of the group, its outputs copied back to the items once its D2H is done; S groups in
          flight on S streams.
Rates are the items' bytes over the wall time from the first copy to the last item's output in
place (after a warm-up pass, the median of --reps), each way; every item's output is checked
against the CPU first. One thread: Python's lock makes more threads no faster. One JSON line a
configuration, then one with "best": true per item size."""
import argparse
import json
import statistics
import time

import cupy as cp
import torch

from torch_pipeline import FACTOR, KERNEL  # the same kernel as the pipeline peer's


def launch(kern, stream, d_in, d_out, n_el):
    with cp.cuda.ExternalStream(stream.cuda_stream):
        grid = max(1, min(1056, (n_el + 255) // 256))
        kern((grid,), (256,), (d_in.data_ptr(), d_out.data_ptr(), cp.uint64(n_el),
                               cp.float32(FACTOR)))


def run_each(items_in, items_out, n_el, nstreams, kern):
    streams = [torch.cuda.Stream() for _ in range(nstreams)]
    d_in = [torch.empty(n_el, dtype=torch.float32, device="cuda") for _ in streams]
    d_out = [torch.empty(n_el, dtype=torch.float32, device="cuda") for _ in streams]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i, (hi, ho) in enumerate(zip(items_in, items_out)):
        k = i % nstreams
        with torch.cuda.stream(streams[k]):
            d_in[k].copy_(hi, non_blocking=True)
            launch(kern, streams[k], d_in[k], d_out[k], n_el)
            ho.copy_(d_out[k], non_blocking=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def run_gather(items_in, items_out, n_el, nstreams, group, kern):
    streams = [torch.cuda.Stream() for _ in range(nstreams)]
    st_in = [torch.empty(group * n_el, dtype=torch.float32).pin_memory() for _ in streams]
    st_out = [torch.empty(group * n_el, dtype=torch.float32).pin_memory() for _ in streams]
    d_in = [torch.empty(group * n_el, dtype=torch.float32, device="cuda") for _ in streams]
    d_out = [torch.empty(group * n_el, dtype=torch.float32, device="cuda") for _ in streams]
    done = [None] * nstreams  # (event, first item, count) of the group each stream holds
    n = len(items_in)

    def finish(k):
        ev, first, cnt = done[k]
        ev.synchronize()
        for j, part in enumerate(st_out[k][:cnt * n_el].split(n_el)):
            items_out[first + j].copy_(part)
        done[k] = None

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for g, first in enumerate(range(0, n, group)):
        k = g % nstreams
        if done[k] is not None:
            finish(k)  # its staging buffers are free again
        cnt = min(group, n - first)
        torch.cat(items_in[first:first + cnt], out=st_in[k][:cnt * n_el])
        s = streams[k]
        with torch.cuda.stream(s):
            d_in[k][:cnt * n_el].copy_(st_in[k][:cnt * n_el], non_blocking=True)
            launch(kern, s, d_in[k], d_out[k], cnt * n_el)
            st_out[k][:cnt * n_el].copy_(d_out[k][:cnt * n_el], non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(s)
        done[k] = (ev, first, cnt)
    for k in range(nstreams):
        if done[k] is not None:
            finish(k)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", type=int, default=1 << 30, help="bytes of items a size")
    ap.add_argument("--item-sizes", default="65536,262144")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    kern = cp.RawKernel(KERNEL, "scale")
    for item in [int(x) for x in a.item_sizes.split(",")]:
        n_el, n = item // 4, a.bytes // item
        host_in = torch.empty(n * n_el, dtype=torch.float32).pin_memory()
        host_out = torch.empty(n * n_el, dtype=torch.float32).pin_memory()
        gen = torch.Generator().manual_seed(item)
        host_in.copy_(torch.rand(n * n_el, generator=gen) + 1.0)  # +-[1, 2), as ferry's
        ref = host_in * torch.tensor(FACTOR, dtype=torch.float32)
        items_in, items_out = list(host_in.split(n_el)), list(host_out.split(n_el))
        configs = [("each", s, 1) for s in (1, 2, 4, 8)]
        configs += [("gather", s, g) for s in (2, 4) for g in (16, 64)]
        best = None
        for mode, s, g in configs:
            times = []
            for rep in range(a.reps + 1):
                host_out.zero_()
                if mode == "each":
                    t = run_each(items_in, items_out, n_el, s, kern)
                else:
                    t = run_gather(items_in, items_out, n_el, s, g, kern)
                if not torch.equal(host_out, ref):
                    raise SystemExit(f"{mode} s={s} g={g} item={item}: output differs from the CPU")
                if rep > 0:
                    times.append(t)
            gbps = n * item / statistics.median(times) / 1e9
            row = {"peer": "torch", "mode": mode, "streams": s, "group": g, "item_bytes": item,
                   "items": n, "gbps_each_way": round(gbps, 3), "verified": True}
            print(json.dumps(row), flush=True)
            if best is None or gbps > best["gbps_each_way"]:
                best = row
        print(json.dumps(dict(best, best=True)), flush=True)
        del host_in, host_out, ref, items_in, items_out


if __name__ == "__main__":
    main()
