"""The `Trainer`'s part for your own model, data and loss (model.entry, data.entry,
train.loss_entry): building them in the worker and saying each choice. A Dataset that fits in
memory is held there (on the GPU when it fits, as gpurig's own datasets); a larger one is read
through a DataLoader with tuned workers, pinned memory and prefetching, sharded as the others."""

from __future__ import annotations

import torch
from torch import nn

from gpurig.train.torch import data as D
from gpurig.train.torch import entries
from gpurig.train.torch.choices import Choice, default_workers
from gpurig.train.torch.models import count_params


class UserEntries:
    own_loss = False
    loss_fn = None

    def _user_model(self, num_classes: int | None) -> nn.Module:
        torch.manual_seed(self.cfg.seed)  # the same initial weights on every rank
        model = entries.build_user_model(self.cfg, num_classes or self.entries.get("num_classes"))
        self.own_loss = bool(self.entries.get("returns_loss"))
        self.choose(Choice("model", self.cfg.model.entry, f"your own model: {count_params(model):,} parameters"))
        return model

    def _user_loss(self) -> None:
        self.loss_fn = entries.user_loss(self.cfg)
        self.choose(Choice("loss", "model" if self.own_loss else (self.cfg.train.loss_entry or "cross_entropy"),
                           "the model's forward takes the targets and returns its loss" if self.own_loss else
                           "your own loss function" if self.loss_fn is not None else
                           "class scores against integer targets"))

    def _one_sample(self) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """One training sample as the model takes it (for counting its FLOPs), without starting a loader."""
        dev = self.ctx.device
        if getattr(self.loader, "x", None) is not None and getattr(self.loader, "y", None) is not None:
            x, y = self.loader.x[:1].to(dev), self.loader.y[:1].to(dev)
            return self.loader.norm(x), y, self.own_loss
        return (torch.zeros((1, *self.in_shape), device=dev), torch.zeros(1, dtype=torch.long, device=dev),
                self.own_loss)

    def _user_data(self) -> D.ArrayData | entries.Streamed:
        arrays = entries.user_arrays(self.cfg, self.entries)
        if isinstance(arrays, entries.Streamed):
            held = f", {len(arrays.test.x_test):,} held out for evaluation" if arrays.test is not None else ""
            self.choose(Choice("data", self.cfg.data.entry, f"your own Dataset: {len(arrays.train):,} samples{held}, "
                               "read by DataLoader workers as training goes"))
            return arrays
        held = f", {len(arrays.x_test):,} held out for evaluation" if arrays.x_test is not None else ""
        self.choose(Choice("data", self.cfg.data.entry, f"your own Dataset: {len(arrays.x_train):,} samples{held}, "
                           f"read once into memory ({arrays.nbytes / 2**20:,.0f} MiB)"))
        return arrays

    def _streamed_input(self, streamed: entries.Streamed) -> None:
        cfg, ctx, dev = self.cfg, self.ctx, self.ctx.device
        workers = cfg.data.workers if cfg.data.workers != "auto" else default_workers(ctx.world)
        self.loader = DatasetLoader(streamed.train, cfg, ctx.rank, ctx.world, dev, workers, self.channels_last)
        self.choose(Choice("data_placement", "loader", f"your Dataset is larger than "
                           f"{entries.MATERIALISE_LIMIT >> 30} GiB in memory: a DataLoader with {workers} worker(s) per "
                           f"process, pinned memory, persistent workers, prefetch {cfg.data.prefetch}"))
        self.eval_data = streamed.test if cfg.eval.enabled else None
        self.kind, self.num_classes = "image", streamed.num_classes
        self.in_shape = tuple(streamed.sample_shape)


class DatasetLoader(D.SampledLoader):
    """Your map-style Dataset through a DataLoader: this rank's shard of a new permutation each epoch
    (the same rule as gpurig's own datasets), tuned workers, pinned memory, persistent workers,
    prefetching, and on a GPU the copy and layout done a few batches ahead on a side stream."""

    def __init__(self, ds, cfg, rank: int, world: int, device: torch.device, workers: int,
                 channels_last: bool) -> None:
        from gpurig.errors import BadInput

        self.device = device
        self.b = cfg.data.batch_size
        self.sampler = D._EpochBatchSampler(len(ds), rank, world, self.b, cfg.seed, True)
        self.batches_per_epoch = (len(ds) // world) // self.b
        if self.batches_per_epoch < 1:
            raise BadInput(f"data.batch_size: {self.b} x {world} processes is more than the {len(ds)} samples of "
                           "your Dataset")
        kw = {"persistent_workers": True, "prefetch_factor": cfg.data.prefetch} if workers > 0 else {}
        self.loader = torch.utils.data.DataLoader(ds, batch_sampler=self.sampler, num_workers=workers,
                                                  pin_memory=device.type == "cuda", **kw)
        self.norm = D.as_given(channels_last)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _prepare(self, xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.norm(xs.to(self.device, non_blocking=True)), ys.to(self.device, non_blocking=True)
