"""Where a 2-process DDP step loses time against one process: each suspect removed in turn, side by side.

Measured on 2x H200: every 2-GPU run of ResNet-50 is 2-3 ms per step slower than one GPU, while
the gradient all-reduce needs about 0.5 ms at the bandwidth NCCL reaches there. This runs the
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

    PYTHONPATH=src python bench/ddp_overhead.py                     # CUDA, eager
    PYTHONPATH=src python bench/ddp_overhead.py --compile           # the same under torch.compile
    PYTHONPATH=src python bench/ddp_overhead.py --device cpu --steps 5 --batch 8   # a quick check anywhere

Prints milliseconds per step and the efficiency against `1proc` for each setup (rank 0's timing;
every rank runs the same steps).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time

SETUPS = {
    "1proc": {"world": 1},
    "2proc-nodp": {"world": 2, "ddp": False},
    "ddp": {"world": 2},
    "ddp-nobb": {"world": 2, "broadcast_buffers": False},
    "ddp-keepgrad": {"world": 2, "set_to_none": False},
    "ddp-both": {"world": 2, "broadcast_buffers": False, "set_to_none": False},
}


def _worker(rank: int, world: int, setup: dict, args: dict, port: int, out) -> None:
    import torch
    import torch.distributed as dist

    cuda = args["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
        dev = torch.device("cpu")
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                **({"device_id": dev} if cuda else {}))
    torch.manual_seed(0)
    if cuda:
        import torchvision

        torch.backends.cudnn.benchmark = True
        model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
        shape = (args["batch"], 3, 224, 224)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).to(dev)
        shape = (args["batch"], 3, 32, 32)
    wrapped = model
    if world > 1 and setup.get("ddp", True):
        import inspect

        from torch.nn.parallel import DistributedDataParallel as DDP

        # torch 2.14 renamed broadcast_buffers to forward_sync_buffers (the old name warns there).
        sync_kw = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
                   else "broadcast_buffers")
        wrapped = DDP(model, device_ids=[rank] if cuda else None, gradient_as_bucket_view=True, static_graph=True,
                      bucket_cap_mb=25, **{sync_kw: setup.get("broadcast_buffers", True)})
    step_model = torch.compile(wrapped) if args["compile"] else wrapped
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=cuda or None)
    x = torch.randn(*shape, device=dev)
    if cuda:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (shape[0],), device=dev)
    set_to_none = setup.get("set_to_none", True)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(step_model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()
        if world > 1:
            dist.barrier()

    for _ in range(args["warmup"]):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(args["steps"]):
        step()
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / args["steps"] * 1000
    if rank == 0:
        out.put(ms)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_setup(name: str, args: dict, limit: float) -> float:
    """Milliseconds per step of one setup; raises RuntimeError naming the setup if a rank fails."""
    import torch.multiprocessing as mp

    from gpurig.launch.plan import free_port

    setup = SETUPS[name]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, setup["world"], setup, args, port, out), daemon=True)
             for r in range(setup["world"])]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit
    try:
        while True:
            try:
                ms = out.get(timeout=1.0)
                break
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"{name}: a rank exited with {dead[0].exitcode} (its traceback is above)") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: no result within {limit:.0f} s") from None
        for p in procs:
            p.join(timeout=60)
        return ms
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
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    names = [n for n in a.setups.split(",") if n]
    unknown = [n for n in names if n not in SETUPS]
    if unknown:
        ap.error(f"--setups: unknown {', '.join(unknown)}; known: {', '.join(SETUPS)}")
    if a.device == "cuda":
        import torch

        if torch.cuda.device_count() < 2:
            ap.error("--device cuda: needs 2 GPUs (use --device cpu for a quick check)")
    args = {"device": a.device, "compile": a.compile, "batch": a.batch, "steps": a.steps,
            "warmup": a.warmup or (25 if a.compile else 15)}
    print(f"{'compiled' if a.compile else 'eager'}, {a.device}, batch {a.batch} per process, {a.steps} timed steps",
          flush=True)
    rows, base = [], None
    for name in names:
        t = time.monotonic()
        try:
            ms = run_setup(name, args, a.limit)
        except RuntimeError as exc:
            print(f"{name:14s} failed: {exc}", flush=True)
            rows.append({"setup": name, "error": str(exc)})
            continue
        base = base or (ms if name == "1proc" else None)
        eff = base / ms if base else None
        rows.append({"setup": name, "ms_per_step": ms, "efficiency": eff})
        print(f"{name:14s} {ms:8.2f} ms/step  " + (f"efficiency {eff:.3f}  " if eff else "")
              + f"({time.monotonic() - t:.0f} s)", flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": args, "rows": rows}, f, indent=2)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
