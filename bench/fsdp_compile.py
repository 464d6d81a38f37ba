"""FSDP on one GPU: eager against torch.compile, and both against the same model without FSDP.

One process, ResNet-50 (224x224, batch 256, bf16 autocast, foreach SGD), `fully_shard` on each of
its 16 residual blocks and then the root, as `gpurig train --set train.strategy=fsdp` builds it.
Each variant runs 10 untimed steps, then 30 timed ones (wall time to a device synchronisation):

  eager     FSDP, no compilation
  whole     FSDP, torch.compile of the whole model (dynamo cuts the graph at every block's hooks)
  block     FSDP, each block compiled before fully_shard
  nofsdp    no FSDP, the whole model compiled, channels_last weights (the reference)

With --profile, `whole` also prints torch.profiler's table of host time for 3 steps.

    PYTHONPATH=src python bench/fsdp_compile.py                       # all four
    PYTHONPATH=src python bench/fsdp_compile.py --variants eager,whole --profile
"""

from __future__ import annotations

import argparse
import os
import sys
import time

VARIANTS = {"eager": ("FSDP, eager", True, None), "whole": ("FSDP, whole model compiled", True, "whole"),
            "block": ("FSDP, each block compiled", True, "block"), "nofsdp": ("no FSDP, compiled", False, "whole")}


def run(label: str, fsdp: bool, comp: str | None, x, y, steps: int, profile: bool) -> float:
    import torch
    import torchvision
    from torch.distributed.fsdp import fully_shard

    from gpurig.train.torch.models import shard_units

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(x.device)
    if not fsdp:
        model = model.to(memory_format=torch.channels_last)  # fully_shard needs contiguous parameters
    if comp == "block":
        for unit in shard_units(model):
            unit.compile()
    if fsdp:
        for unit in shard_units(model):
            fully_shard(unit)
        fully_shard(model)
    step_model = torch.compile(model) if comp == "whole" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(step_model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = time.time()
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    warm = time.time() - t
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    queued = time.perf_counter()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / steps * 1000
    print(f"{label:28s} {ms:7.2f} ms/step  host queued {(queued - t0) / steps * 1000:6.2f} ms/step  "
          f"first 10 steps {warm:.0f} s", flush=True)
    if profile and comp == "whole" and fsdp:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as prof

        with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18), flush=True)
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=30, help="timed steps per variant")
    ap.add_argument("--profile", action="store_true", help="print the host-time table of `whole`")
    a = ap.parse_args()
    names = [n for n in a.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU")
    from gpurig.launch.plan import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    torch.backends.cudnn.benchmark = True
    x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (256,), device=dev)
    try:
        for name in names:
            label, fsdp, comp = VARIANTS[name]
            run(label, fsdp, comp, x, y, a.steps, a.profile)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
