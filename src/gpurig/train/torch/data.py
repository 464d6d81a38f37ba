"""Datasets, per-rank shards and the loaders that feed the device without starving it.

Two kinds of data:
- tensor datasets (digits, MNIST, CIFAR-10, synthetic images and tokens) are held whole in memory,
  on the GPU when they fit, and each batch is an index into them, augmented on the device: no
  worker processes, no host-to-device copy per step;
- file datasets (ImageFolder) go through a DataLoader with tuned workers, pinned memory,
  persistent workers and prefetching; JPEGs can be decoded on the GPU in batches.

Sharding: every epoch all ranks draw the same permutation (seed + epoch) and rank r takes every
world-th element, so the shards are disjoint and the shuffle is new each epoch. Evaluation gives
rank r the samples r, r+world, ... padded to equal length with a mask, so every sample is counted
exactly once (DistributedSampler instead repeats samples to pad).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gpurig.errors import BadInput
from gpurig.train import datasets
from gpurig.train.config import TrainConfig

# ---------------------------------------------------------------------------------------------
# Sharding (pure functions of n, rank, world, epoch, seed)


def epoch_permutation(n: int, epoch: int, seed: int, shuffle: bool = True) -> torch.Tensor:
    """The order of all n samples in `epoch`; identical on every rank."""
    if not shuffle:
        return torch.arange(n)
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=g)


def train_shard(n: int, rank: int, world: int, epoch: int, seed: int, shuffle: bool = True) -> torch.Tensor:
    """The indices rank `rank` trains on in `epoch`: every world-th element of the epoch's order.

    Each rank gets n // world samples, so all ranks run the same number of steps; the n % world
    left over change every epoch. Striding (not chunking) makes batch i of world ranks together
    equal batch i of one process with world times the batch: the same global batches.
    """
    per_rank = n // world
    return epoch_permutation(n, epoch, seed, shuffle)[rank::world][:per_rank]


def eval_shard(n: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, mask) for evaluation: samples rank, rank+world, ...; padded with mask False.

    Summed over ranks, the mask counts each of the n samples exactly once.
    """
    per_rank = -(-n // world)
    idx = torch.arange(rank, n, world)
    mask = torch.ones(per_rank, dtype=torch.bool)
    if len(idx) < per_rank:
        pad = per_rank - len(idx)
        mask[len(idx):] = False
        idx = torch.cat([idx, torch.zeros(pad, dtype=torch.long)])
    return idx, mask


# ---------------------------------------------------------------------------------------------
# Loading datasets into arrays


@dataclass
class ArrayData:
    """A dataset held in memory: images (N, C, H, W) uint8 or float32, tokens (N, T+1) int64, or your
    own Dataset's samples stacked as it gives them."""

    kind: str  # "image" | "token" | "tensor" (a user Dataset: passed to the model as it is)
    x_train: torch.Tensor
    y_train: torch.Tensor | None
    x_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    num_classes: int = 10
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    name: str = ""
    synthetic: bool = False

    @property
    def nbytes(self) -> int:
        total = 0
        for t in (self.x_train, self.y_train, self.x_test, self.y_test):
            if t is not None:
                total += t.numel() * t.element_size()
        return total


def _to_array_data(images: datasets.Images) -> ArrayData:
    """The shared reader's (N, H, W, C) numpy arrays as the (N, C, H, W) CPU tensors the trainer indexes."""

    def nchw(x: np.ndarray | None) -> torch.Tensor | None:
        return None if x is None else torch.from_numpy(np.array(x.transpose(0, 3, 1, 2), order="C"))

    def labels(y: np.ndarray | None) -> torch.Tensor | None:
        return None if y is None else torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))

    return ArrayData("image", nchw(images.x_train), labels(images.y_train), nchw(images.x_test),
                     labels(images.y_test), num_classes=images.num_classes, mean=images.mean, std=images.std,
                     name=images.name)


def synthetic_pool(cfg: TrainConfig, world: int, device: torch.device) -> ArrayData:
    """A pool of random samples generated on the device; epochs index into it (no data cost)."""
    b = cfg.data.batch_size
    pool = b * 2
    g = torch.Generator(device=device).manual_seed(cfg.seed + 777)
    if cfg.data.dataset == "synthetic-token":
        x = torch.randint(0, cfg.data.vocab_size, (pool, cfg.data.seq_len + 1), generator=g, device=device)
        return ArrayData("token", x, None, num_classes=cfg.data.vocab_size, name="synthetic-token", synthetic=True)
    size = cfg.data.image_size or 224
    x = torch.randn((pool, cfg.data.channels, size, size), generator=g, device=device)
    y = torch.randint(0, cfg.data.num_classes, (pool,), generator=g, device=device)
    return ArrayData("image", x, y, num_classes=cfg.data.num_classes, mean=[0.0] * cfg.data.channels,
                     std=[1.0] * cfg.data.channels, name="synthetic-image", synthetic=True)


