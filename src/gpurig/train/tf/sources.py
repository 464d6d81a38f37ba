"""The data sets of `TrainConfig`, read into numpy (or listed as files) for the TensorFlow trainer.

digits (scikit-learn), MNIST idx files (gzipped or not), CIFAR-10 python pickle batches, image
folders (class sub-directories) and synthetic images. No TensorFlow here: `data.Pipeline` turns a
`DataSource` into tf.data pipelines in the worker.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpurig.errors import BadInput
from gpurig.train.formats import read_cifar_batch

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


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
    image_shape: tuple[int, int, int]  # what the model sees (H, W, C)
    num_classes: int
    augment: bool


def _split_fraction(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.RandomState(seed).permutation(n)
    n_test = int(round(n * fraction))
    return order[n_test:], order[:n_test]


def _digits(cfg) -> DataSource:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images.astype(np.float32) / 16.0)[..., None]  # (1797, 8, 8, 1) in [0, 1]
    labels = d.target.astype(np.int64)
    train_idx, test_idx = _split_fraction(len(labels), cfg.data.test_fraction, cfg.seed)
    test = Split(images[test_idx], labels[test_idx]) if len(test_idx) else None
    return DataSource("digits", Split(images[train_idx], labels[train_idx]), test, (8, 8, 1), 10, False)


def _open_maybe_gz(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _find(root: Path, stem: str) -> Path:
    for cand in (root / stem, root / f"{stem}.gz", root / stem.replace("-idx", ".idx"),
                 root / f"{stem.replace('-idx', '.idx')}.gz"):
        if cand.is_file():
            return cand
    raise BadInput(f"data.path: {root} has no {stem} (or {stem}.gz) file (dataset 'mnist' reads the idx files)")


def read_idx(path: Path) -> np.ndarray:
    """An idx file (the MNIST format): magic (0, 0, dtype, ndim), big-endian sizes, then the data."""
    with _open_maybe_gz(path) as f:
        head = f.read(4)
        if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] != 0x08:
            raise BadInput(f"data.path: {path} is not an unsigned-byte idx file")
        ndim = head[3]
        shape = struct.unpack(f">{ndim}I", f.read(4 * ndim))
        data = np.frombuffer(f.read(), dtype=np.uint8)
    if data.size != int(np.prod(shape)):
        raise BadInput(f"data.path: {path} holds {data.size} bytes, its header says {shape}")
    return data.reshape(shape)


def _mnist(cfg) -> DataSource:
    root = Path(cfg.data.path).expanduser()
    x = read_idx(_find(root, "train-images-idx3-ubyte"))[..., None]
    y = read_idx(_find(root, "train-labels-idx1-ubyte")).astype(np.int64)
    try:
        xt = read_idx(_find(root, "t10k-images-idx3-ubyte"))[..., None]
        yt = read_idx(_find(root, "t10k-labels-idx1-ubyte")).astype(np.int64)
        test = Split(xt, yt)
    except BadInput:
        test = None
    if len(x) != len(y):
        raise BadInput(f"data.path: {root}: {len(x)} training images but {len(y)} labels")
    return DataSource("mnist", Split(x, y), test, (28, 28, 1), 10, False)


def _cifar_batches(root: Path, names: list[str]) -> Split:
    xs, ys = [], []
    for name in names:
        images, labels = read_cifar_batch(root / name)  # restricted unpickler: a file cannot run code
        xs.append(images.transpose(0, 2, 3, 1))
        ys.append(labels)
    return Split(np.concatenate(xs), np.concatenate(ys))


def _cifar10(cfg) -> DataSource:
    root = Path(cfg.data.path).expanduser()
    if (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    train_names = sorted(p.name for p in root.glob("data_batch_*"))
    if not train_names:
        raise BadInput(f"data.path: {root} has no data_batch_* files (dataset 'cifar10' reads cifar-10-batches-py)")
    train = _cifar_batches(root, train_names)
    test = _cifar_batches(root, ["test_batch"]) if (root / "test_batch").is_file() else None
    return DataSource("cifar10", train, test, (32, 32, 3), 10, True)


def _folder_split(root: Path, classes: list[str]) -> Split:
    files, labels = [], []
    for i, c in enumerate(classes):
        for p in sorted((root / c).rglob("*")):
            if p.suffix.lower() in IMAGE_SUFFIXES:
                files.append(str(p))
                labels.append(i)
    return Split(None, np.asarray(labels, dtype=np.int64), files)


def _imagefolder(cfg) -> DataSource:
    root = Path(cfg.data.path).expanduser()
    train_root = root / "train" if (root / "train").is_dir() else root
    classes = sorted(p.name for p in train_root.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise BadInput(f"data.path: {train_root} needs at least two class sub-directories, found {len(classes)}")
    train = _folder_split(train_root, classes)
    if len(train) == 0:
        raise BadInput(f"data.path: no image files ({', '.join(IMAGE_SUFFIXES)}) under {train_root}")
    if (root / "val").is_dir():
        test = _folder_split(root / "val", classes)
    else:
        tr, te = _split_fraction(len(train), cfg.data.test_fraction, cfg.seed)
        files = np.asarray(train.files)
        test = Split(None, train.labels[te], list(files[te])) if len(te) else None
        train = Split(None, train.labels[tr], list(files[tr]))
    size = cfg.data.image_size or 224
    return DataSource("imagefolder", train, test, (size, size, 3), len(classes), True)


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
        src = _digits(cfg)
    elif name == "mnist":
        src = _mnist(cfg)
    elif name == "cifar10":
        src = _cifar10(cfg)
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
