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
    written = json.loads(plan.to_json())  # what the workers read (plan.json)
    assert written["world_size"] == 2 and written["device"] == "cpu" and written["run_dir"] == str(tmp_path / "run")
    assert written["framework"] == "torch" and written["tf"] is None
    back = TrainPlan.from_dict(written)
    assert back == plan  # the plan, config included, round-trips through the file
    assert load_config(base=written["config"]).to_dict() == plan.config.to_dict()


def test_tensorflow_runs_get_the_same_plan_with_their_strategy_decisions(tmp_path):
    from gpurig.train.tf.runner import plan_tf, worker_job

    cfg = load_config(overrides=["framework=tf", "data.batch_size=16"])
    plan = plan_tf(cfg, tmp_path / "run", device="cpu", env={}, nproc=2)
    assert isinstance(plan, TrainPlan) and plan.framework == "tf" and plan.world_size == 2
    assert plan.device == "cpu" and plan.run_dir == str((tmp_path / "run").resolve())
    assert plan.tf["global_batch"] == 32 and plan.tf["precision"] == "float32"
    assert not (tmp_path / "run").exists()
    back = TrainPlan.from_dict(json.loads(plan.to_json()))
    assert back == plan
    job = worker_job(json.loads(plan.to_json()))  # what the TensorFlow worker works from
    assert job["out_dir"] == plan.run_dir and job["config"] == plan.config.to_dict() and job["replicas"] == 2


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
    planned = json.loads(tf.stdout)
    assert planned["framework"] == "tf" and planned["world_size"] == 2 and planned["tf"]["replicas"] == 2
    assert {c["name"] for c in planned["tf"]["choices"]} >= {"precision", "cross_device_ops", "global_batch"}
    assert not (tmp_path / "t").exists()


def test_show_plan_with_a_bad_setting_exits_2_naming_it(run_cli, tmp_path):
    proc = run_cli("train", "--show-plan", "--device", "cpu", "--set", "data.global_batch_size=100", timeout=120)
    assert proc.returncode == 2 and "data.global_batch_size: 100 is not divisible" in proc.stderr
    assert "Traceback" not in proc.stderr
