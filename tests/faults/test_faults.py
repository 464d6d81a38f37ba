"""Faults a training run survives, each injected on the CPU with two gloo ranks.

A worker that kills itself, a SIGTERM to the launcher, a rank that stops taking part in the
collectives, a full or read-only checkpoint directory, a truncated checkpoint, a checkpoint from
another run. Each test checks the promise: the final state, the message, the exit code, and that
no process is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from tests.conftest import ROOT, assert_no_process_left

from gpurig.errors import BadInput, ProblemFound
from gpurig.train.config import load_config
from gpurig.train.run import run_training
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch import faults

pytestmark = pytest.mark.slow

# The demo's data with a smaller MLP: 40 steps of 2 x 16 samples, a checkpoint every 10 steps.
BASE = ["eval.enabled=false", "train.steps=40", "checkpoint.every_steps=10", "checkpoint.keep=5",
        "data.batch_size=16", "model.hidden=64"]


# Bit-for-bit equality holds between runs whose processes compute the same way. On the CPU that
# includes the number of threads each process's kernels split a reduction over: two "nodes" of one
# process each on this machine would otherwise get all its cores per process (OMP_NUM_THREADS =
# cores / processes per node) where the single-node run's two processes get half each, and the
# weights differ by float32 rounding (about 3e-8 after 40 steps). The runs compared bit for bit
# pin one thread per process; test_gpurig_train_on_two_nodes_matches_the_single_node_run shows
# what holds with the defaults.
SAME_THREADS = {"OMP_NUM_THREADS": "1"}


def _cfg(*extra: str):
    return load_config(preset_name="demo", overrides=BASE + list(extra))


def _params(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def _assert_bitwise(a: Path, b: Path) -> None:
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.equal(pa[k], pb[k]), f"{k} differs"


def _steps(run_dir: Path) -> list[int]:
    return [int(p.name[5:14]) for p in ckpt.list_checkpoints(run_dir)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run every recovered run must equal, bit for bit."""
    out = tmp_path_factory.mktemp("reference")
    summary = run_training(_cfg(), device="cpu", nproc=2, out_dir=out, timeout=240, env=SAME_THREADS)
    assert summary["steps"] == 40 and _steps(out) == [10, 20, 30, 40]
    return out


# --- a killed rank: torchrun restarts the group, every rank resumes ---------------------------


def test_killed_rank_restarts_and_ends_bitwise_equal_to_an_uninterrupted_run(reference, tmp_path):
    out = tmp_path / "run"
    summary = run_training(_cfg(), device="cpu", nproc=2, out_dir=out, timeout=240, max_restarts=1,
                           env={"GPURIG_TRAIN_FAULT": "kill:step=25:rank=1", **SAME_THREADS})
    log = (out / "launcher.log").read_text()
    assert "rank 1 kills itself after step 25" in log and "exitcode: -9" in log  # it really died
    # The first attempt's rank 0 said who was gone before torchrun restarted the group.
    assert "rank(s) 1 never arrived (rank 1: its process is gone" in log, log[-3000:]
    assert summary["faults"]["restart_count"] == 1
    assert summary["resumed_from"].endswith("step-000000020.pt") and summary["steps"] == 40
    _assert_bitwise(reference / "checkpoints" / "step-000000040.pt", out / "checkpoints" / "step-000000040.pt")
    assert_no_process_left(str(out))


# --- preemption: SIGTERM to the launcher -------------------------------------------------------


def _start_cli(out: Path, *sets: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    full = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200", **(env or {}))
    args = [sys.executable, "-m", "gpurig", "train", "--preset", "demo", "--device", "cpu", "--out", str(out)]
    for s in BASE + list(sets):
        args += ["--set", s]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full)


def _wait_for(proc: subprocess.Popen, needle: str, limit: float = 180) -> list[str]:
    lines, deadline = [], time.monotonic() + limit
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if needle in line or time.monotonic() > deadline:
            break
    return lines


