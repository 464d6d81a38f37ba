"""FSDP checkpoints in PyTorch's distributed checkpoint format, resumed on another number of
processes (CPU, gloo)."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from gpurig.train import checkpoint as ckpt
from gpurig.train.config import load_config
from gpurig.train.dcp import dcp_path, list_sharded
from gpurig.train.run import run_training

pytestmark = pytest.mark.slow

BASE = ["eval.enabled=false", "checkpoint.every_steps=10", "checkpoint.keep=5", "model.hidden=64",
        "train.strategy=fsdp", "checkpoint.sharded=true", "train.steps=20"]


def _model(dcp_dir, out) -> dict[str, torch.Tensor]:
    dcp_to_torch_save(dcp_dir, out)
    return torch.load(out, weights_only=True)["model"]


def test_sharded_fsdp_checkpoint_written_by_two_processes_loads_into_one(tmp_path):
    two = tmp_path / "two"
    cfg2 = load_config(preset_name="demo", overrides=BASE + ["data.batch_size=16"])
    run_training(cfg2, device="cpu", nproc=2, out_dir=two, timeout=240)
    assert [p.name for p in list_sharded(two)] == ["step-000000010.dcp", "step-000000020.dcp"]
    assert ckpt.list_checkpoints(two) == []  # nothing gathered on rank 0
    assert not [p for p in (two / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporary left

    # One process, the same global batch (1 x 32 = 2 x 16): it reshards the two ranks' shards, has
    # no step left to train, and writes the state it loaded back as its own checkpoint.
    one = tmp_path / "one"
    (one / "checkpoints").mkdir(parents=True)
    shutil.copytree(dcp_path(two, 20), dcp_path(one, 20))
    cfg1 = load_config(preset_name="demo", overrides=BASE + ["data.batch_size=32"])
    summary = run_training(cfg1, device="cpu", nproc=1, out_dir=one, resume="auto", timeout=240)
    assert summary["resumed_from"].endswith("step-000000020.dcp") and summary["world_size"] == 1
    a = _model(dcp_path(two, 20), tmp_path / "a.pt")
    b = _model(dcp_path(one, 20), tmp_path / "b.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
