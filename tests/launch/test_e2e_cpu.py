"""`gpurig launch` end to end on the CPU with gloo: two real torchrun workers per test.

Each script writes its pid (and its DataLoader workers' pids) into PID_DIR; every test checks that
none of them is alive afterwards, whatever torchrun or the conftest guard can see.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import alive

SCRIPTS = Path(__file__).parent / "scripts"
ROOT = Path(__file__).resolve().parents[2]


def _assert_no_process_left(pid_dir: Path, expected: int) -> None:
    pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    assert len(pids) >= expected, f"only {len(pids)} pid files: {sorted(p.name for p in pid_dir.glob('*'))}"
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)], "processes left behind"


@pytest.fixture
def launch(run_cli, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()

    def _launch(script: str, *flags: str, env: dict | None = None):
        out = run_cli(
            "launch", "--no-preflight", "--device", "cpu", "--json", *flags, str(SCRIPTS / script),
            env={"PID_DIR": str(pid_dir), **(env or {})}, cwd=tmp_path, timeout=240,
        )
        try:
            doc = json.loads(out.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"stdout is not one JSON document: {out.stdout[-2000:]}\nstderr: {out.stderr[-3000:]}")
        return out, doc

    _launch.pid_dir = pid_dir
    return _launch


def test_success(launch):
    out, doc = launch("ddp_ok.py")
    assert out.returncode == 0, out.stderr[-3000:]
    assert doc["result"]["status"] == "ok"
    assert "done: 2 ranks" in out.stderr  # the workers' output, on stderr with --json


def test_rank1_raises_explained_first_then_its_log(launch, run_cli, tmp_path):
    out, doc = launch("raise_on_rank1.py")
    result = doc["result"]
    assert out.returncode == 1
    assert result["status"] == "failed" and result["root_rank"] == 1
    assert result["matches"][0]["id"] == "uncaught-exception"
    assert "injected failure on rank 1" in result["matches"][0]["evidence"]
    assert result["where"].startswith("raise_on_rank1.py:")
    assert any("ValueError: injected failure on rank 1" in line for line in result["log_tail"])
    # Rank 0 only died because rank 1 did.
    assert result["ranks"] == {"0": "secondary", "1": "primary"}
    # The human report: the explanation first, then the root rank's log tail.
    report = out.stderr[out.stderr.index("--- result ---"):]
    assert report.index("The script raised ValueError in rank 1") < report.index("--- rank 1 log")
    _assert_no_process_left(launch.pid_dir, 2)
    # `gpurig explain` with no argument reads the same run again.
    again = run_cli("explain", "--json", cwd=tmp_path)
    assert again.returncode == 1
    assert json.loads(again.stdout)["run"]["root_rank"] == 1


def test_sigkill_is_exit_137_and_host_oom(launch):
    out, doc = launch("sigkill_rank1.py")
    result = doc["result"]
    assert out.returncode == 137  # 128 + SIGKILL, as a shell reports it
    assert result["root_rank"] == 1 and result["worker_exitcode"] == -9 and result["signal"] == "SIGKILL"
    assert result["matches"][0]["id"] == "host-out-of-memory-killed"
    _assert_no_process_left(launch.pid_dir, 2)


def test_skipped_allreduce_hang_ends_by_timeout_naming_the_rank(launch):
    out, doc = launch("skip_allreduce.py", "--timeout", "6")
    result = doc["result"]
    assert result["status"] == "hang", out.stderr[-3000:]
    assert result["collective"] == "all_reduce"
    assert result["arrived_ranks"] == [0] and result["missing_ranks"] == [1]
    assert result["root_rank"] == 1 and result["hang_source"] == "logs"
    assert result["matches"][0]["id"] == "gloo-collective-timeout"
    assert "skip_allreduce.py" in result["where"]
    assert out.returncode == 1  # rank 0's exit code: it raised the timeout
    # Rank 1 was asleep for 300 s: it must have been stopped, not left running.
    _assert_no_process_left(launch.pid_dir, 2)


def test_hard_coded_port_already_taken(launch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out, doc = launch("fixed_port.py", env={"BUSY_PORT": str(port)})
    result = doc["result"]
    assert out.returncode == 1
    assert result["root_rank"] == 0
    assert result["matches"][0]["id"] == "rendezvous-port-in-use"
    assert "EADDRINUSE" in result["matches"][0]["evidence"]
    assert result["where"].startswith("fixed_port.py:")
    _assert_no_process_left(launch.pid_dir, 2)


def test_taken_rendezvous_endpoint_stops_before_starting(launch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out, doc = launch("ddp_ok.py", "--rdzv-endpoint", f"127.0.0.1:{port}")
    assert out.returncode == 1
    assert doc["result"]["status"] == "not-started"
    assert doc["result"]["matches"][0]["id"] == "rendezvous-port-in-use"
    assert not list(launch.pid_dir.glob("*.pid"))  # no worker was started


def test_ctrl_c_ends_workers_and_dataloader_children(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = dict(os.environ, PID_DIR=str(pid_dir), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurig", "launch", "--no-preflight", "--device", "cpu", "--json",
         str(SCRIPTS / "dataloader_sleep.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        deadline = time.monotonic() + 150
        while len(list(pid_dir.glob("*.pid"))) < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(list(pid_dir.glob("*.pid"))) == 6, "2 ranks and 4 DataLoader workers did not start"
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert json.loads(stdout)["result"]["status"] == "interrupted"
    _assert_no_process_left(pid_dir, 6)


@pytest.mark.parametrize("sig, code, words", [
    (signal.SIGINT, 130, "stopped by Ctrl-C (SIGINT)"),
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
])
def test_stopped_run_says_so_in_one_line(tmp_path, sig, code, words):
    """Ctrl-C at a terminal (SIGINT to the foreground process group) or a scheduler's SIGTERM: the
    exit code says which, the result is one line (no advice, no explanation), no worker is left."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = dict(os.environ, PID_DIR=str(pid_dir), PYTHONPATH=str(ROOT / "src"), COLUMNS="300")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurig", "launch", "--no-preflight", "--device", "cpu", "--run-dir", "run",
         str(SCRIPTS / "sleep_loop.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        while len(list(pid_dir.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert len(list(pid_dir.glob("*.pid"))) == 2, "the 2 workers did not start"
        os.killpg(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stdout[-2000:] + stderr[-2000:]
    result = stdout[stdout.index("--- workers ---"):].splitlines()[1:]
    assert result == [
        f"INTERRUPTED: {words}{' (from a scheduler or kill)' if sig == signal.SIGTERM else ''}; every worker was "
        "stopped; logs in run; run the same command again with --force to start over in it"
    ], stdout[-3000:]
    assert "NCCL_DEBUG" not in stdout and "next:" not in stdout
    # torchrun's own SignalException traceback and failure table are kept out of the output by
    # launch/runner.py (they go to run/launcher.log only).
    assert "Traceback" not in stdout + stderr, stdout[-3000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["result"]["exit_code"] == code
    _assert_no_process_left(pid_dir, 2)
    # asked later, `gpurig explain` says the same: stopped on purpose, not a failure
    later = subprocess.run([sys.executable, "-m", "gpurig", "explain", "run", "--json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert later.returncode == 0, later.stdout + later.stderr
    run = json.loads(later.stdout)["run"]
    assert run["status"] == "interrupted" and words in run["summary"] and not run["matches"]


def test_force_replaces_an_earlier_launch_in_the_run_dir(launch, tmp_path):
    """An earlier failed launch in --run-dir: with --force its files go and a good run reads as good
    (its launcher log's failure table is not read as this run's); the user's own files stay."""
    run = tmp_path / "run"
    old_attempt = run / "logs" / "none_old" / "attempt_0" / "1"
    old_attempt.mkdir(parents=True)
    (old_attempt / "stderr.log").write_text("ValueError: injected failure on rank 1\n")
    failed_log = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "torchrun_rank1_raises_gloo.log"
    (run / "launcher.log").write_text(failed_log.read_text())
    (run / "result.json").write_text('{"result": {"status": "failed"}}\n')
    (run / "notes.txt").write_text("mine\n")
    out, doc = launch("ddp_ok.py", "--run-dir", str(run), "--force")
    assert out.returncode == 0, out.stderr[-3000:]
    assert doc["result"]["status"] == "ok"
    assert not (run / "logs" / "none_old").exists()
    assert "injected failure" not in (run / "launcher.log").read_text()
    assert json.loads((run / "result.json").read_text())["result"]["status"] == "ok"
    assert (run / "notes.txt").read_text() == "mine\n"
