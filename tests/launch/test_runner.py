"""The runner leaves nothing behind: torchrun starts each worker in a session of its own, so when
torchrun itself dies the workers and their DataLoader processes must still be found and ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from procs import alive

from gpurig.launch.plan import DeviceChoice, LaunchOptions, plan_launch
from gpurig.launch.runner import _Descendants, run_launch

SCRIPTS = Path(__file__).parent / "scripts"


def _torchrun_child() -> int | None:
    """The pid of the torchrun this test process started."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and b"torch.distributed.run" in cmd:
            return int(name)
    return None


def test_torchrun_killed_outright_leaves_no_worker_or_dataloader_child(tmp_path, monkeypatch):
    """torchrun SIGKILLed (the OOM killer's choice, say) cannot stop its workers, which live in
    sessions of their own; the runner must find and end them."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # runs/last-launch goes here
    options = LaunchOptions(script=str(SCRIPTS / "dataloader_sleep.py"), run_dir=str(tmp_path / "run"),
                            env_overrides={"PID_DIR": str(pid_dir)})
    plan, desc = plan_launch(options, device_choice=DeviceChoice("cpu", 2, "test"))

    def kill_torchrun_when_started() -> None:
        # Once 2 ranks and their 4 DataLoader workers are up, kill torchrun and only torchrun.
        deadline = time.monotonic() + 150
        while len(list(pid_dir.glob("*.pid"))) < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        pid = _torchrun_child()
        if pid:
            os.kill(pid, signal.SIGKILL)

    threading.Thread(target=kill_torchrun_when_started, daemon=True).start()
    result, _record = run_launch(plan, desc, max_time=180, echo=lambda line: None)
    assert result.returncode == -signal.SIGKILL and not result.timed_out
    pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    assert len(pids) == 6
    end = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)]


def test_descendants_in_their_own_session_are_killed_after_the_parent_died(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    grandchild_py = tmp_path / "grandchild.py"
    grandchild_py.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    # A parent that starts a child in a new session (as torchrun does) and then waits.
    parent_py = tmp_path / "parent.py"
    parent_py.write_text(
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, {str(grandchild_py)!r}], start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, str(parent_py)], start_new_session=True)
    try:
        tree = _Descendants(parent.pid)
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        grandchild = int(pid_file.read_text())
        tree.scan()
        assert grandchild in dict(tree.alive())
        parent.kill()  # the parent dies first, as torchrun does when it is SIGKILLed
        parent.wait()
        assert alive(grandchild)  # an orphan now, in a session of its own
        tree.kill(signal.SIGKILL)
        end = time.monotonic() + 10
        while alive(grandchild) and time.monotonic() < end:
            time.sleep(0.1)
        assert not alive(grandchild)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
