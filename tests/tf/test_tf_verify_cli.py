"""`gpurig verify --framework tf` through the real entry point."""

import json

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_verify_tf_passes_on_two_cpu_replicas(run_cli, tmp_path):
    r = run_cli("verify", "--framework", "tf", "--json", "--out", str(tmp_path / "run"), timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["passed"] is True
    assert {c["name"] for c in doc["checks"]} == {"tf_replicas_identical", "tf_matches_single_device"}


def test_unknown_framework_exits_2(run_cli):
    r = run_cli("verify", "--framework", "jax")
    assert r.returncode == 2 and "--framework" in r.stderr
