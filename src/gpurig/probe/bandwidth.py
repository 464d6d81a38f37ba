"""Copy bandwidths measured on the GPUs themselves: peer-to-peer between GPUs, host link, device memory.

What the links and memory of this machine actually move, in GB/s (10^9 bytes/s), for the parent
to hold against what the facts say they can (`diagnose.links`). Run inside a worker process that
owns the GPUs (imports torch; `gpurig bench comm` and `gpurig burn` call it), never in the doctor's
process.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def p2p_matrix(n: int, nbytes: int, repeats: int = 5, copies: int = 4) -> dict[str, Any]:
    """Copy bandwidth between every ordered pair of this run's GPUs, one way and both ways at once.

    GPUs 0..n-1 of this process, all driven from it (as nvbandwidth and p2pBandwidthLatencyTest
    do); each copy gets its own pair of streams so the two directions really overlap.
    """
    devices = [torch.device("cuda", i) for i in range(n)]
    # Per GPU and direction a source and a destination buffer, so the two directions never share one.
    bufs = {d.index: [torch.empty(nbytes, dtype=torch.uint8, device=d) for _ in range(4)] for d in devices}
    # Four streams per GPU: for each direction one on the source side and one on the destination
    # side (torch orders a cross-device copy with the current stream of both devices).
    streams = {d.index: [torch.cuda.Stream(d) for _ in range(4)] for d in devices}

    def sync(*idx: int) -> None:
        for i in idx:
            torch.cuda.synchronize(i)

    def copy(src: int, dst: int, which: int) -> None:
        with torch.cuda.stream(streams[src][2 * which]), torch.cuda.stream(streams[dst][2 * which + 1]):
            bufs[dst][2 * which + 1].copy_(bufs[src][2 * which], non_blocking=True)

    out: dict[str, Any] = {"bytes": nbytes, "pairs": {}}
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            copy(a, b, 0)
            sync(a, b)
            one, both = [], []
            for _ in range(repeats):
                sync(a, b)
                t0 = time.perf_counter()
                for _ in range(copies):
                    copy(a, b, 0)
                sync(a, b)
                one.append(copies * nbytes / (time.perf_counter() - t0) / 1e9)
                sync(a, b)
                t0 = time.perf_counter()
                for _ in range(copies):
                    copy(a, b, 0)
                    copy(b, a, 1)
                sync(a, b)
                both.append(2 * copies * nbytes / (time.perf_counter() - t0) / 1e9)
            out["pairs"][f"{a}->{b}"] = {
                "src": a, "dst": b,
                "one_way_gbps": statistics.median(one),
                "bidirectional_gbps": statistics.median(both),
            }
    bufs.clear()
    torch.cuda.empty_cache()
    return out


def memory_bandwidth(device: torch.device, host_bytes: int, device_bytes: int, repeats: int = 5,
                     copies: int = 4) -> dict[str, Any]:
    """What one GPU moves over its host link and through its own memory, in GB/s (10^9 bytes/s).

    Host link: copies between pinned host memory and the GPU (`non_blocking`, so the copy engines
    do the work, as a training step's input copies do), host → device, device → host, and both at
    once on two streams (PCIe is full duplex). Device memory: a device-to-device copy, counted as
    the bytes read plus the bytes written (as CUDA's bandwidthTest and nvbandwidth count it). Each
    figure is the median of `repeats` samples of `copies` back-to-back copies between CUDA events.
    """
    torch.cuda.set_device(device)
    host_src = torch.empty(host_bytes, dtype=torch.uint8, pin_memory=True)
    host_dst = torch.empty(host_bytes, dtype=torch.uint8, pin_memory=True)
    dev_a = torch.empty(host_bytes, dtype=torch.uint8, device=device)
    dev_b = torch.empty(host_bytes, dtype=torch.uint8, device=device)
    up, down = torch.cuda.Stream(device), torch.cuda.Stream(device)

    def timed(work: Callable[[], None], streams: list[torch.cuda.Stream]) -> float:
        work()  # warm-up
        torch.cuda.synchronize(device)
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            main = torch.cuda.current_stream(device)
            start.record(main)
            for st in streams:
                st.wait_event(start)
            for _ in range(copies):
                work()
            for st in streams:
                main.wait_stream(st)
            end.record(main)
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return statistics.median(samples)

    def h2d() -> None:
        with torch.cuda.stream(up):
            dev_a.copy_(host_src, non_blocking=True)

    def d2h() -> None:
        with torch.cuda.stream(down):
            host_dst.copy_(dev_b, non_blocking=True)

    def both() -> None:
        h2d()
        d2h()

    out: dict[str, Any] = {"host_bytes": host_bytes, "device_bytes": device_bytes, "copies": copies, "repeats": repeats}
    out["h2d_gbps"] = copies * host_bytes / timed(h2d, [up]) / 1e9
    out["d2h_gbps"] = copies * host_bytes / timed(d2h, [down]) / 1e9
    out["bidirectional_gbps"] = 2 * copies * host_bytes / timed(both, [up, down]) / 1e9
    host_src = host_dst = dev_a = dev_b = None  # freed before the device copy needs its memory
    src = torch.empty(device_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty(device_bytes, dtype=torch.uint8, device=device)
    out["d2d_gbps"] = 2 * copies * device_bytes / timed(lambda: dst.copy_(src), []) / 1e9
    src = dst = None
    torch.cuda.empty_cache()
    return out
