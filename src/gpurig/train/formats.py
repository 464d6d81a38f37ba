"""Readers of on-disk dataset formats that need only numpy, shared by the PyTorch and TensorFlow paths.

CIFAR-10's python batches are pickles: they are read with an unpickler that admits only numpy
arrays and plain containers, so a file under `data.path` can never run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from gpurig.errors import BadInput


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
