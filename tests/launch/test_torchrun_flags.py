"""`gpurig launch` takes what torchrun users type (shown with --dry-run: nothing is started)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch.distributed as dist\nprint('hi')\n")
    return path


def plan(run_cli, tmp_path, *args):
    out = run_cli("launch", "--dry-run", "--json", "--device", "cpu", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["plan"]


def test_torchrun_flags_before_the_script(run_cli, tmp_path, script):
    p = plan(run_cli, tmp_path, "--standalone", "--nproc_per_node=2", "--master_port", "29555", "--tee", "1",
             "--local-ranks-filter", "0", "--rdzv-conf", "join_timeout=60", str(script), "--epochs", "3")
    argv = p["argv"]
    assert argv[-3:] == [str(script), "--epochs", "3"]  # --standalone is not taken for the script
    assert "--rdzv-endpoint=127.0.0.1:29555" in argv and "--nproc-per-node=2" in argv
    assert "--tee=1" in argv and "--tee=3" not in argv
    assert "--local-ranks-filter=0" in argv and "--rdzv-conf=join_timeout=60" in argv


def test_master_addr_and_log_dir(run_cli, tmp_path, script):
    p = plan(run_cli, tmp_path, "--master-addr", "10.0.0.5", "--log-dir", str(tmp_path / "logs-here"), str(script))
    assert p["rdzv_endpoint"] == "10.0.0.5:29500" and p["run_dir"] == str(tmp_path / "logs-here")


def test_nproc_per_node_cpu_and_gpu(run_cli, tmp_path, script):
    import os

    p = plan(run_cli, tmp_path, "--nproc-per-node", "cpu", str(script))
    assert p["nproc_per_node"] == min(len(os.sched_getaffinity(0)), os.cpu_count())
    out = run_cli("launch", "--dry-run", "--nproc-per-node", "gpu", "--device", "cpu", str(script), cwd=tmp_path)
    assert out.returncode == 2 and "--nproc-per-node gpu" in out.stderr


@pytest.mark.parametrize("args, message", [
    (["--master-port", "1234", "--rdzv-endpoint", "h:1"], "give one"),
    (["--standalone", "--nnodes", "2"], "--standalone is one node"),
    (["--rdzv-backend", "zookeeper"], "--rdzv-backend must be"),
    (["--tee", "9"], "--tee must be"),
    (["--torchrun-arg=--nnodes=2"], "gpurig sets --nnodes itself"),
    (["--torchrun-arg=--master_port=1"], "gpurig sets --master-port itself"),
    (["--torchrun-arg", "local-addr"], "give one torchrun option as it is typed"),
])
def test_conflicting_or_bad_torchrun_flags_exit_2(run_cli, tmp_path, script, args, message):
    out = run_cli("launch", "--dry-run", "--device", "cpu", *args, str(script), cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_runs_go_under_runs_like_every_other_command(run_cli, tmp_path, script):
    p = plan(run_cli, tmp_path, str(script))
    assert p["run_dir"].startswith("runs/launch-")
    out = run_cli("launch", "--dry-run", "--json", "--device", "cpu", "--out", str(tmp_path / "mine"), str(script), cwd=tmp_path)
    assert json.loads(out.stdout)["plan"]["run_dir"] == str(tmp_path / "mine")


def test_any_other_torchrun_option_goes_through_before_the_script(run_cli, tmp_path, script):
    p = plan(run_cli, tmp_path, "--torchrun-arg=--local-addr=10.0.0.2", "--torchrun-arg=--logs-specs=x",
             str(script), "--local-addr", "script-own")
    argv = p["argv"]
    i = argv.index(str(script))
    assert "--local-addr=10.0.0.2" in argv[:i] and "--logs-specs=x" in argv[:i]
    assert argv[i + 1:] == ["--local-addr", "script-own"]  # after SCRIPT: the script's own arguments
