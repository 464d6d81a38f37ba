"""The datasets both frameworks read, in numpy only: one reader per format, one split rule.

The PyTorch trainer (`train/torch/data.py`) and the TensorFlow trainer (`train/tf/sources.py`) both call
these readers, so `data.dataset`, `data.path` and `data.test_fraction` mean the same samples under
either framework:

- `load_digits()`, `load_mnist(root)`, `load_cifar10(root)`: images as (N, H, W, C) arrays
  (uint8, or float32 in [0, 1] for digits) with int64 labels, the test part None where the files
  hold none;
- `imagefolder(root, fraction, seed)`: class names and (file, label) lists, never decoded here;
- `holdout(n, fraction, seed)`: which samples are held out for evaluation when the files have no
  test part of their own. A test checks that torch and tf hold out exactly the same ones.

CIFAR-10's python batches are pickles: they are read with an unpickler that admits only numpy
arrays and plain containers, so a file under `data.path` can never run code.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpurig.errors import BadInput

# Files an ImageFolder class directory may hold: the formats both torchvision's decode_image and
# tf.io.decode_image read. The GPU decoder takes JPEG only (JPEG_SUFFIXES).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
JPEG_SUFFIXES = (".jpg", ".jpeg")

# The names an MNIST directory's files go by: LeCun's (with '-idx') and the '.idx' spelling some
# mirrors use, each possibly gzipped. torchvision's download puts them under MNIST/raw/.
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte",
}

# Per-channel mean and standard deviation of each dataset's training images (pixel values / 255).
STATS = {
    "digits": ([0.3], [0.4]),
    "mnist": ([0.1307], [0.3081]),
    "cifar10": ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]),
}


@dataclass
class Images:
    """A dataset held in memory: images (N, H, W, C), labels (N,) int64; the test part may be absent."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    num_classes: int = 10

    @property
    def mean(self) -> list[float]:
        return STATS[self.name][0]

    @property
    def std(self) -> list[float]:
        return STATS[self.name][1]


# ---------------------------------------------------------------------------------------------
# The split rule


