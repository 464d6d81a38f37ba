"""The common DDP tutorial template (fp32, default DataLoader, batch 32), as written, as a torchrun worker: the baseline `gpurig bench train` compares with.

What the template does (kept here on purpose): ResNet-50 from torchvision, float32, a Dataset whose
samples go through `ToTensor()` + `Normalize()` on the CPU, `DistributedSampler` with
`set_epoch`, a default `DataLoader(num_workers=4)` (no pinned memory, no persistent workers),
`.to(rank)` copies, plain SGD (lr 0.01), `DDP(model, device_ids=[rank])`. Two changes, both
needed to run it here and neither faster: the data are random images of the same shape instead of
a CIFAR-10 download (no network), and it is started by torchrun instead of `mp.spawn` with a fixed
port (the launch does not change the step).

    torchrun --nproc-per-node=2 -m gpurig.train.seed_baseline --run-dir runs/seed --steps 60
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist


class RandomImages(torch.utils.data.Dataset):
    """CIFAR-10-like samples: an HxWx3 uint8 image through the template's CPU transforms."""

    def __init__(self, n: int, size: int, classes: int) -> None:
        import torchvision.transforms as transforms

        self.n, self.size, self.classes = n, size, classes
        self.transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, (self.size, self.size, 3), dtype=np.uint8)
        return self.transform(img), int(i % self.classes)


def main(argv: list[str] | None = None) -> int:
    import torchvision.models as models
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    ap = argparse.ArgumentParser(prog="gpurig.train.seed_baseline")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args(argv)

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available() and os.environ.get("GPURIG_BASELINE_DEVICE", "cuda") == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(local)
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")

    model = models.resnet50(weights=None, num_classes=args.num_classes).to(dev)
    ddp_model = DDP(model, device_ids=[local] if cuda else None)
    n = (args.steps + args.warmup + 1) * args.batch_size * world
    dataset = RandomImages(n, args.image_size, args.num_classes)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank)
    dataloader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    ddp_model.train()
    sampler.set_epoch(0)
    t0 = None
    timed = 0
    last = None
    for i, (inputs, labels) in enumerate(dataloader):
        if i == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        inputs, labels = inputs.to(dev), labels.to(dev)
        optimizer.zero_grad()
        outputs = ddp_model(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        if i % 100 == 0 and rank == 0:
            last = loss.item()  # the template prints the loss every 100 steps
        if i >= args.warmup:
            timed += 1
        if timed >= args.steps:
            break
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - (t0 or time.perf_counter())
    rate = timed * args.batch_size * world / seconds if seconds > 0 else None
    if rank == 0:
        out = {"variant": "seed-template", "world_size": world, "device": dev.type,
               "batch_size_per_device": args.batch_size, "image_size": args.image_size, "steps_timed": timed,
               "samples_per_s": rate, "samples_per_s_per_device": rate / world if rate else None,
               "step_time": {"mean_s": seconds / timed if timed else None}, "final_loss": last,
               "settings": f"fp32, DataLoader(num_workers={args.workers}), DistributedSampler, SGD lr 0.01"}
        Path(args.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.run_dir) / "summary.json").write_text(json.dumps(out, indent=2))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
