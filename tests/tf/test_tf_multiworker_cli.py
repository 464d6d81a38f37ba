"""`gpurig train --framework tf --nnodes 2`: two workers on localhost, a TF_CONFIG written by gpurig."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpurig.launch.plan import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.tf
@pytest.mark.slow
def test_two_workers_through_the_cli_train_together(tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = []
    for rank in (0, 1):
        argv = [sys.executable, "-m", "gpurig", "train", "--framework", "tf", "--device", "cpu", "--preset", "demo",
                "--set", "train.epochs=2", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                "--master-port", str(port), "--out", str(tmp_path / f"w{rank}"), "--json"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.communicate()
            raise
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out))
    assert outs[0]["final_loss"] == pytest.approx(outs[1]["final_loss"], rel=1e-5)  # one model, two workers
    cluster = next(c for c in outs[0]["choices"] if c["name"] == "cluster")
    assert "2" in json.dumps(cluster["value"])


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "2", "--node-rank", "1"], "--master-addr: needed with --nnodes > 1"),
    (["--framework", "tf", "--nnodes", "2", "--node-rank", "2"], "--node-rank: 2 is outside 0..1"),
    (["--nnodes", "0"], "--nnodes: must be at least 1"),
])
def test_bad_node_flags_exit_2(run_cli, tmp_path, args, message):
    r = run_cli("train", "--preset", "demo", "--out", str(tmp_path / "r"), *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "r").exists()  # refused before anything was written
