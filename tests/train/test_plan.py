"""`TrainPlan`: a run decided once in the parent, every check made before any process starts, and
`gpurig train --show-plan` printing it without starting or writing anything."""

from __future__ import annotations

import json

import pytest

from gpurig.errors import BadInput
from gpurig.train.config import load_config
from gpurig.train.plan import TrainPlan, plan_training


def test_the_plan_holds_the_validated_config_and_writes_nothing(tmp_path):
    cfg = load_config(overrides=["data.global_batch_size=256", "data.batch_size=32"])
    plan = plan_training(cfg, device="cpu", nproc=2, out_dir=tmp_path / "run")
    assert isinstance(plan, TrainPlan) and plan.world_size == 2
    assert plan.config.train.grad_accum == 4  # 256 = 32 x 2 processes x 4
    assert plan.device == "cpu" and plan.nproc_per_node == 2 and "gloo" in plan.device_reason
    assert not (tmp_path / "run").exists()
    job = plan.job()  # what the workers read (launch.json)
    assert job["nproc"] == 2 and job["device"] == "cpu" and job["plan"]["run_dir"] == str(tmp_path / "run")
    back = load_config(base=job["config"])
    assert back.to_dict() == plan.config.to_dict()  # the config round-trips through the job file
    assert json.loads(plan.to_json())["world_size"] == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"nproc": 0}, "--nproc"),
    ({"nnodes": 2, "node_rank": 0}, "--master-addr"),
    ({"nnodes": 2, "node_rank": 3, "rdzv_endpoint": "h:1"}, "--node-rank: 3 is outside"),
    ({"resume": "missing.pt"}, "--resume missing.pt"),
])
def test_every_bad_setting_is_refused_by_the_plan(tmp_path, kwargs, message):
    with pytest.raises(BadInput, match=message):
        plan_training(load_config(), device="cpu", out_dir=tmp_path / "run", **{"nproc": 2, **kwargs})
    assert not (tmp_path / "run").exists()


def test_show_plan_prints_it_and_starts_nothing(run_cli, tmp_path):
    proc = run_cli("train", "--show-plan", "--device", "cpu", "--out", str(tmp_path / "r"),
                   "--set", "train.epochs=3", timeout=120)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["framework"] == "torch" and plan["world_size"] == 2 and plan["config"]["train"]["epochs"] == 3
    assert plan["run_dir"] == str(tmp_path / "r") and not (tmp_path / "r").exists()
    tf = run_cli("train", "--show-plan", "--framework", "tf", "--device", "cpu", "--out", str(tmp_path / "t"),
                 timeout=120)
    assert tf.returncode == 0, tf.stderr
    job = json.loads(tf.stdout)
    assert job["framework"] == "tf" and job["replicas"] == 2 and {c["name"] for c in job["choices"]} >= {
        "precision", "cross_device_ops", "global_batch"}
    assert not (tmp_path / "t").exists()


def test_show_plan_with_a_bad_setting_exits_2_naming_it(run_cli, tmp_path):
    proc = run_cli("train", "--show-plan", "--device", "cpu", "--set", "data.global_batch_size=100", timeout=120)
    assert proc.returncode == 2 and "data.global_batch_size: 100 is not divisible" in proc.stderr
    assert "Traceback" not in proc.stderr
