"""The TensorFlow trainer's data readers on small files written here (numpy only, no TensorFlow),
and one real CNN run on an image folder through tf.data."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
import sklearn.datasets  # noqa: F401  (sets KMP_* variables on import: do it before the env-leak guard looks)
from tests import datafiles
from tfrun import train

from gpurig.errors import BadInput
from gpurig.train.config import load_config
from gpurig.train.datasets import read_idx
from gpurig.train.tf.sources import epoch_order, load_source

pytestmark = pytest.mark.tf


def _mnist_dir(root, n=20):
    rng = np.random.RandomState(0)
    datafiles.write_idx(root / "train-images-idx3-ubyte.gz", rng.randint(0, 256, (n, 28, 28)), gz=True)
    datafiles.write_idx(root / "train-labels-idx1-ubyte.gz", np.arange(n) % 10, gz=True)
    datafiles.write_idx(root / "t10k-images-idx3-ubyte", rng.randint(0, 256, (5, 28, 28)))
    datafiles.write_idx(root / "t10k-labels-idx1-ubyte", np.arange(5))


def test_mnist_idx_files_gzipped_or_not(tmp_path):
    _mnist_dir(tmp_path)
    src = load_source(load_config(overrides=["framework=tf", "data.dataset=mnist", f"data.path={tmp_path}"]), 0)
    assert src.train.images.shape == (20, 28, 28, 1) and src.train.images.dtype == np.uint8
    assert list(src.train.labels[:12]) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert len(src.test) == 5 and src.image_shape == (28, 28, 1) and src.num_classes == 10


def test_mnist_missing_or_broken_files_name_the_file(tmp_path):
    cfg = load_config(overrides=["framework=tf", "data.dataset=mnist", f"data.path={tmp_path}"])
    with pytest.raises(BadInput, match="train-images-idx3-ubyte"):
        load_source(cfg, 0)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(BadInput, match="not an idx file of unsigned bytes"):
        read_idx(tmp_path / "bad")
    truncated = tmp_path / "short"
    truncated.write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + b"\x00" * 3)
    with pytest.raises(BadInput, match="holds 3 bytes"):
        read_idx(truncated)


def _cifar_dir(root, n=6):
    d = root / "cifar-10-batches-py"
    d.mkdir()
    rng = np.random.RandomState(1)
    for name in ("data_batch_1", "data_batch_2", "test_batch"):
        batch = {b"data": rng.randint(0, 256, (n, 3072)).astype(np.uint8), b"labels": list(range(n))}
        with open(d / name, "wb") as f:
            pickle.dump(batch, f)
    return d


def test_cifar10_pickle_batches_are_channels_last(tmp_path):
    d = _cifar_dir(tmp_path)
    src = load_source(load_config(overrides=["framework=tf", "data.dataset=cifar10", f"data.path={tmp_path}"]), 0)
    assert src.train.images.shape == (12, 32, 32, 3) and len(src.test) == 6
    # The pickle stores planes (R, G, B); pixel (0, 0) of image 0 takes bytes 0, 1024, 2048.
    with open(d / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")[b"data"][0]
    assert list(src.train.images[0, 0, 0]) == [raw[0], raw[1024], raw[2048]]
    assert src.augment  # random crop + flip by default for cifar10
    (d / "data_batch_2").write_bytes(b"not a pickle")
    with pytest.raises(BadInput, match="data_batch_2 is not a CIFAR-10 python batch"):
        load_source(load_config(overrides=["framework=tf", "data.dataset=cifar10", f"data.path={tmp_path}"]), 0)


def _image_folder(root, per_class=8, val=True):
    from PIL import Image

    rng = np.random.RandomState(0)
    for split in ("train", "val") if val else ("train",):
        for cls, color in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
            d = root / split / cls
            d.mkdir(parents=True)
            for i in range(per_class):
                pixels = (rng.rand(20, 24, 3) * 60).astype(np.uint8) + np.array(color, dtype=np.uint8) // 2
                Image.fromarray(pixels).save(d / (f"{i}.png" if i % 2 else f"{i}.jpg"))


def test_image_folder_lists_classes_and_files(tmp_path):
    _image_folder(tmp_path, per_class=4)
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    cfg = load_config(overrides=["framework=tf", "data.dataset=imagefolder", f"data.path={tmp_path}",
                                 "data.image_size=16"])
    src = load_source(cfg, 0)
    assert len(src.train) == 8 and len(src.test) == 8 and src.num_classes == 2
    assert src.image_shape == (16, 16, 3)
    assert all(f.endswith((".png", ".jpg")) for f in src.train.files)
    assert sorted(set(src.train.labels.tolist())) == [0, 1]


def test_image_folder_needs_two_classes(tmp_path):
    (tmp_path / "only").mkdir()
    cfg = load_config(overrides=["framework=tf", "data.dataset=imagefolder", f"data.path={tmp_path}"])
    with pytest.raises(BadInput, match="at least two class sub-directories"):
        load_source(cfg, 0)


def test_synthetic_images_hold_a_small_pool():
    cfg = load_config(preset_name="resnet50", overrides=["framework=tf", "data.samples=1000"])
    src = load_source(cfg, 0)
    assert len(src.train) == 1000 and src.train.images.shape == (256, 224, 224, 3)
    assert src.num_classes == 1000 and src.test is None


def test_digits_split_is_fixed_by_the_seed():
    a = load_source(load_config(overrides=["framework=tf"]), 0)
    b = load_source(load_config(overrides=["framework=tf"]), 0)
    c = load_source(load_config(overrides=["framework=tf", "seed=1"]), 0)
    assert (a.test.labels == b.test.labels).all() and not (a.test.labels == c.test.labels).all()
    assert len(a.train) + len(a.test) == 1797 and a.image_shape == (8, 8, 1)


def test_epoch_order_is_a_permutation_fixed_by_seed_and_epoch():
    first = epoch_order(100, 0, 0)
    assert sorted(first.tolist()) == list(range(100))
    assert (first == epoch_order(100, 0, 0)).all()
    assert not (first == epoch_order(100, 0, 1)).all()
    assert not (first == epoch_order(100, 1, 0)).all()


@pytest.mark.slow
def test_a_cnn_learns_an_image_folder_through_tf_data(tmp_path):
    data = tmp_path / "images"
    _image_folder(data, per_class=12)
    proc, s = train(tmp_path / "run", ["framework=tf", "model.name=cnn", "model.width=8", "data.dataset=imagefolder",
                                       f"data.path={data}", "data.image_size=16", "data.batch_size=4",
                                       "train.epochs=6", "optim.lr=0.01"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Red cats and blue dogs, decoded from PNG and JPEG, resized, flipped and cropped in tf.data.
    assert s["accuracy"] >= 0.9 and s["eval_samples"] == 24
    assert s["model"] == "cnn" and s["params"] > 0
