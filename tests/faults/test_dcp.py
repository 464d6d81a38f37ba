"""FSDP checkpoints in PyTorch's distributed checkpoint format, resumed on another number of
processes (CPU, gloo)."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from gpurig.train.config import load_config
from gpurig.train.run import run_training
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch.dcp import dcp_path, list_sharded

pytestmark = pytest.mark.slow

BASE = ["eval.enabled=false", "checkpoint.every_steps=10", "checkpoint.keep=5", "model.hidden=64", "model.dropout=0",
        "train.strategy=fsdp", "checkpoint.sharded=true", "train.steps=20"]


def _model(dcp_dir, out) -> dict[str, torch.Tensor]:
    dcp_to_torch_save(dcp_dir, out)
    return torch.load(out, weights_only=True)["model"]


def test_sharded_fsdp_checkpoint_written_by_two_processes_loads_into_one(tmp_path):
    two = tmp_path / "two"
    # 44 steps: one epoch of the digits at a global batch of 32, so the last checkpoint is at an
    # epoch boundary, where a run on another number of processes continues (mid-epoch it restarts
    # the data order at the next boundary).
    cfg2 = load_config(preset_name="demo", overrides=BASE + ["train.steps=44", "data.batch_size=16"])
    run_training(cfg2, device="cpu", nproc=2, out_dir=two, timeout=240)
    assert [p.name for p in list_sharded(two)][-2:] == ["step-000000040.dcp", "step-000000044.dcp"]
    assert ckpt.list_checkpoints(two) == []  # nothing gathered on rank 0
    assert not [p for p in (two / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporary left

    # One process, the same global batch (1 x 32 = 2 x 16), reshards the two ranks' shards and trains
    # ten more steps; the two processes continue from the same checkpoint. A wrong load (a shard
    # missing, misplaced or resharded wrongly, the optimizer's moments lost) would part the two; a
    # right one ends where two processes end, to float32 rounding (one sum of 32 against two of 16).
    more = ["train.steps=54"]
    one = tmp_path / "one"
    (one / "checkpoints").mkdir(parents=True)
    shutil.copytree(dcp_path(two, 44), dcp_path(one, 44))
    cfg1 = load_config(preset_name="demo", overrides=BASE + more + ["data.batch_size=32"])
    summary = run_training(cfg1, device="cpu", nproc=1, out_dir=one, resume="auto", timeout=240)
    assert summary["resumed_from"].endswith("step-000000044.dcp") and summary["world_size"] == 1
    cfg2_more = load_config(preset_name="demo", overrides=BASE + more + ["data.batch_size=16"])
    run_training(cfg2_more, device="cpu", nproc=2, out_dir=two, resume="auto", timeout=240)
    a = _model(dcp_path(two, 54), tmp_path / "a.pt")
    b = _model(dcp_path(one, 54), tmp_path / "b.pt")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)
