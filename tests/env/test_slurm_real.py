"""The sbatch script `gpurig env slurm` writes, run by a real Slurm (slurmctld, slurmd, slurmdbd, MUNGE).

The cluster is one CPU node on this machine (tests/slurm_cluster.py); the job trains gpurig's demo
on two gloo processes. What a user relies on: the job runs to its summary and the accounting says
COMPLETED; `scancel` reaches the workers as SIGTERM, the newest checkpoint is whole, and the same
job submitted again (the recipe's `--out ... --resume auto`) continues from it to the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpurig.train.torch import checkpoint as ckpt
from slurm_cluster import slurm_cluster, slurm_unavailable

REASON = slurm_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm"),
              pytest.mark.skipif(REASON is not None, reason=REASON or "")]
ROOT = Path(__file__).resolve().parents[2]
QUIET = ["--set", "eval.enabled=false", "--set", "train.log_every=50"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        try:
            c = stack.enter_context(slurm_cluster(tmp_path_factory.mktemp("slurm")))
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:  # a daemon that cannot start here
            pytest.skip(f"the Slurm daemons could not start on this machine: {str(exc)[:2000]}")
        bin_dir = str(Path(sys.executable).parent)  # gpurig's console script sits beside this Python
        c.env["PATH"] = f"{bin_dir}{os.pathsep}{c.env.get('PATH', '')}"
        c.env["PYTHONPATH"] = str(ROOT / "src")
        yield c


def write_job(folder: Path, *train_args: str) -> Path:
    """The sbatch script, written by the command a user types."""
    script = folder / "demo.sbatch"
    subprocess.run([sys.executable, "-m", "gpurig", "env", "slurm", "--nodes", "1", "--gpus-per-node", "0",
                    "--job-name", "demo", "--time", "00:10:00", "--out", str(script), "--force",
                    "--", "gpurig", "train", *train_args],
                   check=True, capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    return script


def job_log(folder: Path, job: str) -> str:
    path = folder / f"demo-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def test_the_generated_job_trains_to_its_summary_and_slurm_accounts_it_completed(cluster, tmp_path):
    script = write_job(tmp_path, "--set", "train.steps=60", *QUIET)
    job = cluster.sbatch(script, cwd=tmp_path)
    state = cluster.wait(job, timeout=400)
    log = job_log(tmp_path, job)
    assert state == "COMPLETED", log[-3000:] + cluster.logs()
    summary = json.loads((tmp_path / "runs" / "demo" / "summary.json").read_text())
    assert summary["steps"] == 60 and not summary.get("stopped")
    assert summary["world_size"] == 2 and summary["device"] == "cpu"
    assert "done: 60 steps" in log and "throughput:" in log  # rank 0's summary, in the job's log
    # The accounting database, as a user asks it: the job and its step both completed with exit 0.
    lines = cluster.cmd("sacct", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode").stdout.split()
    assert f"{job}|COMPLETED|0:0" in lines and f"{job}.0|COMPLETED|0:0" in lines, lines


def test_scancel_stops_the_workers_with_a_checkpoint_and_the_resubmitted_job_finishes_it(cluster, tmp_path):
    script = write_job(tmp_path, "--set", "train.steps=1000000", "--set", "checkpoint.every_steps=100", *QUIET)
    job = cluster.sbatch(script, cwd=tmp_path)
    end = time.monotonic() + 300
    while "step 200/" not in job_log(tmp_path, job):
        assert time.monotonic() < end and cluster.sacct_state(job) in (None, "PENDING", "RUNNING"), \
            job_log(tmp_path, job)[-3000:] + cluster.logs()
        time.sleep(0.5)
    cluster.cmd("scancel", job)
    assert cluster.wait(job, timeout=120) == "CANCELLED"
    run = tmp_path / "runs" / "demo"
    end = time.monotonic() + 60  # the step may still be writing after the accounting says CANCELLED
    while "continue with:" not in job_log(tmp_path, job) and time.monotonic() < end:
        time.sleep(0.5)
    log = job_log(tmp_path, job)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] and "SIGTERM" in summary["stop_reason"], log[-3000:]
    newest = ckpt.list_checkpoints(run)[-1]
    stopped_at = ckpt.step_of(newest)
    assert stopped_at == summary["steps"] >= 200  # rank 0 checkpointed where it stopped, not only every 100
    assert ckpt.load_checkpoint_file(newest)["step"] == stopped_at  # whole and loadable (weights only)
    assert f"stopped by SIGTERM at step {stopped_at}" in log and "--resume auto" in log, log[-3000:]

    # Submitted again, with the end moved to 60 steps on (a resumed run keeps its config plus any --set).
    target = stopped_at + 60
    script = write_job(tmp_path, "--set", f"train.steps={target}", "--set", "checkpoint.every_steps=100", *QUIET)
    again = cluster.sbatch(script, cwd=tmp_path)
    assert cluster.wait(again, timeout=400) == "COMPLETED", job_log(tmp_path, again)[-3000:]
    log = job_log(tmp_path, again)
    assert f"at step {stopped_at}" in log, log[-3000:]  # resumed from the checkpoint scancel left
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == target and not summary.get("stopped")


ALL_REDUCE = '''import socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())
if rank == 0:
    print(f"world {world}: sum of ranks {int(total.item())}; hosts {sorted(set(hosts))}", flush=True)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.parametrize("launcher", [[], ["gpurig", "launch"]], ids=["torchrun", "gpurig-launch"])
def test_a_two_node_job_runs_one_agent_per_machine_meeting_on_the_first(tmp_path, launcher):
    """Two nodes, n1 and n2, each a network namespace with its own host name and slurmd, joined by
    a veth pair: the generated script's srun starts one agent on each, they meet at the first node
    of the allocation, and the all-reduce spans both machines."""
    from netns import netns_unavailable, two_hosts

    if netns_unavailable():
        pytest.skip(netns_unavailable())
    (tmp_path / "allreduce.py").write_text(ALL_REDUCE)
    script = tmp_path / "two.sbatch"
    subprocess.run([sys.executable, "-m", "gpurig", "env", "slurm", "--nodes", "2", "--gpus-per-node", "0",
                    "--procs-per-node", "1", "--job-name", "two", "--time", "00:05:00", "--out", str(script),
                    "--", *launcher, "allreduce.py"],
                   check=True, capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    with two_hosts() as hosts, contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(slurm_cluster(tmp_path / "cluster", hosts=hosts))
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            pytest.skip(f"the Slurm daemons could not start on two network namespaces here: {str(exc)[:2000]}")
        cluster.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{cluster.env.get('PATH', '')}"
        cluster.env["PYTHONPATH"] = str(ROOT / "src")
        job = cluster.sbatch(script, cwd=tmp_path)
        state = cluster.wait(job, timeout=300)
        log = (tmp_path / f"two-{job}.out").read_text(errors="replace")
        assert state == "COMPLETED", log[-3000:] + cluster.logs()
        assert "world 2: sum of ranks 1; hosts ['n1', 'n2']" in log, log[-3000:]
        lines = cluster.cmd("sacct", "-n", "-P", "-j", job, "-o", "JobID,NodeList,State").stdout.split()
        assert f"{job}|n[1-2]|COMPLETED" in lines and f"{job}.0|n[1-2]|COMPLETED" in lines, lines
