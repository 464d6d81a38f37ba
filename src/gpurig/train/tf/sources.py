"""The data sets of `TrainConfig` as the TensorFlow trainer takes them (NHWC numpy, or files).

The files are read by the readers both frameworks share (`train/datasets.py`: digits, MNIST,
CIFAR-10, image folders, and the one held-out split rule); this module adds the synthetic images
and the per-epoch order. No TensorFlow here: `data.Pipeline` turns a `DataSource` into tf.data
pipelines in the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpurig.errors import BadInput
from gpurig.train import datasets


@dataclass
class Split:
    """One split held in memory (images NHWC float32 in [0, 1] or uint8) or as a list of files."""

    images: np.ndarray | None  # (N, H, W, C)
    labels: np.ndarray  # (N,) int64
    files: list[str] | None = None  # imagefolder: one path per sample instead of `images`

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class DataSource:
    name: str
    train: Split
    test: Split | None
    image_shape: tuple[int, ...]  # what the model sees (H, W, C); any sample shape when as_given
    num_classes: int
    augment: bool
    as_given: bool = False  # your own tf.data samples: batched as they are (no scaling, no resizing)


def _from_images(images: datasets.Images, augment: bool) -> DataSource:
    test = Split(images.x_test, images.y_test) if images.x_test is not None else None
    return DataSource(images.name, Split(images.x_train, images.y_train), test,
                      tuple(images.x_train.shape[1:]), images.num_classes, augment)


def _imagefolder(cfg) -> DataSource:
    classes, train, test = datasets.imagefolder(cfg.data.path, cfg.data.test_fraction, cfg.seed)

    def as_split(items: list[tuple[str, int]]) -> Split:
        return Split(None, np.asarray([y for _, y in items], dtype=np.int64), [f for f, _ in items])

    size = cfg.data.image_size or 224
    return DataSource("imagefolder", as_split(train), as_split(test) if test else None, (size, size, 3),
                      len(classes), True)


def _synthetic(cfg, samples: int) -> DataSource:
    size = cfg.data.image_size or 224
    shape = (size, size, cfg.data.channels)
    # A small fixed pool of random images, cycled: the pipeline costs nothing, so the run measures
    # the model and the all-reduce, as the benchmark needs.
    rng = np.random.RandomState(cfg.seed)
    pool = min(samples, 256)
    images = rng.randint(0, 256, size=(pool, *shape), dtype=np.uint8)
    labels = rng.randint(0, cfg.data.num_classes, size=samples).astype(np.int64)
    # `images` holds the pool only; sample i is image i % pool (see Pipeline._gather).
    return DataSource("synthetic-image", Split(images, labels), None, shape, cfg.data.num_classes, False)


def load_source(cfg, samples_default: int) -> DataSource:
    """Read the configured data set into a `DataSource` (files are listed, not decoded)."""
    name = cfg.data.dataset
    if name == "digits":
        src = _from_images(datasets.load_digits(cfg.data.test_fraction, cfg.seed), augment=False)
    elif name == "mnist":
        src = _from_images(datasets.load_mnist(cfg.data.path), augment=False)
    elif name == "cifar10":
        src = _from_images(datasets.load_cifar10(cfg.data.path), augment=True)
    elif name == "imagefolder":
        src = _imagefolder(cfg)
    elif name == "synthetic-image":
        src = _synthetic(cfg, cfg.data.samples or samples_default)
    else:
        raise BadInput(f"data.dataset: {name!r} is not available with framework=tf")
    if name not in ("synthetic-image", "imagefolder") and cfg.data.image_size and cfg.data.image_size != src.image_shape[0]:
        h, w, c = src.image_shape
        src.image_shape = (cfg.data.image_size, cfg.data.image_size, c)
    if cfg.data.augment == "on":
        src.augment = True
    elif cfg.data.augment == "off":
        src.augment = False
    if not cfg.eval.enabled:
        src.test = None
    return src


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: a permutation fixed by (seed, epoch), the same on every worker."""
    return np.random.RandomState((seed * 1_000_003 + epoch) % (2**32)).permutation(n).astype(np.int64)
