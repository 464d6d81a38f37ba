"""`gpurig explain` through the real entry point: files, stdin, run directories, bad input."""

from __future__ import annotations

import json
from pathlib import Path

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_file_json_shape_and_best_first(run_cli):
    out = run_cli("explain", "--json", str(LOGS / "torchrun_rank1_raises_gloo.log"))
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert set(doc) >= {"matches"}
    first = doc["matches"][0]
    assert {"id", "title", "cause", "fix", "confidence", "evidence"} <= set(first)
    # torchrun's root cause (rank 1's own exception) before rank 0's "connection closed by peer".
    assert first["id"] == "uncaught-exception" and "boom on rank 1" in first["evidence"]
    assert [m["id"] for m in doc["matches"][1:]] == ["peer-connection-lost", "worker-terminated-by-launcher"]


def test_gloo_timeout_log(run_cli):
    out = run_cli("explain", "--json", str(LOGS / "torchrun_gloo_timeout.log"))
    doc = json.loads(out.stdout)
    assert doc["matches"][0]["id"] == "gloo-collective-timeout"
    assert "Timed out waiting 5000ms" in doc["matches"][0]["evidence"]


def test_stdin_and_human_output(run_cli):
    out = run_cli("explain", "-", input="[rank1]: RuntimeError: CUDA error: invalid device ordinal\n")
    assert out.returncode == 1
    assert "CUDA error: invalid device ordinal" in out.stdout
    assert "fix:" in out.stdout


def test_nothing_matched_says_so_with_next_steps(run_cli):
    out = run_cli("explain", "-", input="epoch 3 loss 0.123\nall good\n")
    assert out.returncode == 0
    assert "No known error matched" in out.stdout
    for step in ("NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL", "gpurig doctor"):
        assert step in out.stdout
    doc = json.loads(run_cli("explain", "--json", "-", input="nothing here\n").stdout)
    assert doc["matches"] == [] and len(doc["next_steps"]) == 3


def test_bad_input_exits_2(run_cli, tmp_path):
    out = run_cli("explain", str(tmp_path / "nope.log"))
    assert out.returncode == 2 and "nope.log: no such file" in out.stderr
    out = run_cli("explain", str(tmp_path))
    assert out.returncode == 2 and "not a `gpurig launch` run directory" in out.stderr
    out = run_cli("explain", cwd=tmp_path)  # no argument and no earlier run here
    assert out.returncode == 2 and "no earlier `gpurig launch` run" in out.stderr
    assert out.stdout == ""
