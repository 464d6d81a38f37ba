"""Shards, evaluation padding, dataset file formats and augmentation (pure logic, no processes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests import datafiles

from gpurig.errors import BadInput
from gpurig.train import datasets
from gpurig.train.config import load_config
from gpurig.train.torch import data as D


@pytest.mark.parametrize("n, world", [(100, 2), (101, 2), (1797, 3), (10, 4)])
def test_train_shards_are_disjoint_equal_and_reshuffled(n, world):
    shards = [D.train_shard(n, r, world, epoch=0, seed=1) for r in range(world)]
    flat = torch.cat(shards).tolist()
    assert len(flat) == len(set(flat)) == (n // world) * world
    assert {len(s) for s in shards} == {n // world}
    again = D.train_shard(n, 0, world, epoch=1, seed=1)
    assert again.tolist() != shards[0].tolist()  # a new shuffle every epoch
    assert D.train_shard(n, 0, world, epoch=0, seed=1).tolist() == shards[0].tolist()  # reproducible


def test_two_ranks_batches_equal_one_process_double_batch():
    n, b = 64, 4
    one = D.train_shard(n, 0, 1, 3, seed=5)
    r0, r1 = (D.train_shard(n, r, 2, 3, seed=5) for r in range(2))
    for i in range(n // (2 * b)):
        assert sorted(one[i * 2 * b:(i + 1) * 2 * b].tolist()) == sorted(r0[i * b:(i + 1) * b].tolist() + r1[i * b:(i + 1) * b].tolist())


@pytest.mark.parametrize("n, world", [(359, 2), (360, 2), (7, 3), (3, 4)])
def test_eval_shards_count_every_sample_exactly_once(n, world):
    counts = np.zeros(n, dtype=int)
    lengths = set()
    for r in range(world):
        idx, mask = D.eval_shard(n, r, world)
        lengths.add(len(idx))
        np.add.at(counts, idx[mask].numpy(), 1)
    assert len(lengths) == 1  # every rank runs the same number of batches
    assert (counts == 1).all()


def _mnist_dir(tmp_path, gz):
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, (50, 28, 28), dtype=np.uint8)
    ys = rng.integers(0, 10, 50).astype(np.uint8)
    d = tmp_path / ("gz" if gz else "raw")
    d.mkdir()
    datafiles.write_idx(d / "train-images-idx3-ubyte", xs, gz)
    datafiles.write_idx(d / "train-labels-idx1-ubyte", ys, gz)
    datafiles.write_idx(d / "t10k-images-idx3-ubyte", xs[:20], gz)
    datafiles.write_idx(d / "t10k-labels-idx1-ubyte", ys[:20], gz)
    if gz:
        for p in d.iterdir():
            p.rename(p.with_name(p.name + ".gz"))
    return d, xs, ys


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files_load(tmp_path, gz):
    d, xs, ys = _mnist_dir(tmp_path, gz)
    arrays = D.load_arrays(load_config(overrides=["data.dataset=mnist", f"data.path={d}"]))
    assert arrays.x_train.shape == (50, 1, 28, 28) and arrays.x_test.shape == (20, 1, 28, 28)
    assert np.array_equal(arrays.x_train[:, 0].numpy(), xs) and np.array_equal(arrays.y_train.numpy(), ys)


def test_malformed_mnist_file_is_named(tmp_path):
    d, _, _ = _mnist_dir(tmp_path, False)
    bad = d / "train-labels-idx1-ubyte"
    bad.write_bytes(bad.read_bytes()[:-3])
    with pytest.raises(BadInput, match="train-labels-idx1-ubyte"):
        D.load_arrays(load_config(overrides=["data.dataset=mnist", f"data.path={d}"]))


def _cifar_dir(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(1)
    images = {}
    for name in ["data_batch_1", "data_batch_2", "test_batch"]:
        x = rng.integers(0, 256, (30, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 10, 30).tolist()
        datafiles.write_cifar_batch(root / name, x, y)
        images[name] = (x, y)
    return root, images


def test_cifar_pickle_directory_loads(tmp_path):
    root, images = _cifar_dir(tmp_path)
    arrays = D.load_arrays(load_config(overrides=["data.dataset=cifar10", f"data.path={tmp_path}"]))
    assert arrays.x_train.shape == (60, 3, 32, 32) and arrays.x_test.shape == (30, 3, 32, 32)
    assert np.array_equal(arrays.x_train[:30].numpy(), images["data_batch_1"][0])
    assert arrays.y_test.tolist() == images["test_batch"][1]


def test_cifar_refuses_foreign_pickles(tmp_path):
    import pickle

    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    (root / "data_batch_1").write_bytes(pickle.dumps({b"data": print}))
    with pytest.raises(BadInput, match="data_batch_1"):
        D.load_arrays(load_config(overrides=["data.dataset=cifar10", f"data.path={root}"]))


def test_random_crop_flip_keeps_shape_and_is_seeded():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a, b = D.random_crop_flip(x, 2, g1), D.random_crop_flip(x, 2, g2)
    assert a.shape == x.shape and torch.equal(a, b)


def test_imagefolder_scans_and_decodes_on_cpu(tmp_path, monkeypatch):
    from PIL import Image

    # torchvision's transforms import torch's compiler stack, which sets this variable on import.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    rng = np.random.default_rng(2)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(6):
            img = Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8))
            img.save(tmp_path / cls / (f"{i}.png" if i % 2 else f"{i}.jpg"))
    cfg = load_config(overrides=["data.dataset=imagefolder", f"data.path={tmp_path}", "data.batch_size=4",
                                 "data.image_size=16", "data.test_fraction=0.25"])
    classes, train, val = D.imagefolder_split(cfg)
    assert classes == ["cat", "dog"] and len(train) == 9 and len(val) == 3
    loader = D.FileLoader(train, cfg, 0, 1, torch.device("cpu"), workers=0, decode="cpu", augment=True,
                          channels_last=False, num_classes=2)
    batches = list(loader.epoch(0))
    assert len(batches) == 2 and batches[0][0].shape == (4, 3, 16, 16) and batches[0][0].dtype == torch.float32


def test_empty_imagefolder_is_named(tmp_path):
    with pytest.raises(BadInput, match="at least two class sub-directories"):
        datasets.scan_imagefolder(tmp_path)


def test_jpeg_bytes_travel_packed_in_one_tensor():
    # One tensor (and one file descriptor) per batch from a worker, not one per image.
    batch = [(torch.randint(0, 255, (n,), dtype=torch.uint8), i) for i, n in enumerate([5, 9, 3])]
    xs, ys = D._collate(batch)
    assert isinstance(xs, tuple) and xs[0].shape == (17,)
    assert [torch.equal(a, b[0]) for a, b in zip(D.unpack_bytes(xs), batch, strict=True)] == [True] * 3
    assert ys.tolist() == [0, 1, 2]