def load_arrays(cfg: TrainConfig) -> ArrayData:
    """The tensor datasets (not synthetic, not imagefolder) as CPU tensors, read by the shared readers."""
    ds = cfg.data.dataset
    if ds == "digits":
        return _to_array_data(datasets.load_digits(cfg.data.test_fraction, cfg.seed))
    if ds == "mnist":
        return _to_array_data(datasets.load_mnist(cfg.data.path))
    if ds == "cifar10":
        return _to_array_data(datasets.load_cifar10(cfg.data.path))
    raise ValueError(ds)


# ---------------------------------------------------------------------------------------------
# Device-side augmentation and normalisation


def random_crop_flip(x: torch.Tensor, pad: int, gen: torch.Generator, flip: bool = True) -> torch.Tensor:
    """Per-sample random crop (after zero padding by `pad`) and horizontal flip, batched on x's device."""
    n, c, h, w = x.shape
    xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=gen, device=gen.device).to(x.device)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=gen, device=gen.device).to(x.device)
    rows = (torch.arange(h, device=x.device)[None, :] + oy[:, None])  # (n, h)
    cols = (torch.arange(w, device=x.device)[None, :] + ox[:, None])  # (n, w)
    if flip:
        do_flip = torch.rand((n,), generator=gen, device=gen.device).to(x.device) < 0.5
        cols = torch.where(do_flip[:, None], cols.flip(1), cols)
    nidx = torch.arange(n, device=x.device)[:, None, None]
    out = xp.permute(0, 2, 3, 1)[nidx, rows[:, :, None], cols[:, None, :]]  # (n, h, w, c)
    return out.permute(0, 3, 1, 2)


class Normalizer:
    """uint8 or float images -> float32, normalised, resized and in the chosen memory format."""

    def __init__(self, mean: list[float], std: list[float], device: torch.device, size: int | None,
                 channels_last: bool, scale_uint8: bool = True) -> None:
        self.mean = torch.tensor(mean or [0.0], device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(std or [1.0], device=device).view(1, -1, 1, 1)
        self.size = size
        self.channels_last = channels_last

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
        else:
            x = x.float()
        if self.size and (x.shape[-1] != self.size or x.shape[-2] != self.size):
            x = torch.nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear",
                                                align_corners=False, antialias=False)
        x = (x - self.mean) / self.std
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x


