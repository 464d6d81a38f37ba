"""Writers of small dataset files in the real on-disk formats (MNIST idx, CIFAR-10 python batches),
for tests that feed `gpurig train` the formats users download."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
from pathlib import Path

import numpy as np


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> None:
    """An idx file (the MNIST format): magic (0, 0, 0x08, ndim), big-endian sizes, then the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    data = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)


def write_cifar_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    """A CIFAR-10 python batch (pickle of {b'data': (N, 3072) uint8, b'labels': [...]})."""
    buf = io.BytesIO()
    pickle.dump({b"batch_label": b"gpurig", b"data": images.reshape(len(images), -1).astype(np.uint8),
                 b"labels": list(map(int, labels)), b"filenames": [b"x"] * len(labels)}, buf, protocol=2)
    path.write_bytes(buf.getvalue())
