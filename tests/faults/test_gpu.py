"""The same faults on two GPUs with NCCL (skipped without CUDA GPUs)."""

from __future__ import annotations

import time

import pytest
import torch
from tests.conftest import cuda_gpu_count

from gpurig.errors import ProblemFound
from gpurig.train.config import load_config
from gpurig.train.run import run_training
from gpurig.train.torch import checkpoint as ckpt

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

BASE = ["eval.enabled=false", "train.steps=40", "checkpoint.every_steps=10", "checkpoint.keep=5",
        "data.batch_size=16", "model.hidden=64", "train.precision=fp32", "train.compile=off"]


def _two_gpus() -> None:
    if cuda_gpu_count() < 2:
        pytest.skip("needs 2 GPUs")


def _params(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True, map_location="cpu")["model"]


def test_killed_rank_restarts_on_nccl_and_matches_an_uninterrupted_run(tmp_path):
    _two_gpus()
    cfg = load_config(preset_name="demo", overrides=BASE)
    run_training(cfg, device="cuda", nproc=2, out_dir=tmp_path / "ref", timeout=300)
    s = run_training(cfg, device="cuda", nproc=2, out_dir=tmp_path / "rst", timeout=300, max_restarts=1,
                     env={"GPURIG_TRAIN_FAULT": "kill:step=25:rank=1"})
    assert s["faults"]["restart_count"] == 1 and s["resumed_from"].endswith("step-000000020.pt")
    a, b = _params(ckpt.checkpoint_path(tmp_path / "ref", 40)), _params(ckpt.checkpoint_path(tmp_path / "rst", 40))
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)


def test_a_stuck_rank_on_nccl_ends_by_the_timeout_with_the_op_named(tmp_path):
    _two_gpus()
    cfg = load_config(preset_name="demo", overrides=BASE + ["train.steps=100000"])
    t0 = time.monotonic()
    with pytest.raises(ProblemFound) as err:
        run_training(cfg, device="cuda", nproc=2, out_dir=tmp_path / "run", timeout=300,
                     env={"GPURIG_TRAIN_FAULT": "hang:step=15:rank=1", "GPURIG_COLLECTIVE_TIMEOUT": "20",
                          "GPURIG_STOP_GRACE": "5"})
    text = str(err.value)
    print(text)
    assert time.monotonic() - t0 < 200
    assert "never arrived" in text or "timeout" in text.lower(), text


def test_sharded_fsdp_checkpoint_of_two_gpus_loads_on_one(tmp_path):
    _two_gpus()
    import shutil

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from gpurig.train.torch.dcp import dcp_path

    base = BASE + ["train.strategy=fsdp", "checkpoint.sharded=true", "train.steps=20"]
    run_training(load_config(preset_name="demo", overrides=base), device="cuda", nproc=2, out_dir=tmp_path / "two",
                 timeout=300)
    (tmp_path / "one" / "checkpoints").mkdir(parents=True)
    shutil.copytree(dcp_path(tmp_path / "two", 20), dcp_path(tmp_path / "one", 20))
    s = run_training(load_config(preset_name="demo", overrides=base + ["data.batch_size=32"]), device="cuda", nproc=1,
                     out_dir=tmp_path / "one", resume="auto", timeout=300)
    assert s["resumed_from"].endswith("step-000000020.dcp")
    dcp_to_torch_save(dcp_path(tmp_path / "two", 20), tmp_path / "a.pt")
    dcp_to_torch_save(dcp_path(tmp_path / "one", 20), tmp_path / "b.pt")
    a = torch.load(tmp_path / "a.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "b.pt", weights_only=True)["model"]
    for k in a:
        assert torch.equal(a[k].cpu(), b[k].cpu()), k