def test_sigterm_with_a_stuck_rank_still_exits_in_bounded_time_and_keeps_the_last_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = _start_cli(out, "train.steps=1000000", "train.log_every=10",
                      env={"GPURIG_STOP_GRACE": "4", "GPURIG_TRAIN_FAULT": "hang:step=31:rank=1"})
    try:
        lines = _wait_for(proc, "step-000000030.pt")  # the checkpoint at 30; rank 1 is stuck after step 31
        time.sleep(1)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + rest
    assert proc.returncode == 143, text[-3000:]
    assert took < 4 + 10 + 8, took
    assert _steps(out) == [10, 20, 30]
    ckpt.load_checkpoint_file(ckpt.checkpoint_path(out, 30))  # complete and loadable
    assert_no_process_left(str(out))


# --- a hang: a rank that never enters the collective ---------------------------------------------


def test_a_rank_that_stops_taking_part_ends_by_the_timeout_naming_the_op_and_the_rank(tmp_path):
    out = tmp_path / "run"
    t0 = time.monotonic()
    with pytest.raises(ProblemFound) as err:
        run_training(_cfg("train.steps=100000"), device="cpu", nproc=2, out_dir=out, timeout=240,
                     env={"GPURIG_TRAIN_FAULT": "hang:step=15:rank=1", "GPURIG_COLLECTIVE_TIMEOUT": "6",
                          "GPURIG_STOP_GRACE": "3"})
    took = time.monotonic() - t0
    text = str(err.value)
    assert "collective timeout: rank 0 waited in the gradient all-reduce" in text, text
    assert "after step 15" in text and "rank(s) 1 never arrived" in text, text
    assert "rank 1: finished step 15" in text and "never entered the next one" in text, text
    assert took < 120, took
    assert _steps(out) == [10]
    assert_no_process_left(str(out))


