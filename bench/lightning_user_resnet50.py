"""PyTorch Lightning as users typically write it: the comparison point for bench/train_vs_lightning.py.

A synthetic `Dataset` (a fresh random tensor per sample) through a `DataLoader` with 8 workers and
pinned memory, a `LightningModule` around torchvision's ResNet-50, SGD, and
`Trainer(precision="bf16-mixed", strategy="ddp")`. Throughput is measured by a callback between
two synchronised points after a warm-up. Lightning launches its own processes (it re-runs this
script once per extra device).

    python bench/lightning_user_resnet50.py --devices 2 --steps 100 --json-out runs/lightning.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import lightning as L
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, n: int, size: int, classes: int) -> None:
        self.n, self.size, self.classes = n, size, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.randn(3, self.size, self.size), torch.randint(0, self.classes, ()).item()


class Classifier(L.LightningModule):
    def __init__(self, arch: str, classes: int) -> None:
        super().__init__()
        self.model = getattr(torchvision.models, arch)(weights=None, num_classes=classes)
        self.loss = torch.nn.CrossEntropyLoss()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss(self.model(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


class Throughput(L.Callback):
    def __init__(self, warmup: int, batch: int) -> None:
        self.warmup, self.batch = warmup, batch
        self.t0 = None
        self.timed = 0

    def _sync(self, trainer):
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup:
            self._sync(trainer)
            self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.t0 is not None:
            self.timed += 1

    def on_train_end(self, trainer, pl_module):
        self._sync(trainer)
        self.seconds = time.perf_counter() - self.t0 if self.t0 else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--accelerator", default="gpu")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--precision", default="bf16-mixed")
    ap.add_argument("--json-out", required=True)
    args = ap.parse_args()

    world = args.devices
    ds = SyntheticImages((args.steps + 2) * args.batch_size * world, args.image_size, 1000)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, pin_memory=True, shuffle=True)
    meter = Throughput(args.warmup, args.batch_size)
    trainer = L.Trainer(accelerator=args.accelerator, devices=args.devices, strategy="ddp" if world > 1 else "auto",
                        precision=args.precision, max_steps=args.steps, logger=False, enable_checkpointing=False,
                        callbacks=[meter], enable_model_summary=False)
    trainer.fit(Classifier(args.arch, 1000), loader)
    if trainer.global_rank == 0 and meter.seconds:
        rate = meter.timed * args.batch_size * world / meter.seconds
        out = {"variant": "lightning", "lightning_version": L.__version__, "world_size": world,
               "batch_size_per_device": args.batch_size, "image_size": args.image_size, "steps_timed": meter.timed,
               "samples_per_s": rate, "samples_per_s_per_device": rate / world, "precision": args.precision,
               "settings": f"Trainer(precision={args.precision!r}, strategy='ddp'), DataLoader(num_workers={args.workers}, pin_memory=True)"}
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
