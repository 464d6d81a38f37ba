"""`run_tf_verify`: MirroredStrategy on two logical CPU devices keeps its replicas identical and
equal to one device on the whole batch; a replica knocked out of sync is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpurig.comm.tf_verify import as_verify_result, plan_tf_verify, run_tf_verify
from gpurig.errors import BadInput

pytestmark = pytest.mark.tf


@pytest.mark.slow
def test_replicas_identical_and_equal_to_one_device(tmp_path):
    result = run_tf_verify(device="cpu", out_dir=tmp_path, steps=10)
    checks = {c["name"]: c for c in result["checks"]}
    assert result["passed"], result["checks"]
    assert checks["tf_replicas_identical"]["status"] == "pass"
    assert checks["tf_matches_single_device"]["status"] == "pass"
    assert result["nproc"] == 2 and result["backend"] == "MirroredStrategy/reduce_to_one"
    run_dir = result["run_dir"]
    assert run_dir.startswith(str(tmp_path))
    assert (Path(run_dir) / "tf_verify.json").is_file() and (Path(run_dir) / "tf-verify.log").is_file()
    rendered = as_verify_result(result)
    assert rendered.passed and [c.name for c in rendered.checks] == ["tf_replicas_identical", "tf_matches_single_device"]


@pytest.mark.slow
def test_a_desynchronised_replica_fails_both_checks(tmp_path):
    result = run_tf_verify(device="cpu", out_dir=tmp_path, steps=3, inject="desync")
    checks = {c["name"]: c for c in result["checks"]}
    assert not result["passed"]
    assert checks["tf_replicas_identical"]["status"] == "fail"
    assert "replica 1 vs 0" in checks["tf_replicas_identical"]["detail"]
    assert checks["tf_matches_single_device"]["status"] == "fail"


def test_bad_arguments_are_refused_before_tensorflow_starts():
    with pytest.raises(BadInput, match="--steps"):
        plan_tf_verify(device="cpu", steps=0)
    with pytest.raises(BadInput, match="--inject"):
        plan_tf_verify(device="cpu", inject="meteor")
    with pytest.raises(BadInput, match="at least 2"):
        plan_tf_verify(device="cpu", replicas=1)
    with pytest.raises(BadInput, match="tf.cross_device_ops=nccl"):
        plan_tf_verify(device="cpu", cross_device_ops="nccl")
