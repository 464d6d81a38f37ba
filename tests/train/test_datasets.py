"""One set of dataset readers for both frameworks: the same files give the same samples, and the
same held-out split, under `framework=torch` and `framework=tf` (numpy only, no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest
from tests import datafiles

from gpurig.errors import BadInput
from gpurig.train import datasets
from gpurig.train.config import load_config
from gpurig.train.tf import sources as tf_sources
from gpurig.train.torch import data as torch_data


def _both(overrides: list[str]):
    """(torch ArrayData, tf DataSource) for the same settings."""
    torch_side = torch_data.load_arrays(load_config(overrides=overrides))
    tf_side = tf_sources.load_source(load_config(overrides=["framework=tf", *overrides]), 0)
    return torch_side, tf_side


def _nhwc(t) -> np.ndarray:
    return t.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("seed, fraction", [(0, 0.2), (7, 0.1), (123, 0.5)])
def test_digits_torch_and_tf_hold_out_exactly_the_same_samples(seed, fraction):
    t, f = _both(["data.dataset=digits", f"seed={seed}", f"data.test_fraction={fraction}"])
    assert np.array_equal(_nhwc(t.x_test), f.test.images) and np.array_equal(t.y_test.numpy(), f.test.labels)
    assert np.array_equal(_nhwc(t.x_train), f.train.images) and np.array_equal(t.y_train.numpy(), f.train.labels)
    assert len(t.x_test) == round(1797 * fraction)


def test_holdout_is_a_partition_fixed_by_the_seed():
    tr, te = datasets.holdout(101, 0.25, seed=3)
    assert sorted(np.concatenate([tr, te]).tolist()) == list(range(101)) and len(te) == 25
    again = datasets.holdout(101, 0.25, seed=3)
    assert np.array_equal(te, again[1])
    assert not np.array_equal(te, datasets.holdout(101, 0.25, seed=4)[1])
    assert len(datasets.holdout(10, 0.0, seed=0)[1]) == 0


def _image_folder(root, per_class=5):
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("ant", "bee", "cat"):
        (root / cls / "deeper").mkdir(parents=True)
        for i in range(per_class):
            where = root / cls / ("deeper" if i == 0 else "")
            Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(
                where / (f"{i}.png" if i % 2 else f"{i}.JPG"))
        (root / cls / "notes.txt").write_text("not an image")
        (root / cls / "x.bmp").write_bytes(b"BM")  # neither framework's loaders are asked to read BMP
    (root / ".cache").mkdir()


def test_imagefolder_torch_and_tf_list_and_hold_out_the_same_files(tmp_path):
    _image_folder(tmp_path)
    overrides = ["data.dataset=imagefolder", f"data.path={tmp_path}", "data.test_fraction=0.3", "seed=5"]
    classes, train, test = torch_data.imagefolder_split(load_config(overrides=overrides))
    src = tf_sources.load_source(load_config(overrides=["framework=tf", *overrides]), 0)
    assert classes == ["ant", "bee", "cat"] and src.num_classes == 3
    assert [f for f, _ in train] == src.train.files and [y for _, y in train] == src.train.labels.tolist()
    assert [f for f, _ in test] == src.test.files and len(test) == round(15 * 0.3)
    assert not any(f.endswith((".txt", ".bmp")) for f, _ in train + test)


def test_mnist_names_and_layouts_accepted_by_both(tmp_path):
    rng = np.random.default_rng(1)
    raw = tmp_path / "MNIST" / "raw"  # torchvision's download layout, with the '.idx' spelling, gzipped
    raw.mkdir(parents=True)
    xs, ys = rng.integers(0, 256, (30, 28, 28), dtype=np.uint8), rng.integers(0, 10, 30).astype(np.uint8)
    datafiles.write_idx(raw / "train-images.idx3-ubyte.gz", xs, gz=True)
    datafiles.write_idx(raw / "train-labels.idx1-ubyte.gz", ys, gz=True)
    t, f = _both(["data.dataset=mnist", f"data.path={tmp_path}"])
    assert np.array_equal(_nhwc(t.x_train), f.train.images) and np.array_equal(f.train.images[..., 0], xs)
    assert t.x_test is None and f.test is None  # no t10k files: no test part, under either framework


def test_mnist_with_half_a_test_pair_is_refused(tmp_path):
    rng = np.random.default_rng(2)
    datafiles.write_idx(tmp_path / "train-images-idx3-ubyte", rng.integers(0, 256, (4, 28, 28), dtype=np.uint8))
    datafiles.write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(4, dtype=np.uint8))
    datafiles.write_idx(tmp_path / "t10k-images-idx3-ubyte", rng.integers(0, 256, (2, 28, 28), dtype=np.uint8))
    with pytest.raises(BadInput, match="t10k-labels-idx1-ubyte"):
        datasets.load_mnist(tmp_path)


def test_cifar_the_same_arrays_for_both(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(3)
    for name in ("data_batch_1", "data_batch_3", "test_batch"):
        datafiles.write_cifar_batch(root / name, rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8),
                                    rng.integers(0, 10, 6).tolist())
    (root / "data_batch_9").write_bytes(b"not CIFAR's")  # only data_batch_1..5 are CIFAR-10's
    t, f = _both(["data.dataset=cifar10", f"data.path={tmp_path}"])
    assert np.array_equal(_nhwc(t.x_train), f.train.images) and len(f.train) == 12
    assert np.array_equal(_nhwc(t.x_test), f.test.images)