def as_given(channels_last: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """A user Dataset's inputs as it gives them (only the memory format of image batches changes)."""

    def same(x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 else x

    return same


# ---------------------------------------------------------------------------------------------
# Loaders. Each has batches_per_epoch and epoch(epoch, start_batch) -> iterator of (x, y).


class ArrayLoader:
    """Batches by indexing a dataset held in memory (on the GPU when it fits): no workers needed."""

    def __init__(self, data: ArrayData, cfg: TrainConfig, rank: int, world: int, device: torch.device,
                 hold_device: torch.device, augment: bool, channels_last: bool) -> None:
        self.data = data
        self.cfg = cfg
        self.rank, self.world = rank, world
        self.device = device
        self.b = cfg.data.batch_size
        self.augment = augment
        self.x = data.x_train.to(hold_device)
        self.y = data.y_train.to(hold_device) if data.y_train is not None else None
        if hold_device.type == "cpu" and device.type == "cuda":
            self.x, self.y = self.x.pin_memory(), (self.y.pin_memory() if self.y is not None else None)
        self.n = len(self.x)
        if data.synthetic:
            samples = cfg.data.samples or 64 * self.b * world
            self.per_rank = samples // world
        else:
            self.per_rank = self.n // world
        self.batches_per_epoch = self.per_rank // self.b
        if self.batches_per_epoch < 1:
            raise BadInput(
                f"data.batch_size: {self.b} per device x {world} processes needs at least {self.b * world} "
                f"training samples; {data.name} has {self.per_rank * world}"
            )
        size = cfg.data.image_size or None
        self.norm = (Normalizer(data.mean, data.std, device, size, channels_last) if data.kind == "image"
                     else as_given(channels_last))
        self.gen = torch.Generator(device=hold_device)

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.data.synthetic:
            # The pool is small; cycle through it without a permutation (the data carries no signal).
            for i in range(start_batch, self.batches_per_epoch):
                lo = (i * self.b) % (self.n - self.b + 1)
                yield self._finish(torch.arange(lo, lo + self.b, device=self.x.device), epoch, i)
            return
        idx = train_shard(self.n, self.rank, self.world, epoch, self.cfg.seed).to(self.x.device)
        for i in range(start_batch, self.batches_per_epoch):
            yield self._finish(idx[i * self.b:(i + 1) * self.b], epoch, i)

    def _finish(self, idx: torch.Tensor, epoch: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[idx]
        if self.data.kind == "token":
            x = x.to(self.device, non_blocking=True)
            return x[:, :-1], x[:, 1:]
        y = self.y[idx].to(self.device, non_blocking=True)
        x = x.to(self.device, non_blocking=True)
        if self.augment:
            # A generator seeded by (seed, rank, epoch, batch): the augmentation of a step does not
            # depend on what ran before it, so a resumed run augments exactly as a straight one.
            self.gen.manual_seed(hash((self.cfg.seed, self.rank, epoch, i)) & 0x7FFF_FFFF)
            pad = max(1, x.shape[-1] // 8)
            x = random_crop_flip(x, pad, self.gen, True)
        return self.norm(x), y


def eval_batches(data: ArrayData, cfg: TrainConfig, rank: int, world: int, device: torch.device,
                 channels_last: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, mask) batches of this rank's evaluation shard; the masks count each sample once."""
    assert data.x_test is not None and data.y_test is not None
    idx, mask = eval_shard(len(data.x_test), rank, world)
    norm = (Normalizer(data.mean, data.std, device, cfg.data.image_size or None, channels_last)
            if data.kind == "image" else as_given(channels_last))
    b = cfg.data.batch_size * 2
    for lo in range(0, len(idx), b):
        sel = idx[lo:lo + b]
        yield (norm(data.x_test[sel].to(device)), data.y_test[sel].to(device), mask[lo:lo + b].to(device))


# ---------------------------------------------------------------------------------------------
# ImageFolder


def imagefolder_split(cfg: TrainConfig) -> tuple[list[str], list[tuple[str, int]], list[tuple[str, int]]]:
    return datasets.imagefolder(cfg.data.path, cfg.data.test_fraction, cfg.seed)


class _FileDataset(torch.utils.data.Dataset):
    """Reads one file per index. decode="cpu": a uint8 CHW tensor resized to `size` (random
    resized crop + flip when augmenting); decode="gpu": the raw bytes, decoded later on the GPU."""

    def __init__(self, items: list[tuple[str, int]], size: int, decode: str, augment: bool, seed: int) -> None:
        self.items, self.size, self.decode, self.augment, self.seed = items, size, decode, augment, seed

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from torchvision.io import ImageReadMode, decode_image, read_file

        path, label = self.items[i]
        raw = read_file(path)
        if self.decode == "gpu" and path.lower().endswith(datasets.JPEG_SUFFIXES):
            return raw, label
        try:
            img = decode_image(raw, mode=ImageReadMode.RGB)
        except RuntimeError as exc:
            raise BadInput(f"data.path: {path} cannot be decoded ({exc})") from None
        return _resize_crop_cpu(img, self.size, self.augment), label


def _resize_crop_cpu(img: torch.Tensor, size: int, augment: bool) -> torch.Tensor:
    from torchvision.transforms.v2 import functional as F

    if augment:
        from torchvision.transforms.v2 import RandomResizedCrop

        i, j, h, w = RandomResizedCrop.get_params(img, scale=(0.35, 1.0), ratio=(3 / 4, 4 / 3))
        img = F.resized_crop(img, i, j, h, w, [size, size], antialias=True)
        if torch.rand(()) < 0.5:
            img = F.horizontal_flip(img)
        return img
    return F.resize(img, [size, size], antialias=True)


def _collate(batch: list[tuple[torch.Tensor, int]]) -> tuple[Any, torch.Tensor]:
    xs = [b[0] for b in batch]
    ys = torch.tensor([b[1] for b in batch], dtype=torch.long)
    if all(x.dim() == 3 for x in xs):
        return torch.stack(xs), ys
    if all(x.dim() == 1 for x in xs):
        # Raw JPEG bytes for GPU decoding, packed into one tensor plus lengths: a worker hands each
        # tensor to the main process through its own file descriptor, and 256 per batch times the
        # prefetched batches runs out of descriptors ("Bad file descriptor").
        return (torch.cat(xs), torch.tensor([len(x) for x in xs], dtype=torch.long)), ys
    return xs, ys  # a mix of JPEG bytes and decoded PNGs


def unpack_bytes(xs: Any) -> Any:
    """The list of per-image byte tensors from a packed (bytes, lengths) pair; anything else as is."""
    if isinstance(xs, (tuple, list)) and len(xs) == 2 and isinstance(xs[0], torch.Tensor) and xs[0].dim() == 1 \
            and isinstance(xs[1], torch.Tensor) and xs[1].dtype == torch.long and xs[1].dim() == 1 \
            and int(xs[1].sum()) == xs[0].numel():
        return list(torch.split(xs[0], xs[1].tolist()))
    return xs


class _EpochBatchSampler(torch.utils.data.Sampler):
    """Batches of this rank's shard for the current epoch, starting at a batch (for resume)."""

    def __init__(self, n: int, rank: int, world: int, b: int, seed: int, shuffle: bool) -> None:
        self.n, self.rank, self.world, self.b, self.seed, self.shuffle = n, rank, world, b, seed, shuffle
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        return (self.n // self.world) // self.b - self.start

    def __iter__(self):
        idx = train_shard(self.n, self.rank, self.world, self.epoch, self.seed, self.shuffle).tolist()
        for i in range(self.start, (self.n // self.world) // self.b):
            yield idx[i * self.b:(i + 1) * self.b]


def gpu_decode_batch(xs: Any, size: int, augment: bool, device: torch.device, gen: torch.Generator | None) -> torch.Tensor:
    """A list of JPEG byte tensors (or decoded uint8 images) -> a uint8 (N, 3, size, size) batch on
    the GPU. nvJPEG decodes the whole list in one call; one roi_align call crops and resizes every
    image when they share a shape (random resized crop when augmenting)."""
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.ops import roi_align

    if isinstance(xs, torch.Tensor):
        return xs.to(device, non_blocking=True)
    xs = unpack_bytes(xs)
    raw = [x for x in xs if x.dim() == 1]
    decoded = decode_jpeg(raw, mode=ImageReadMode.RGB, device=device) if raw else []
    it = iter(decoded)
    imgs = [next(it) if x.dim() == 1 else x.to(device) for x in xs]
    shapes = {tuple(i.shape) for i in imgs}
    n = len(imgs)
    if len(shapes) == 1:
        batch = torch.stack(imgs).float()
        _, _, h, w = batch.shape
        if augment:
            g = gen
            scale = torch.empty(n, device=device).uniform_(0.35, 1.0, generator=g)
            ratio = torch.exp(torch.empty(n, device=device).uniform_(np.log(3 / 4), np.log(4 / 3), generator=g))
            area = scale * h * w
            bw = torch.sqrt(area * ratio).clamp(max=w)
            bh = torch.sqrt(area / ratio).clamp(max=h)
            x0 = torch.rand(n, device=device, generator=g) * (w - bw)
            y0 = torch.rand(n, device=device, generator=g) * (h - bh)
        else:
            bw = torch.full((n,), float(w), device=device)
            bh = torch.full((n,), float(h), device=device)
            x0 = torch.zeros(n, device=device)
            y0 = torch.zeros(n, device=device)
        boxes = torch.stack([torch.arange(n, device=device, dtype=torch.float), x0, y0, x0 + bw, y0 + bh], 1)
        out = roi_align(batch, boxes, output_size=(size, size), sampling_ratio=2, aligned=True)
        if augment:
            flip = torch.rand(n, device=device, generator=gen) < 0.5
            out = torch.where(flip[:, None, None, None], out.flip(3), out)
        return out.clamp_(0, 255).to(torch.uint8)
    outs = [torch.nn.functional.interpolate(i[None].float(), size=(size, size), mode="bilinear",
                                            antialias=True, align_corners=False)[0] for i in imgs]
    return torch.stack(outs).clamp_(0, 255).to(torch.uint8)


def gpu_decode_failure(items: list[tuple[str, int]], device: torch.device) -> str | None:
    """Why batched GPU JPEG decoding does not work here (torchvision without nvJPEG...), or None."""
    from torchvision.io import read_file

    jpegs = [p for p, _ in items if p.lower().endswith(datasets.JPEG_SUFFIXES)][:2]
    if not jpegs:
        return "no JPEG files"
    try:
        gpu_decode_batch([read_file(p) for p in jpegs], 32, False, device, None)
    except (RuntimeError, NotImplementedError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


class SampledLoader:
    """A DataLoader over `self.sampler` (an `_EpochBatchSampler`): each epoch's batches, prepared by
    `self._prepare` on the device, a few batches ahead on a side CUDA stream when there is one."""

    sampler: _EpochBatchSampler
    loader: Any
    device: torch.device
    stream: Any

    def _prepare(self, xs: Any, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch, start_batch)
        it = iter(self.loader)
        if self.stream is None:
            for xs, ys in it:
                yield self._prepare(xs, ys)
            return
        yield from _ThreadPrefetch(it, self._prepare, self.device, self.stream)


class FileLoader(SampledLoader):
    """ImageFolder through a DataLoader: tuned workers, pinned memory, persistent workers, prefetch.

    With decode "gpu" the workers only read bytes and the GPU decodes (nvJPEG) and crops a whole
    batch; a side CUDA stream prepares the next batch while the current step computes.
    """

    def __init__(self, items: list[tuple[str, int]], cfg: TrainConfig, rank: int, world: int,
                 device: torch.device, workers: int, decode: str, augment: bool, channels_last: bool,
                 num_classes: int, shuffle: bool = True) -> None:
        self.cfg, self.device, self.decode, self.augment = cfg, device, decode, augment
        self.size = cfg.data.image_size or 224
        self.b = cfg.data.batch_size
        ds = _FileDataset(items, self.size, decode, augment and decode == "cpu", cfg.seed)
        self.sampler = _EpochBatchSampler(len(items), rank, world, self.b, cfg.seed, shuffle)
        self.batches_per_epoch = (len(items) // world) // self.b
        if self.batches_per_epoch < 1:
            raise BadInput(f"data.batch_size: {self.b} x {world} processes is more than the {len(items)} images in {cfg.data.path}")
        kw: dict[str, Any] = {}
        if workers > 0:
            kw = {"persistent_workers": True, "prefetch_factor": cfg.data.prefetch}
        self.loader = torch.utils.data.DataLoader(
            ds, batch_sampler=self.sampler, num_workers=workers, collate_fn=_collate,
            pin_memory=device.type == "cuda", **kw)
        self.norm = Normalizer([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], device, None, channels_last)
        self.gen = torch.Generator(device=device).manual_seed(cfg.seed * 7919 + rank)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _prepare(self, xs: Any, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.decode == "gpu":
            x = gpu_decode_batch(xs, self.size, self.augment, self.device, self.gen)
        else:
            x = xs.to(self.device, non_blocking=True)
        return self.norm(x), ys.to(self.device, non_blocking=True)



class _ThreadPrefetch:
    """Prepares batches (copy, GPU decode, crop, normalise) in a background thread on a side CUDA
    stream, a few batches ahead, so the training thread keeps launching kernels meanwhile; the
    training stream waits on each batch's event (no host synchronisation)."""

    DONE = object()

    def __init__(self, it: Iterator, prepare, device: torch.device, stream: torch.cuda.Stream, depth: int = 3) -> None:
        import queue
        import threading

        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.it, self.prepare, self.device, self.stream = it, prepare, device, stream
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> bool:
        import queue

        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        torch.cuda.set_device(self.device)  # the current device is per thread
        try:
            for xs, ys in self.it:
                with torch.cuda.stream(self.stream):
                    x, y = self.prepare(xs, ys)
                    ready = torch.cuda.Event()
                    ready.record(self.stream)
                if not self._put((x, y, ready)):
                    return
        except BaseException as exc:  # handed to the training thread, which raises it
            self._put(exc)
            return
        self._put(self.DONE)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        main = torch.cuda.current_stream(self.device)
        try:
            while True:
                item = self.q.get()
                if item is self.DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                x, y, ready = item
                main.wait_event(ready)
                x.record_stream(main)  # the allocator must not reuse them before the step is done
                y.record_stream(main)
                yield x, y
        finally:
            self.stop.set()
            self.thread.join(timeout=10)


def file_eval_batches(items: list[tuple[str, int]], cfg: TrainConfig, rank: int, world: int,
                      device: torch.device, channels_last: bool, decode: str) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, mask) over this rank's evaluation shard of image files, decoded like training."""
    idx, mask = eval_shard(len(items), rank, world)
    size = cfg.data.image_size or 224
    ds = _FileDataset(items, size, decode, False, cfg.seed)
    norm = Normalizer([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], device, None, channels_last)
    b = cfg.data.batch_size
    for lo in range(0, len(idx), b):
        sel = idx[lo:lo + b].tolist()
        xs, ys = _collate([ds[i] for i in sel])
        x = gpu_decode_batch(xs, size, False, device, None) if decode == "gpu" else xs.to(device)
        yield norm(x), ys.to(device), mask[lo:lo + b].to(device)
