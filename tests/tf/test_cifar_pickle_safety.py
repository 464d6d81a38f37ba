"""A CIFAR-10 batch under data.path is data, never code: both trainers refuse a pickle that runs code."""

import pickle

import numpy as np
import pytest

from gpurig.errors import BadInput
from gpurig.train.datasets import read_cifar_batch


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch pwned",))


def test_a_real_format_batch_loads(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(5, 3072), dtype=np.uint8)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": data, b"labels": [1, 2, 3, 4, 5]}))
    images, labels = read_cifar_batch(path)
    assert images.shape == (5, 3, 32, 32) and labels.tolist() == [1, 2, 3, 4, 5]
    assert (images.reshape(5, -1) == data).all()


def test_a_pickle_that_runs_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}))
    with pytest.raises(BadInput, match="refusing to load"):
        read_cifar_batch(path)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_both_trainers_read_cifar_through_the_safe_loader(tmp_path, monkeypatch, framework):
    from gpurig.train.config import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}))
    cfg = load_config(overrides=[f"framework={framework}", "data.dataset=cifar10", f"data.path={tmp_path}"])
    with pytest.raises(BadInput, match="refusing to load"):
        if framework == "tf":
            from gpurig.train.tf import sources

            sources.load_source(cfg, 0)
        else:
            from gpurig.train.torch import data

            data.load_arrays(cfg)
    assert not (tmp_path / "pwned").exists()
