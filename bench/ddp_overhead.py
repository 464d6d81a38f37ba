"""Where a 2-process DDP step loses time against one process: each suspect removed in turn, side by side.

Measured on 2x H200: a compiled 2-GPU step of ResNet-50 is 1.15-1.5 ms slower than one GPU's
(0.963-0.970 of its rate), while the gradient all-reduce needs about 0.5 ms there. This runs the
same training step (ResNet-50 224x224, batch 256, bf16 autocast, channels_last, fused SGD; a
small CNN on the CPU) in these setups, one after another in one command:

  1proc          one process, no DDP                      the reference
  2proc-nodp     two processes, no DDP, no communication  what running two at once costs by itself
  ddp            DDP as `gpurig train` builds it          gradient_as_bucket_view, static_graph, 25 MiB
                                                          buckets, zero_grad(set_to_none=True)
  ddp-nobb       ... broadcast_buffers=False              no BatchNorm buffer broadcast before each forward
  ddp-keepgrad   ... zero_grad(set_to_none=False)         gradients stay views of DDP's buckets: no copy
                                                          of every gradient into its bucket each step
  ddp-both       both of the above
  ddp-nostatic   ddp-nobb without static_graph
  ddp-plain      DDP(model, device_ids, gradient_as_bucket_view=True) and nothing else, as most scripts
                 write it (static_graph off, buffers broadcast before each forward)
  ddp-hipri      ddp-nobb with TORCH_NCCL_HIGH_PRIORITY=1 (NCCL on a high-priority stream)
  ddp-ctas8      ddp-nobb with NCCL_MAX_CTAS=8 (fewer SMs taken from the backward's kernels)
  ddp-noopt      ddp-nobb, compiled as one graph (dynamo's optimize_ddp off: all-reduce after the backward)
  ddp-inner      ddp-nobb around the compiled model (DDP(torch.compile(model))), --compile only
  ddp-b50        ddp-nobb with 50 MiB buckets
  ddp-b10        ddp-nobb with 10 MiB buckets
  ddp-bf16       ddp-nobb with the bf16 compression hook (gradients summed in bf16: half the bytes)
  ddp-noopt-b100 ddp-noopt with one 100 MiB bucket (one all-reduce per step)
  ddp-noopt-bf16 ddp-noopt with the bf16 compression hook: half the bytes after the backward
  ddp-noopt-simple, ddp-noopt-ctas2 (ctas4, ctas8)
                 ddp-noopt with NCCL's Simple protocol only (NCCL_PROTO=Simple), or with NCCL held to 2
                 CTAs (NCCL_MIN_CTAS=NCCL_MAX_CTAS=2, or 4, 8): fewer SMs polling, less power for the all-reduce
  ddp-noopt-bgc  ddp-noopt with DDP(batched_grad_copy=True): gradients copied into each bucket by one
                 kernel, not one per parameter (PyTorch versions that have it)
  1proc-nb, 2proc-nodp-nb, ddp-noopt-nb
                 the same with cudnn.benchmark off: cuDNN's heuristics pick each convolution's algorithm,
                 the same on every rank, instead of timing candidates on each rank
  flat-sync      no DDP: after the (one-graph) backward, per 25 MiB bucket one kernel gathers the
                 gradients, one all-reduce averages them (NCCL AVG), one foreach copy puts them back
  flat-sync-b100 the same with one 100 MiB bucket
  flat-sync-bf16 flat-sync with the buckets in bf16 (the gather casts): half the bytes on the wire and in
                 memory; gradients averaged in bf16, as DDP's bf16 compression hook does
  flat-copy-only flat-sync's gather and copy-back kernels without the all-reduce (ranks independent:
                 their weights differ); with flat-ar-only, splits what flat-sync costs in GPU time and power
  flat-ar-only   flat-sync's all-reduces alone, of buffers the size of the buckets (ranks in lockstep,
                 gradients not averaged: weights differ)
  sync-only      no gradient averaging: a one-element all-reduce once a step, so the ranks wait for each
                 other and nothing else crosses NVLink (weights differ); the cost of lockstep alone
  ddp-ca         ddp-nobb with compiled autograd tracing DDP's Python reducer into the backward graph
                 (optimize_ddp=python_reducer): gradient accumulation and bucketed all-reduces are
                 compiled with the backward, waits placed late; --compile only
  ddp-ca-reorder ddp-ca with inductor's reorder_for_compute_comm_overlap: the compiled backward's
                 all-reduces moved to overlap its compute; --compile only
  1proc-ca       one process, backward under compiled autograd (the reference for ddp-ca), --compile only
  1proc-gpu1     one process on GPU 1 (the reference for the second GPU: chips differ in clock at a power cap)
  1proc-links-awake
                 one process on GPU 0, while a thread has GPU 1's copy engine write 10 MB into GPU 0's
                 memory every 20 ms (a peer copy over NVLink, on side streams): the links stay out of
                 low power, GPU 0's SMs do nothing more. What awake links alone cost a power-capped step
  ddp-st2        eager DDP (ddp-nobb) around a model compiled in 2 parts, cut before ResNet's layer4: the
                 backward of layer4 and the head (two thirds of the gradient bytes) ends first, so their
                 all-reduce runs while the rest of the backward does; --compile only
  ddp-st3        the same in 3 parts, cut before layer3 and before layer4
  1proc-st2, 1proc-st3
                 one process with the same parts (what the cuts cost in fusion), --compile only

    PYTHONPATH=src python bench/ddp_overhead.py                     # CUDA, eager
    PYTHONPATH=src python bench/ddp_overhead.py --compile           # the same under torch.compile
    PYTHONPATH=src python bench/ddp_overhead.py --device cpu --steps 5 --batch 8   # a quick check anywhere
    PYTHONPATH=src python bench/ddp_overhead.py --compile --profile runs/prof    # + where each step's GPU time goes

With --profile, rank 0 also records 5 more steps with torch.profiler per setup, writes the trace
(chrome format) and prints per step: the GPU's busy span, compute kernel time, NCCL kernel time,
how much of NCCL's time ran alongside compute, and the time no kernel ran (idle).

Prints, for each setup: milliseconds per step (rank 0's wall time; every rank runs the same
steps) and the efficiency against `1proc`; how far the host ran ahead of the GPU when the timed
steps had been queued (near 0: the host sets the pace); with two ranks, each rank's own time,
whether the ranks end with the same weights ("in sync"; each rank trains on its own batch, so
unsynchronised setups show "differ"); on CUDA, the standard deviation of the per-step GPU time and
what waiting for the slower rank every step would cost if the ranks varied independently; each
GPU's mean SM clock and power over the timed steps, and how often the power limit or heat held the
clock back (gpurig's clock watch, NVML, read every 50 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import sys
import time

from gpurig.train.clocks import ClockWatch

SETUPS = {
    "1proc": {"world": 1},
    "2proc-nodp": {"world": 2, "ddp": False},
    "ddp": {"world": 2},
    "ddp-nobb": {"world": 2, "broadcast_buffers": False},
    "ddp-keepgrad": {"world": 2, "set_to_none": False},
    "ddp-both": {"world": 2, "broadcast_buffers": False, "set_to_none": False},
    "ddp-nostatic": {"world": 2, "broadcast_buffers": False, "static_graph": False},
    "ddp-plain": {"world": 2, "plain": True},
    "ddp-hipri": {"world": 2, "broadcast_buffers": False, "env": {"TORCH_NCCL_HIGH_PRIORITY": "1"}},
    "ddp-ctas8": {"world": 2, "broadcast_buffers": False, "env": {"NCCL_MAX_CTAS": "8"}},
    "ddp-noopt": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False},
    "ddp-inner": {"world": 2, "broadcast_buffers": False, "inner": True},
    "ddp-b50": {"world": 2, "broadcast_buffers": False, "bucket_mb": 50},
    "ddp-b10": {"world": 2, "broadcast_buffers": False, "bucket_mb": 10},
    "ddp-bf16": {"world": 2, "broadcast_buffers": False, "hook": "bf16"},
    "ddp-noopt-b100": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False, "bucket_mb": 100},
    "ddp-noopt-bgc": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False, "batched_grad_copy": True},
    "1proc-gpu1": {"world": 1, "gpu": 1},
    "1proc-links-awake": {"world": 1, "links_awake": True},
    "1proc-nb": {"world": 1, "cudnn_benchmark": False},
    "2proc-nodp-nb": {"world": 2, "ddp": False, "cudnn_benchmark": False},
    "ddp-noopt-nb": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False, "cudnn_benchmark": False},
    "flat-sync": {"world": 2, "manual": True},
    "flat-sync-b100": {"world": 2, "manual": True, "bucket_mb": 100},
    "flat-sync-bf16": {"world": 2, "manual": True, "bucket_dtype": "bfloat16"},
    "flat-copy-only": {"world": 2, "manual": True, "parts": "copy"},
    "flat-ar-only": {"world": 2, "manual": True, "parts": "allreduce"},
    "sync-only": {"world": 2, "manual": True, "parts": "sync"},
    "flat-ar-only-bf16": {"world": 2, "manual": True, "parts": "allreduce", "bucket_dtype": "bfloat16"},
    "flat-ar-only-10mb": {"world": 2, "manual": True, "parts": "allreduce", "ar_mb": 10},
    "ddp-noopt-bf16": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False, "hook": "bf16"},
    "ddp-noopt-simple": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False, "env": {"NCCL_PROTO": "Simple"}},
    "ddp-noopt-ctas2": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False,
                        "env": {"NCCL_MAX_CTAS": "2", "NCCL_MIN_CTAS": "2"}},
    "ddp-noopt-ctas4": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False,
                        "env": {"NCCL_MAX_CTAS": "4", "NCCL_MIN_CTAS": "4"}},
    "ddp-noopt-ctas8": {"world": 2, "broadcast_buffers": False, "optimize_ddp": False,
                        "env": {"NCCL_MAX_CTAS": "8", "NCCL_MIN_CTAS": "8"}},
    "ddp-ca": {"world": 2, "broadcast_buffers": False, "optimize_ddp": "python_reducer", "ca": True},
    "1proc-ca": {"world": 1, "ca": True},
    "ddp-ca-reorder": {"world": 2, "broadcast_buffers": False, "optimize_ddp": "python_reducer", "ca": True,
                       "inductor": {"reorder_for_compute_comm_overlap": True}},
    "ddp-ca-reorder-ctas4": {"world": 2, "broadcast_buffers": False, "optimize_ddp": "python_reducer", "ca": True,
                             "inductor": {"reorder_for_compute_comm_overlap": True},
                             "env": {"NCCL_MAX_CTAS": "4", "NCCL_MIN_CTAS": "4"}},
    "ddp-st2": {"world": 2, "broadcast_buffers": False, "stages": 2},
    "ddp-st3": {"world": 2, "broadcast_buffers": False, "stages": 3},
    "1proc-st2": {"world": 1, "stages": 2},
    "1proc-st3": {"world": 1, "stages": 3},
}


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _overlap(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> float:
    """Time covered by both sets of intervals."""
    return _union(xs) + _union(ys) - _union(xs + ys)


def profile_summary(trace_path: str, steps: int) -> dict:
    """Per-step GPU time from a chrome trace: busy span, compute, NCCL, their overlap, idle (ms)."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    compute, comm = [], []
    by_name: dict[str, float] = {}
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or "dur" not in e:
            continue
        iv = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        by_name[e.get("name", "?")[:120]] = by_name.get(e.get("name", "?")[:120], 0.0) + float(e["dur"])
        (comm if "nccl" in e.get("name", "").lower() else compute).append(iv)
    if not compute:
        return {}
    every = compute + comm
    span = max(b for _, b in every) - min(a for a, _ in every)
    busy = _union(every)
    ms = lambda us: us / 1000.0 / steps  # noqa: E731
    return {"span_ms": ms(span), "compute_ms": ms(_union(compute)), "nccl_ms": ms(_union(comm)),
            "nccl_alongside_compute_ms": ms(_overlap(compute, comm)), "idle_ms": ms(span - busy),
            "compute_kernels_per_step": len(compute) / steps,
            # GPU time per kernel name and step (ms), for comparing setups kernel by kernel
            "kernel_ms": {k: ms(v) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])}}