def test_train_timeout_is_the_collective_hang_limit_and_max_time_the_wall_clock(run_cli, tmp_path):
    # --timeout means one thing in every command: how long one collective may wait before it is a hang.
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = run_cli("train", "--device", "cpu", "--preset", "demo", "--set", "train.steps=100000", "--out", str(out),
                   "--timeout", "6", "--max-time", "240",
                   env={"GPURIG_TRAIN_FAULT": "hang:step=15:rank=1", "GPURIG_STOP_GRACE": "3"}, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "collective timeout" in proc.stdout + proc.stderr and "rank(s) 1 never arrived" in proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 150
    assert_no_process_left(str(out))


class _Exited(Exception):
    pass


@pytest.mark.parametrize("backend, code, leaves_at_once", [
    ("nccl", 1, True),  # a failed NCCL collective: destroying the group would wait for its kernel forever
    ("nccl", 0, False),  # a run that ended well destroys its group as usual
    ("gloo", 1, False),  # gloo's collectives time out on the host: destroying the group is safe
])
def test_a_worker_that_failed_on_nccl_leaves_without_destroying_its_group(monkeypatch, backend, code,
                                                                          leaves_at_once):
    from gpurig.train.torch import trainer, worker

    destroyed, closed = [], []

    def exit_now(c):
        raise _Exited(c)

    monkeypatch.setattr(trainer.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(trainer.dist, "get_backend", lambda *a: backend)
    monkeypatch.setattr(trainer.dist, "destroy_process_group", lambda *a: destroyed.append(True))
    monkeypatch.setattr(trainer.os, "_exit", exit_now)

    class Trainer:
        class tb:
            close = staticmethod(lambda: closed.append(True))

    if leaves_at_once:
        with pytest.raises(_Exited) as exited:
            worker.leave_process_group(code, Trainer())
        assert exited.value.args == (code,) and not destroyed and closed  # TensorBoard's scalars kept
    else:
        worker.leave_process_group(code, Trainer())
        assert destroyed


# --- the checkpoint cannot be written -----------------------------------------------------------


def _mount_tmpfs(where: Path, size: str, read_only: bool = False) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    opts = f"size={size}" + (",ro" if read_only else "")
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", str(where)], capture_output=True)


def _no_temp_files(run_dir: Path) -> None:
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if not p.name.endswith(".pt")]


def test_full_disk_with_on_error_warn_keeps_training_and_the_previous_checkpoints(reference, tmp_path):
    out = tmp_path / "run"
    # Room for two checkpoints and not a third (a real full file system where we can mount one;
    # otherwise every write from step 30 on fails with ENOSPC half-way, from inside the worker).
    pages = -(-ckpt.checkpoint_path(reference, 10).stat().st_size // 4096)
    mounted = _mount_tmpfs(out / "checkpoints", f"{(2 * pages + pages // 2) * 4}k")
    env = dict(SAME_THREADS) if mounted else {"GPURIG_TRAIN_FAULT": "enospc:step=30", **SAME_THREADS}
    try:
        summary = run_training(_cfg("checkpoint.on_error=warn"), device="cpu", nproc=2, out_dir=out, timeout=240,
                               env=env)
        assert summary["steps"] == 40
        assert [f["step"] for f in summary["faults"]["checkpoint_write_failures"]] == [30, 40]
        assert all(f["why"] == "the disk is full" for f in summary["faults"]["checkpoint_write_failures"])
        assert _steps(out) == [10, 20]
        _no_temp_files(out)
        _assert_bitwise(reference / "checkpoints" / "step-000000020.pt", out / "checkpoints" / "step-000000020.pt")
        log = (out / "launcher.log").read_text()
        assert "checkpoint for step 30 could not be written" in log and "step-000000020.pt is intact" in log
    finally:
        if mounted:
            _umount(out / "checkpoints")


def test_full_disk_with_on_error_stop_ends_the_run_with_the_reason(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ProblemFound) as err:
        run_training(_cfg(), device="cpu", nproc=2, out_dir=out, timeout=240,
                     env={"GPURIG_TRAIN_FAULT": "enospc:step=20"})
    text = str(err.value)
    assert "checkpoint for step 20 could not be written" in text and "the disk is full" in text, text
    assert "step-000000010.pt is intact" in text and "checkpoint.on_error = stop" in text, text
    assert _steps(out) == [10]
    ckpt.load_checkpoint_file(ckpt.checkpoint_path(out, 10))
    _no_temp_files(out)
    assert_no_process_left(str(out))


# --- bad state on resume ----------------------------------------------------------------------


def _copy_checkpoints(src: Path, dst: Path, *steps: int) -> None:
    (dst / "checkpoints").mkdir(parents=True)
    for s in steps:
        shutil.copy(ckpt.checkpoint_path(src, s), dst / "checkpoints")


def test_truncated_checkpoint_is_named_and_fallback_resumes_exactly(reference, tmp_path):
    out = tmp_path / "run"
    _copy_checkpoints(reference, out, 10, 20)
    newest = ckpt.checkpoint_path(out, 20)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # torn, as a copy cut short leaves it
    with pytest.raises(BadInput, match="--resume-fallback"):  # named, and the way out said (no training run)
        ckpt.load_latest(out)
    summary = run_training(_cfg(), device="cpu", nproc=2, out_dir=out, resume="auto", resume_fallback=True,
                           timeout=240, env=SAME_THREADS)
    assert summary["resumed_from"].endswith("step-000000010.pt")
    log = (out / "launcher.log").read_text()
    assert f"checkpoint {newest} is corrupt" in log and "falling back to the previous checkpoint" in log
    _assert_bitwise(reference / "checkpoints" / "step-000000040.pt", out / "checkpoints" / "step-000000040.pt")


def test_checkpoint_of_another_model_is_refused_saying_what_differs(reference, tmp_path):
    out = tmp_path / "run"
    _copy_checkpoints(reference, out, 20)
    with pytest.raises(BadInput) as err:
        run_training(_cfg("model.hidden=32"), device="cpu", nproc=2, out_dir=out, resume="auto", timeout=240)
    assert "model.hidden: checkpoint 64, this run 32" in str(err.value), str(err.value)
    assert _steps(out) == [20]  # nothing written, nothing lost


# --- pure logic -------------------------------------------------------------------------------


def test_resume_mismatches_allow_another_world_size_with_the_same_global_batch():
    cfg = _cfg().to_dict()
    other = json.loads(json.dumps(cfg))
    other["data"]["batch_size"] = 32
    assert ckpt.resume_mismatches(cfg, 2, other, 1) == []
    other["model"]["depth"] = cfg["model"]["depth"] + 1
    assert ckpt.resume_mismatches(cfg, 2, other, 1) == [
        f"model.depth: checkpoint {cfg['model']['depth']}, this run {cfg['model']['depth'] + 1}"]
    other["data"]["batch_size"] = 16
    [world] = ckpt.resume_mismatches(cfg, 2, other, 1)[1:]
    assert world.startswith("world size: checkpoint written by 2 processes (global batch 32), this run has 1 "
                            "(global batch 16); resume with --nproc 2")


@pytest.mark.parametrize("text, message", [
    ("explode:step=3", "unknown fault 'explode'"),
    ("kill:rank=1", "needs step=N"),
    ("kill:step=x", "expected step=N"),
])
def test_fault_injection_spec_is_checked(text, message):
    with pytest.raises(BadInput, match=message):
        faults.parse_faults(text)


def test_parse_faults():
    assert faults.parse_faults("kill:step=5:rank=1,hang:step=9:attempt=1") == [
        faults.Fault("kill", 5, 1, 0), faults.Fault("hang", 9, 0, 1)]


# --- two nodes on one machine: two torchrun agents, one c10d rendezvous --------------------------


def _start_node(plan, env: dict[str, str] | None = None) -> subprocess.Popen:
    Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
    log = open(Path(plan.run_dir) / "agent.log", "a")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(plan.argv, env={**plan.full_env(), **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL an agent and every worker it started (workers live in sessions of their own)."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    for p in [psutil.Process(proc.pid), *family] if proc.poll() is None else family:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait(timeout=30)


def test_two_nodes_train_together_survive_a_killed_rank_and_match_a_single_node_run(reference, tmp_path):
    """Two torchrun agents meet at one c10d rendezvous (`--nnodes 2`); node 1's worker is killed
    (as by the OOM killer) after step 25; both agents restart their workers, which resume from
    the newest checkpoint in the shared run directory, and the run ends bit for bit where the
    single-node run did."""
    from gpurig.launch.plan import free_port
    from gpurig.train.nodes import plan_node

    shared = tmp_path / "shared"
    endpoint = f"127.0.0.1:{free_port()}"
    plans = [plan_node(_cfg(), shared, nnodes=2, node_rank=r, endpoint=endpoint, nproc_per_node=1, device="cpu",
                       max_restarts=3, log_dir=tmp_path / f"node{r}", env=SAME_THREADS)[0] for r in (0, 1)]
    assert "--nnodes=2" in plans[0].argv and f"--rdzv-endpoint={endpoint}" in plans[1].argv
    assert plans[0].full_env()["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"  # a fresh store per round
    killed = {"GPURIG_TRAIN_FAULT": "kill:step=25:rank=0,kill:step=25:rank=1"}  # whichever rank node 1 gets
    agents = [_start_node(plans[0])]
    try:
        time.sleep(1)  # node 0 hosts the rendezvous store
        agents.append(_start_node(plans[1], env=killed))
        for a in agents:
            a.wait(timeout=240)
        logs = [(tmp_path / f"node{r}" / "agent.log").read_text() for r in (0, 1)]
        assert agents[0].returncode == 0 and agents[1].returncode == 0, logs[0][-3000:] + logs[1][-3000:]
    finally:
        for a in agents:
            if a.poll() is None:
                _kill_tree(a)
    assert "kills itself after step 25" in logs[1]
    summary = json.loads((shared / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 40 and summary["faults"]["restart_count"] >= 1
    assert summary["resumed_from"].endswith("step-000000020.pt")
    _assert_bitwise(reference / "checkpoints" / "step-000000040.pt", shared / "checkpoints" / "step-000000040.pt")
    assert_no_process_left(str(shared))


def _wait_for_log(path: Path, text: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"agent ended early: {path.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}")


STUCK = {"GPURIG_TRAIN_FAULT": "hang:step=25:rank=0,hang:step=25:rank=1"}  # whichever rank node 1 gets


def _lose_node_1(plans, tmp_path: Path, start_again: bool) -> tuple[list[subprocess.Popen], list[str]]:
    """Node 0 runs; node 1 gets stuck after step 25 and is SIGKILLed with its worker (a machine
    going down), then started again with the same command or never. Returns the agents
    [node 0, node 1's first, (node 1 again)] once the survivors have ended, and the two logs."""
    agents = [_start_node(plans[0])]
    try:
        time.sleep(1)  # node 0 hosts the rendezvous store
        agents.append(_start_node(plans[1], env=STUCK))
        _wait_for_log(tmp_path / "node1" / "agent.log", "stops taking part after step 25", agents[1])
        _kill_tree(agents[1])
        if start_again:  # the same command, as an operator or a scheduler would rerun it
            agents.append(_start_node(plans[1]))
        for a in (agents[0], *agents[2:]):
            a.wait(timeout=240)
        return agents, [(tmp_path / f"node{r}" / "agent.log").read_text() for r in (0, 1)]
    finally:
        for a in agents:
            if a.poll() is None:
                _kill_tree(a)


def test_a_killed_node_started_again_rejoins_and_the_run_ends_as_a_single_node_run(reference, tmp_path):
    """Node 1's whole agent dies (SIGKILL to the agent and its worker, as when a machine goes down)
    after step 25, while node 0 waits in a collective. Node 0's worker fails, its agent goes back
    to the rendezvous; node 1 is started again by hand with the same command, joins, and both
    resume from the newest checkpoint: the run ends bit for bit where the single-node run did."""
    from gpurig.launch.plan import free_port
    from gpurig.train.nodes import plan_node

    shared = tmp_path / "shared"
    endpoint = f"127.0.0.1:{free_port()}"
    plans = [plan_node(_cfg(), shared, nnodes=2, node_rank=r, endpoint=endpoint, nproc_per_node=1, device="cpu",
                       max_restarts=3, log_dir=tmp_path / f"node{r}", env=SAME_THREADS)[0] for r in (0, 1)]
    (node0, first, again), logs = _lose_node_1(plans, tmp_path, start_again=True)
    assert first.returncode == -signal.SIGKILL
    assert node0.returncode == 0 and again.returncode == 0, logs[0][-3000:] + logs[1][-3000:]
    summary = json.loads((shared / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 40
    assert summary["resumed_from"].endswith("step-000000020.pt")
    _assert_bitwise(reference / "checkpoints" / "step-000000040.pt", shared / "checkpoints" / "step-000000040.pt")
    assert_no_process_left(str(shared))


def _two_node_cli(outs_dirs: list[Path], port: int) -> tuple[list[subprocess.Popen], list[str]]:
    """`gpurig train --nnodes 2 --node-rank R --master-addr ...` typed on two "machines"."""
    procs = []
    for rank, out in enumerate(outs_dirs):
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
        args = [sys.executable, "-m", "gpurig", "train", "--preset", "demo", "--device", "cpu", "--nproc", "1",
                "--out", str(out), "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                "--master-port", str(port), "--max-restarts", "1"]
        for s in BASE:
            args += ["--set", s]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        time.sleep(1)
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return procs, outs


def test_gpurig_train_on_two_nodes_matches_the_single_node_run(reference, tmp_path):
    """`gpurig train --nnodes 2` typed twice, with the defaults: each one-process node gives its
    process every core of this machine, the single-node run half. Same data, same order, same
    reduction across ranks; only the CPU kernels' thread split differs, so the weights agree to
    float32 rounding, not bit for bit (SAME_THREADS gives bit for bit, as the other tests show)."""
    from gpurig.launch.plan import free_port

    shared, port = tmp_path / "shared", free_port()
    procs, outs = _two_node_cli([shared, shared], port)
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    assert all("summary.json" in out for out in outs)  # a shared directory: both nodes see the summary
    assert f"node 0 of 2: waiting at 127.0.0.1:{port}" in outs[0]
    summary = json.loads((shared / "summary.json").read_text())
    assert "world_size" in summary, (summary, outs[0][-2000:])
    assert summary["world_size"] == 2 and summary["steps"] == 40
    a = _params(reference / "checkpoints" / "step-000000040.pt")
    b = _params(shared / "checkpoints" / "step-000000040.pt")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)
    assert_no_process_left(str(shared))


def test_two_nodes_need_the_address_of_node_0(tmp_path):
    with pytest.raises(BadInput, match="--master-addr"):
        run_training(_cfg(), device="cpu", nproc=1, out_dir=tmp_path, nnodes=2, node_rank=1)


def test_a_fresh_store_per_round_is_the_users_to_turn_off(monkeypatch, tmp_path):
    from gpurig.train.nodes import plan_node

    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0")
    plan = plan_node(_cfg(), tmp_path, nnodes=2, node_rank=0, endpoint="127.0.0.1:29400", nproc_per_node=1,
                     device="cpu")[0]
    assert plan.full_env()["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


def test_without_a_shared_directory_the_node_without_rank_0_says_where_the_summary_is(tmp_path):
    """The rendezvous numbers nodes as they join, so either node may hold global rank 0."""
    from gpurig.launch.plan import free_port

    dirs = [tmp_path / "a", tmp_path / "b"]
    procs, outs = _two_node_cli(dirs, free_port())
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    has = [(d / "summary.json").is_file() for d in dirs]
    assert sorted(has) == [False, True]
    other = has.index(False)
    assert f"node {other} of 2 finished; the node that holds global rank 0 writes summary.json" in outs[other]
    assert "summary: " in outs[has.index(True)] and "throughput" in outs[has.index(True)]


# --- an elastic run: a node that leaves for good -----------------------------------------------


def test_an_elastic_run_goes_on_without_a_node_killed_for_good_as_a_run_resumed_by_hand(reference, tmp_path):
    """`--nnodes 1:2`: node 1 (agent and worker) is SIGKILLed after step 25 and never comes back.
    Node 0's agent restarts its worker with the one node left; it resumes from the newest
    checkpoint (step 20) with the global batch kept (2 micro-batches of 16 a step instead of one per
    node) and finishes. The result is bit for bit the run resumed the same way by hand: that
    checkpoint and `gpurig train --resume auto` on one process."""
    from gpurig.launch.plan import free_port
    from gpurig.train.nodes import plan_node
    from gpurig.train.plan import plan_training

    cfg = plan_training(_cfg(), device="cpu", nproc=1, nnodes=2, rdzv_endpoint="127.0.0.1:1", min_nodes=1,
                        out_dir=tmp_path / "unused").config
    assert cfg.data.global_batch_size == 32 and cfg.train.grad_accum == 1  # 16 x 1 process x 2 nodes
    shared = tmp_path / "shared"
    endpoint = f"127.0.0.1:{free_port()}"
    plans = [plan_node(cfg, shared, nnodes=2, node_rank=r, endpoint=endpoint, nproc_per_node=1, device="cpu",
                       max_restarts=3, log_dir=tmp_path / f"node{r}", env=SAME_THREADS, min_nodes=1)[0]
             for r in (0, 1)]
    assert "--nnodes=1:2" in plans[0].argv
    (node0, _), (log, _) = _lose_node_1(plans, tmp_path, start_again=False)  # node 1 gone for good
    assert node0.returncode == 0, log[-3000:]
    summary = json.loads((shared / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["steps"] == 40 and summary["faults"]["restart_count"] >= 1
    assert summary["global_batch_size"] == 32 and summary["grad_accum"] == 2  # the global batch kept
    assert summary["resumed_from"].endswith("step-000000020.pt")
    assert "checkpoint was written by 2 processes, resuming on 1" in log  # the change, said

    by_hand = tmp_path / "by_hand"
    (by_hand / "checkpoints").mkdir(parents=True)
    shutil.copy(shared / "checkpoints" / "step-000000020.pt", by_hand / "checkpoints")
    again = run_training(_cfg("data.global_batch_size=32"), device="cpu", nproc=1, out_dir=by_hand, resume="auto",
                         timeout=240, env=SAME_THREADS)
    assert again["steps"] == 40 and again["world_size"] == 1 and again["resumed_from"].endswith("step-000000020.pt")
    _assert_bitwise(by_hand / "checkpoints" / "step-000000040.pt", shared / "checkpoints" / "step-000000040.pt")
    assert_no_process_left(str(shared))


def test_an_elastic_range_whose_node_counts_cannot_keep_the_global_batch_is_refused():
    from gpurig.train.plan import plan_training

    with pytest.raises(BadInput, match=r"--nnodes 2:3: the global batch 48 cannot be kept on 2 node\(s\)"):
        plan_training(_cfg(), device="cpu", nproc=1, nnodes=3, rdzv_endpoint="h:1", min_nodes=2, out_dir="unused")
