"""The measuring loop of `gpurig bench comm`, run inside every torchrun worker (imports torch).

For each op and message size: warm-up calls, then `repeats` timed samples of `iters` back-to-back
calls between two CUDA events (nccl-tests does the same: one sync per sample, not per call). For
small messages the `iters` calls are captured once in a CUDA graph and each sample replays it, so
Python and launch overhead (tens of microseconds per call) do not pollute the figure. Each rank
reports its median time per call; the parent averages ranks as nccl-tests does.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gpurig.comm.metrics import DTYPES, element_count
from gpurig.probe.bandwidth import memory_bandwidth, p2p_matrix

all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

GRAPH_AUTO_MAX_BYTES = 64 << 20  # above this a call takes >200 µs on NVLink; launch cost is noise


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _make_call(op: str, size_bytes: int, dtype: torch.dtype, ctx) -> tuple[Callable[[], Any], int]:
    """Buffers for one message size and the call to time; returns (call, bytes in the whole buffer)."""
    ws = ctx.world_size
    elem = torch.empty((), dtype=dtype).element_size()
    count = element_count(op, size_bytes, elem, ws)
    dev = ctx.device
    if op == "allreduce":
        buf = torch.zeros(count, dtype=dtype, device=dev)  # zeros stay zeros however often they are summed
        return (lambda: dist.all_reduce(buf)), count * elem
    if op == "allgather":
        inp = torch.zeros(count // ws, dtype=dtype, device=dev)
        out = torch.empty(count, dtype=dtype, device=dev)
        return (lambda: all_gather_tensor(out, inp)), count * elem
    if op == "reducescatter":
        inp = torch.zeros(count, dtype=dtype, device=dev)
        out = torch.empty(count // ws, dtype=dtype, device=dev)
        return (lambda: reduce_scatter_tensor(out, inp)), count * elem
    if op == "broadcast":
        buf = torch.zeros(count, dtype=dtype, device=dev)
        return (lambda: dist.broadcast(buf, src=0)), count * elem
    if op == "alltoall":
        inp = torch.zeros(count, dtype=dtype, device=dev)
        out = torch.empty(count, dtype=dtype, device=dev)
        return (lambda: dist.all_to_all_single(out, inp)), count * elem
    raise ValueError(op)


def _capture(call: Callable[[], Any], iters: int) -> torch.cuda.CUDAGraph:
    # Warm up on a side stream before capture, as torch.cuda.graph requires.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # thread_local: the process group's watchdog thread keeps polling CUDA events during capture,
    # which the default (global) mode would count as an illegal call and abort the capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(iters):
            call()
    torch.cuda.synchronize()
    return graph


ALIGN_SLEEP_CYCLES = 1_000_000  # ~0.5 ms at boost clock: longer than queueing the sample takes


def _time_cuda(launch: Callable[[], None], iters: int, repeats: int, ctx, label: str) -> list[float]:
    """Seconds per call for each sample, timed between CUDA events whose start is aligned across ranks.

    Released from a CPU barrier, ranks start tens of microseconds apart, and the first call of the
    earlier rank would time that skew (2% of a 64 MiB sample). So each sample first queues a GPU
    sleep (the GPU stays busy while the CPU queues the rest), then a one-element all-reduce that
    completes on every rank at the same moment, and only then the start event.
    """
    import torch.distributed as dist

    samples = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    align = torch.zeros(1, dtype=torch.float32, device=ctx.device)
    sleep = getattr(torch.cuda, "_sleep", None)
    for r in range(repeats):
        ctx.cpu_barrier("bench", f"{label}, before sample {r + 1}")
        if sleep is not None:
            sleep(ALIGN_SLEEP_CYCLES)
        dist.all_reduce(align)
        start.record()
        launch()
        end.record()
        ctx.collective("bench", "timed", f"{label}, sample {r + 1}", end.synchronize)
        samples.append(start.elapsed_time(end) / 1000.0 / iters)
    return samples


def _time_cpu(call: Callable[[], Any], iters: int, repeats: int, ctx, label: str) -> list[float]:
    samples = []
    for r in range(repeats):
        ctx.cpu_barrier("bench", f"{label}, before sample {r + 1}")

        def loop() -> None:
            for _ in range(iters):
                call()

        t0 = time.perf_counter()
        ctx.collective("bench", "timed", f"{label}, sample {r + 1}", loop)
        samples.append((time.perf_counter() - t0) / iters)
    return samples


def measure(ctx, op: str, size_bytes: int, dtype_name: str, iters: int, warmup: int, repeats: int, graph: str) -> dict[str, Any]:
    dtype = _torch_dtype(dtype_name)
    call, nbytes = _make_call(op, size_bytes, dtype, ctx)
    label = f"{op} {nbytes} B"
    point: dict[str, Any] = {"op": op, "bytes": nbytes, "dtype": dtype_name, "iters": iters, "graph": False}

    def warm() -> None:
        for _ in range(warmup):
            call()

    ctx.collective("bench", op, f"{label}, warm-up", warm)
    if ctx.is_cuda:
        use_graph = graph == "on" or (graph == "auto" and nbytes <= GRAPH_AUTO_MAX_BYTES)
        launch = None
        g = None
        if use_graph:
            try:
                g = ctx.collective("bench", "graph_capture", label, lambda: _capture(call, iters))
                g.replay()  # the first replay uploads the graph; keep it out of the samples
                torch.cuda.synchronize()
                launch = g.replay
                point["graph"] = True
            except Exception as exc:  # capture unsupported here: fall back to the plain loop, and say so
                point["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
                torch.cuda.synchronize()
        if launch is None:
            def launch() -> None:
                for _ in range(iters):
                    call()
        samples = _time_cuda(launch, iters, repeats, ctx, label)
        if g is not None:
            # Free the captured graph now: a graph still holding NCCL work can make the process
            # group's teardown hang (pytorch issue 115388).
            launch = None
            g.reset()
    else:
        samples = _time_cpu(call, iters, repeats, ctx, label)
    point["samples_s"] = samples
    point["seconds"] = statistics.median(samples)
    return point


def run(ctx, config: dict[str, Any], save: Callable[[], None]) -> dict[str, Any]:
    ops = config.get("ops", ["allreduce"])
    sizes = config.get("sizes", [1 << 20])
    dtype = config.get("dtype", "float32")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}")
    iters, warmup, repeats = int(config.get("iters", 20)), int(config.get("warmup", 5)), int(config.get("repeats", 5))
    graph = config.get("graph", "auto")
    result: dict[str, Any] = {"points": [], "p2p": None, "memory": None, "ops": ops, "dtype": dtype}
    ctx.record["bench"] = result
    for op in ops:
        for size in sizes:
            point = measure(ctx, op, size, dtype, iters, warmup, repeats, graph)
            result["points"].append(point)
            save()
            ctx.say(f"{op} {point['bytes']} {point['seconds'] * 1e6:.1f}us graph={point['graph']}")
        if ctx.is_cuda:
            torch.cuda.empty_cache()
    if ctx.is_cuda and ctx.world_size >= 2 and config.get("p2p_bytes"):
        # Only rank 0 drives the copies; the others wait on the CPU (gloo) so no NCCL kernel spins
        # on their GPUs meanwhile.
        if ctx.rank == 0:
            result["p2p"] = ctx.collective("bench", "p2p_matrix", "rank 0 copies", lambda: p2p_matrix(ctx.world_size, int(config["p2p_bytes"])))
        else:
            ctx.collective("bench", "p2p_matrix", "rank 0 copies", None)
        save()
        ctx.cpu_barrier("bench", "after the peer-to-peer matrix")
    if ctx.is_cuda and config.get("memory_host_bytes"):
        ctx.say("host link and device memory")
        result["memory"] = memory_bandwidth(torch.device("cuda", torch.cuda.current_device()),
                                            int(config["memory_host_bytes"]), int(config["memory_device_bytes"]))
        save()
    return result