def jitter(steps_of: dict[int, list[float]]) -> dict:
    """Step-to-step variation of each rank's GPU step time, and what it costs ranks that wait for
    each other every step: the mean over steps of the slowest rank's time, minus the mean time."""
    import statistics

    runs = [v for _, v in sorted(steps_of.items()) if len(v) >= 2]
    if not runs:
        return {}
    n = min(len(v) for v in runs)
    mean = statistics.fmean(x for v in runs for x in v[:n])
    out = {"step_sd_ms": statistics.fmean(statistics.stdev(v[:n]) for v in runs)}
    if len(runs) > 1:
        out["wait_for_slowest_ms"] = statistics.fmean(max(v[i] for v in runs) for i in range(n)) - mean
    return out


def flat_grad_sync(model, bucket_mb: float, average_op: bool, dtype=None, parts: str = "all",
                   ar_mb: float | None = None):
    """Gradient averaging without DDP's reducer, after the whole backward: per bucket of about
    `bucket_mb`, one kernel gathers the gradients into a flat buffer, one all-reduce averages it
    (NCCL's AVG: no division kernel), and one foreach copy puts it back after all have been launched.
    DDP instead copies (and scales) each gradient into its bucket with a kernel of its own."""
    import torch
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad][::-1]  # the backward's order
    buckets, cur, size = [], [], 0
    for p in params:
        cur.append(p)
        size += p.numel() * p.element_size()
        if size >= bucket_mb * 2**20:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    world = dist.get_world_size()

    def flat_view(t):  # storage-order 1-D view of a dense tensor (channels_last included): no copy
        return t.as_strided((t.numel(),), (1,))

    if parts == "allreduce":  # the communication alone, on buffers kept from step to step
        flats = [torch.zeros(sum(p.numel() for p in b), device=buckets[0][0].device, dtype=dtype or buckets[0][0].dtype)
                 for b in buckets]
        if ar_mb is not None:  # one buffer of that size instead of the gradients' bytes
            flats = [torch.zeros(int(ar_mb * 2**20) // flats[0].element_size(), device=flats[0].device,
                                 dtype=flats[0].dtype)]

        def sync_ar_only() -> None:
            works = [dist.all_reduce(f, op=dist.ReduceOp.AVG if average_op else dist.ReduceOp.SUM, async_op=True)
                     for f in flats]
            for w in works:
                w.wait()

        return sync_ar_only
    if parts == "sync":  # the ranks wait for each other once a step, and nothing else crosses NVLink
        one = torch.zeros(1, device=buckets[0][0].device)

        def sync_only() -> None:
            dist.all_reduce(one)

        return sync_only
    if parts == "copy":  # the gather and copy-back kernels alone
        def sync_copy_only() -> None:
            for b in buckets:
                grads = [flat_view(p.grad) for p in b]
                flat = torch.cat(grads) if dtype is None else torch.cat([g.to(dtype) for g in grads])
                torch._foreach_copy_(grads, list(flat.split([g.numel() for g in grads])))

        return sync_copy_only

    def sync() -> None:
        pending = []
        for b in buckets:
            grads = [flat_view(p.grad) for p in b]
            flat = torch.cat(grads) if dtype is None else torch.cat([g.to(dtype) for g in grads])
            if average_op:
                work = dist.all_reduce(flat, op=dist.ReduceOp.AVG, async_op=True)
            else:  # gloo has no AVG
                flat.div_(world)
                work = dist.all_reduce(flat, async_op=True)
            pending.append((work, flat, grads))
        for work, flat, grads in pending:
            work.wait()
            torch._foreach_copy_(grads, list(flat.split([g.numel() for g in grads])))

    return sync