def holdout(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices) of n samples: round(n * fraction) held out, chosen by the seed.

    numpy's legacy RandomState keeps its stream across numpy releases, so a seed holds out the same
    samples on every machine and under both frameworks.
    """
    order = np.random.RandomState((int(seed) + 12345) % (2**32)).permutation(n).astype(np.int64)
    n_test = int(round(n * fraction))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray,
                                                                            np.ndarray | None, np.ndarray | None]:
    """(x_train, y_train, x_test, y_test) of one array dataset by `holdout`; no test part at fraction 0."""
    tr, te = holdout(len(y), fraction, seed)
    if not len(te):
        return x[tr], y[tr], None, None
    return x[tr], y[tr], x[te], y[te]


# ---------------------------------------------------------------------------------------------
# digits


def load_digits(fraction: float, seed: int) -> Images:
    """scikit-learn's 8x8 digits (1,797 images), float32 in [0, 1], split by `holdout`."""
    table = _digits_table()
    x = (table[:, :-1] / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    y = table[:, -1].astype(np.int64)
    return Images("digits", *split(x, y, fraction, seed))


def _digits_table() -> np.ndarray:
    """The digits as a (1797, 65) array (64 pixels 0..16, then the label).

    Read straight from scikit-learn's data file: importing scikit-learn costs each worker seconds
    of start-up on a small machine; `load_digits()` is the fallback.
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise BadInput("data.dataset: digits needs scikit-learn (pip install scikit-learn)")
    for loc in spec.submodule_search_locations or []:
        f = Path(loc) / "datasets" / "data" / "digits.csv.gz"
        if f.is_file():
            return np.loadtxt(f, delimiter=",", dtype=np.float64)
    from sklearn.datasets import load_digits as sk_load_digits

    d = sk_load_digits()
    return np.concatenate([d.data, d.target[:, None]], axis=1)


# ---------------------------------------------------------------------------------------------
# MNIST


def _read_maybe_gz(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"data.path: {path}: cannot read it ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise BadInput(f"data.path: {path} is not a readable gzip file ({exc})") from None
    return raw


def read_idx(path: Path) -> np.ndarray:
    """An MNIST idx file (gzipped or not) as a numpy array; BadInput naming the file if malformed."""
    raw = _read_maybe_gz(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise BadInput(f"data.path: {path} is not an idx file of unsigned bytes (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise BadInput(f"data.path: {path} is truncated (header)")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    count = int(np.prod(dims))
    if len(raw) - header != count:
        raise BadInput(f"data.path: {path} holds {len(raw) - header} bytes of data, the header says {count}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _mnist_file(root: Path, stem: str) -> Path | None:
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (root / name).is_file():
            return root / name
    return None


def load_mnist(root: Path | str) -> Images:
    """An MNIST directory: the four idx files (the t10k pair may be absent), gzipped or not."""
    root = Path(root).expanduser()
    if (root / "MNIST" / "raw").is_dir():  # torchvision's layout
        root = root / "MNIST" / "raw"
    files = {k: _mnist_file(root, stem) for k, stem in MNIST_FILES.items()}
    for key in ("train_images", "train_labels"):
        if files[key] is None:
            raise BadInput(f"data.path: {root} has no {MNIST_FILES[key]} (or .gz); an MNIST directory holds "
                           + ", ".join(MNIST_FILES.values()))
    if (files["test_images"] is None) != (files["test_labels"] is None):
        missing = "test_images" if files["test_images"] is None else "test_labels"
        raise BadInput(f"data.path: {root} has one of the t10k files but not {MNIST_FILES[missing]} (or .gz)")
    parts = {k: read_idx(p) for k, p in files.items() if p is not None}
    for name, xk, yk in (("train", "train_images", "train_labels"), ("t10k", "test_images", "test_labels")):
        if xk in parts:
            x, y = parts[xk], parts[yk]
            if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
                raise BadInput(f"data.path: {root}: {name} images {x.shape} and labels {y.shape} do not match")
    test_x = parts.get("test_images")
    return Images("mnist", parts["train_images"][..., None], parts["train_labels"].astype(np.int64),
                  test_x[..., None] if test_x is not None else None,
                  parts["test_labels"].astype(np.int64) if test_x is not None else None)


# ---------------------------------------------------------------------------------------------
# CIFAR-10


class CifarUnpickler(pickle.Unpickler):
    """Only what the CIFAR-10 pickles need (numpy arrays and plain containers): no code execution."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One `data_batch_N` / `test_batch` file as (images N×3×32×32 uint8, labels N int64)."""
    try:
        with open(path, "rb") as fh:
            d = CifarUnpickler(fh, encoding="bytes").load()
        data = np.asarray(d[b"data"], dtype=np.uint8)
        labels = np.asarray(d[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadInput(f"data.path: {path} is not a CIFAR-10 python batch ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        raise BadInput(f"data.path: {path}: cannot read it ({exc.strerror or exc})") from None
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise BadInput(f"data.path: {path}: expected data (N, 3072) and N labels, got {data.shape} and {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar10(root: Path | str) -> Images:
    """A cifar-10-batches-py directory: data_batch_1..5 (those present) and test_batch (if present)."""
    root = Path(root).expanduser()
    if (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    present = [root / f"data_batch_{i}" for i in range(1, 6) if (root / f"data_batch_{i}").is_file()]
    if not present:
        raise BadInput(f"data.path: {root} has no data_batch_1..5; expected a cifar-10-batches-py directory")
    parts = [read_cifar_batch(p) for p in present]
    xs = np.concatenate([p[0] for p in parts]).transpose(0, 2, 3, 1)
    ys = np.concatenate([p[1] for p in parts])
    test = root / "test_batch"
    if test.is_file():
        xt, yt = read_cifar_batch(test)
        return Images("cifar10", xs, ys, xt.transpose(0, 2, 3, 1), yt)
    return Images("cifar10", xs, ys, None, None)


# ---------------------------------------------------------------------------------------------
# ImageFolder


def scan_imagefolder(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """(class names, [(file, label)]) for root/<class>/**/<image>; BadInput naming root if empty."""
    try:
        classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError as exc:
        raise BadInput(f"data.path: {root}: cannot list it ({exc.strerror or exc})") from None
    if len(classes) < 2:
        found = f"only {classes[0]!r}" if classes else "none"
        raise BadInput(f"data.path: {root} needs at least two class sub-directories ({root}/<class>/<image>.jpg); "
                       f"found {found}")
    items: list[tuple[str, int]] = []
    for label, cls in enumerate(classes):
        for dirpath, dirs, files in os.walk(root / cls):
            dirs.sort()
            for f in sorted(files):
                if f.lower().endswith(IMAGE_SUFFIXES):
                    items.append((os.path.join(dirpath, f), label))
    if not items:
        raise BadInput(f"data.path: {root} has class directories but no {'/'.join(IMAGE_SUFFIXES)} files")
    return classes, items


def imagefolder(root: Path | str, fraction: float, seed: int) -> tuple[list[str], list[tuple[str, int]],
                                                                       list[tuple[str, int]]]:
    """(classes, train items, test items). root/train and root/val when present (val optional),
    else root/<class>/ with `holdout` choosing the test items."""
    root = Path(root).expanduser()
    if (root / "train").is_dir():
        classes, train = scan_imagefolder(root / "train")
        val: list[tuple[str, int]] = []
        if (root / "val").is_dir():
            vclasses, val = scan_imagefolder(root / "val")
            if vclasses != classes:
                raise BadInput(f"data.path: {root}/val has classes {vclasses[:5]}..., train has {classes[:5]}...")
        return classes, train, val
    classes, items = scan_imagefolder(root)
    tr, te = holdout(len(items), fraction, seed)
    return classes, [items[i] for i in tr], [items[i] for i in te]