def compile_in_parts(model, parts: int) -> None:
    """Compile `model` as `parts` graphs run one after another, in place (same parameters, same
    state_dict): ResNet cut before layer4 (and before layer3 for 3 parts); a Sequential cut in the middle.
    Eager DDP around it sees one autograd node per part, so the gradients of the last part's
    parameters are ready, and their all-reduce starts, while the earlier parts' backward runs."""
    import torch

    if isinstance(model, torch.nn.Sequential):
        layers = list(model)
        cuts = [len(layers) // 2]
    else:  # torchvision ResNet: its forward, as a list of layers
        layers = [model.conv1, model.bn1, model.relu, model.maxpool, model.layer1, model.layer2, model.layer3,
                  model.layer4, model.avgpool, torch.nn.Flatten(1), model.fc]
        cuts = [7] if parts == 2 else [6, 7]
    bounds = [0, *cuts, len(layers)]
    compiled = [torch.compile(torch.nn.Sequential(*layers[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)]

    def forward(x):
        for part in compiled:
            x = part(x)
        return x

    model.forward = forward


def keep_links_awake(dst: int, src: int, stop, mb: float = 10, every: float = 0.02) -> None:
    """Until `stop` is set, every `every` s GPU `src`'s copy engine writes `mb` MB into GPU `dst`'s
    memory over NVLink. On side streams, current in this thread alone: the copy waits for nothing on
    the training stream, and nothing there waits for it."""
    import torch

    a = torch.empty(int(mb * 1e6) // 4, device=f"cuda:{src}")
    b = torch.empty(a.numel(), device=f"cuda:{dst}")
    torch.cuda.set_stream(torch.cuda.Stream(device=dst))
    torch.cuda.set_stream(torch.cuda.Stream(device=src))
    while not stop.wait(every):
        b.copy_(a, non_blocking=True)
    torch.cuda.synchronize(src)


def _worker(rank: int, world: int, setup: dict, args: dict, port: int, out) -> None:
    import torch
    import torch.distributed as dist

    cuda = args["device"] == "cuda"
    gpu = setup.get("gpu", rank)
    if cuda:
        torch.cuda.set_device(gpu)
        dev = torch.device("cuda", gpu)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
        dev = torch.device("cpu")
    os.environ.update(setup.get("env", {}))
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                **({"device_id": dev} if cuda else {}))
    for key, value in setup.get("inductor", {}).items():
        import torch._inductor.config as inductor_config

        setattr(inductor_config, key, value)
    torch.manual_seed(0)
    if cuda:
        import torchvision

        torch.backends.cudnn.benchmark = setup.get("cudnn_benchmark", True)
        model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
        shape = (args["batch"], 3, 224, 224)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).to(dev)
        shape = (args["batch"], 3, 32, 32)
    if "optimize_ddp" in setup:
        import torch._dynamo

        torch._dynamo.config.optimize_ddp = setup["optimize_ddp"]
    inner = args["compile"] and setup.get("inner", False)
    if setup.get("stages"):
        compile_in_parts(model, setup["stages"])
    wrapped = torch.compile(model) if inner else model
    if world > 1 and setup.get("ddp", True) and not setup.get("manual"):
        import inspect

        from torch.nn.parallel import DistributedDataParallel as DDP

        # torch 2.14 renamed broadcast_buffers to forward_sync_buffers (the old name warns there).
        sync_kw = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
                   else "broadcast_buffers")
        if setup.get("plain"):
            wrapped = DDP(wrapped, device_ids=[rank] if cuda else None, gradient_as_bucket_view=True)
        else:
            extra = {sync_kw: setup.get("broadcast_buffers", True)}
            if setup.get("batched_grad_copy"):
                if "batched_grad_copy" not in inspect.signature(DDP.__init__).parameters:
                    raise RuntimeError(f"DDP of torch {torch.__version__} has no batched_grad_copy")
                extra["batched_grad_copy"] = True
            wrapped = DDP(wrapped, device_ids=[rank] if cuda else None, gradient_as_bucket_view=True,
                          static_graph=setup.get("static_graph", True), bucket_cap_mb=setup.get("bucket_mb", 25),
                          **extra)
        if setup.get("hook") == "bf16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            wrapped.register_comm_hook(None, default_hooks.bf16_compress_hook)
    step_model = torch.compile(wrapped) if args["compile"] and not inner and not setup.get("stages") else wrapped
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=cuda or None)
    torch.manual_seed(1 + rank)  # each rank its own batch, so unsynchronised weights would drift apart
    x = torch.randn(*shape, device=dev)
    if cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (shape[0],), device=dev)
    set_to_none = setup.get("set_to_none", True)
    backward_ctx = contextlib.nullcontext
    if setup.get("ca") and args["compile"]:
        from gpurig.train.torch.choices import (
            compiled_autograd_backward as backward_ctx,  # the same as gpurig's loop
        )

    grad_sync = None
    if world > 1 and setup.get("manual"):
        grad_sync = flat_grad_sync(model, setup.get("bucket_mb", 25), average_op=cuda,
                                   dtype=getattr(torch, setup["bucket_dtype"]) if "bucket_dtype" in setup else None,
                                   parts=setup.get("parts", "all"), ar_mb=setup.get("ar_mb"))

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(step_model(x).float(), y)
        with backward_ctx():
            loss.backward()
        if grad_sync:
            grad_sync()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()
        if world > 1:
            dist.barrier()

    waker = None
    if setup.get("links_awake"):
        import threading

        stop_waking = threading.Event()
        waker = threading.Thread(target=keep_links_awake, args=(gpu, 1 - gpu, stop_waking), daemon=True)
        waker.start()
    for _ in range(args["warmup"]):
        step()
    sync()
    # GPU-side marks between steps (they cost the host nothing): each step's own duration.
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(args["steps"] + 1)] if cuda else []
    # gpurig's own clock watch (NVML), on this process's GPU, read every 50 ms
    watch = ClockWatch(index=gpu, every=0.05).start() if cuda else None
    try:
        t0 = time.perf_counter()
        for i in range(args["steps"]):
            if marks:
                marks[i].record()
            step()
        if marks:
            marks[-1].record()
        t_enqueued = time.perf_counter()
        if cuda:
            torch.cuda.synchronize()
        t_end = time.perf_counter()
    finally:
        clock = watch.stop() if watch is not None else None
        if waker is not None:
            stop_waking.set()
            waker.join()
    ms = (t_end - t0) / args["steps"] * 1000
    # How far the host ran ahead of the GPU: near 0 means the host (Python, launches) sets the pace.
    ahead_ms = (t_end - t_enqueued) * 1000
    prof = {"host_ahead_ms": ahead_ms, "step_ms": [a.elapsed_time(b) for a, b in zip(marks, marks[1:], strict=False)],
            "clock": clock}
    if world > 1:
        # Every rank must hold the same weights after the same steps, or the setup did not synchronise.
        with torch.no_grad():
            mine = torch.stack([p.detach().float().sum() for p in model.parameters()]).double()
            theirs = mine.clone()
            dist.broadcast(theirs, 0)
            diff = (mine - theirs).abs().max()
            dist.all_reduce(diff, op=dist.ReduceOp.MAX)
            prof["max_param_diff"] = float(diff)
    if args["profile"]:
        from torch.profiler import ProfilerActivity, profile

        n = 5
        sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as p:
            for _ in range(n):
                step()
            if cuda:
                torch.cuda.synchronize()
        if rank == 0:
            os.makedirs(args["profile"], exist_ok=True)
            path = os.path.join(args["profile"], f"{args['name']}{'-compiled' if args['compile'] else ''}.json")
            p.export_chrome_trace(path)
            prof.update(profile_summary(path, n) if cuda else {})
            prof["trace"] = path
    out.put((rank, ms, prof if rank == 0 else {"step_ms": prof["step_ms"], "clock": prof.get("clock")}))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_setup(name: str, args: dict, limit: float) -> tuple[float, dict]:
    """Milliseconds per step of one setup and its profile summary; raises RuntimeError naming the setup if a rank fails."""
    import torch.multiprocessing as mp

    from gpurig.launch.plan import free_port

    setup = SETUPS[name]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    args = {**args, "name": name}
    procs = [ctx.Process(target=_worker, args=(r, setup["world"], setup, args, port, out), daemon=True)
             for r in range(setup["world"])]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit
    per_rank: dict[int, float] = {}
    prof: dict = {}
    steps_of: dict[int, list[float]] = {}
    clocks: dict[int, dict] = {}
    try:
        while len(per_rank) < setup["world"]:
            try:
                rank, ms, got = out.get(timeout=1.0)
                per_rank[rank] = ms
                steps_of[rank] = got.pop("step_ms", [])
                clocks[rank] = got.pop("clock", None) or {}
                if rank == 0:
                    prof.update(got)
                continue
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"{name}: a rank exited with {dead[0].exitcode} (its traceback is above)") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: no result within {limit:.0f} s") from None
        for p in procs:
            p.join(timeout=60)
        prof["rank_ms"] = [per_rank[r] for r in sorted(per_rank)]
        prof["clock"] = [clocks.get(r, {}) for r in sorted(per_rank)]
        prof.update(jitter(steps_of))
        return per_rank[0], prof
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the (DDP-wrapped) model")
    ap.add_argument("--batch", type=int, default=256, help="per process")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per setup")
    ap.add_argument("--warmup", type=int, default=0, help="untimed steps first (default 15 eager, 25 compiled)")
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, from: " + ", ".join(SETUPS))
    ap.add_argument("--limit", type=float, default=300, help="seconds one setup may take")
    ap.add_argument("--profile", default=None, metavar="DIR", help="also profile 5 steps per setup; traces go here")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    names = [n for n in a.setups.split(",") if n]
    unknown = [n for n in names if n not in SETUPS]
    if unknown:
        ap.error(f"--setups: unknown {', '.join(unknown)}; known: {', '.join(SETUPS)}")
    needs_compile = [n for n in names if SETUPS[n].get("ca") or SETUPS[n].get("stages") or SETUPS[n].get("inductor")]
    if a.device == "cpu" and any(SETUPS[n].get("links_awake") for n in names):
        ap.error("--setups: 1proc-links-awake needs --device cuda (two GPUs joined by NVLink)")
    if needs_compile and not a.compile:
        ap.error(f"--setups: {', '.join(needs_compile)} need{'s' if len(needs_compile) == 1 else ''} --compile")
    if a.device == "cuda":
        import torch

        if torch.cuda.device_count() < 2:
            ap.error("--device cuda: needs 2 GPUs (use --device cpu for a quick check)")
    args = {"device": a.device, "compile": a.compile, "batch": a.batch, "steps": a.steps,
            "warmup": a.warmup or (25 if a.compile else 15), "profile": a.profile}
    print(f"{'compiled' if a.compile else 'eager'}, {a.device}, batch {a.batch} per process, {a.steps} timed steps",
          flush=True)
    rows, base = [], None
    for name in names:
        t = time.monotonic()
        try:
            ms, prof = run_setup(name, args, a.limit)
        except RuntimeError as exc:
            print(f"{name:14s} failed: {exc}", flush=True)
            rows.append({"setup": name, "error": str(exc)})
            continue
        base = base or (ms if name == "1proc" else None)
        eff = base / ms if base else None
        rows.append({"setup": name, "ms_per_step": ms, "efficiency": eff, "profile": prof})
        diff = prof.get("max_param_diff")
        print(f"{name:16s} {ms:8.2f} ms/step  " + (f"efficiency {eff:.3f}  " if eff else "")
              + f"host ahead {prof['host_ahead_ms']:.1f} ms  ({time.monotonic() - t:.0f} s)"
              + ("" if diff is None else f"  ranks' weights differ by {diff:.1e}" if diff > 1e-3 else "  in sync")
              + ("" if len(prof["rank_ms"]) < 2 else "  per rank " + " / ".join(f"{m:.2f}" for m in prof["rank_ms"]))
              + (f"  step sd {prof['step_sd_ms']:.2f} ms" if "step_sd_ms" in prof else "")
              + (f", slowest rank costs {prof['wait_for_slowest_ms']:.2f} ms/step if in lockstep"
                 if "wait_for_slowest_ms" in prof else ""),
              flush=True)
        if any(prof["clock"]):
            gpus = [SETUPS[name].get("gpu", r) for r in range(len(prof["clock"]))]
            print(f"{'':14s} " + "; ".join(
                f"GPU {g}: SM {c['sm_clock_mhz']:.0f} MHz, {c['power_w'] or 0:.0f} W"
                + (f", power cap {c['power_capped_fraction']:.0%}" if c.get("power_capped_fraction") else "")
                + (f", thermal {c['thermal_fraction']:.0%}" if c.get("thermal_fraction") else "")
                + (f", NVLink awake {c['nvlink_awake_fraction']:.0%}" if c.get("nvlink_awake_fraction") is not None
                   else "")
                for g, c in zip(gpus, prof["clock"], strict=False) if c), flush=True)
        if prof.get("span_ms") is not None:
            print(f"{'':14s} per step: span {prof['span_ms']:.2f} ms, compute {prof['compute_ms']:.2f}, "
                  f"nccl {prof['nccl_ms']:.2f} (alongside compute {prof['nccl_alongside_compute_ms']:.2f}), "
                  f"idle {prof['idle_ms']:.2f}, {prof['compute_kernels_per_step']:.0f} kernels", flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": args, "rows": rows}, f, indent=2)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
