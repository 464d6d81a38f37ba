"""Execute a `LaunchPlan`: torchrun in its own process group, bounded in time, nothing left behind.

torchrun does the supervision; this module only starts it, tees its output into the run
directory, and on a timeout or Ctrl-C ends the whole process group (workers and their DataLoader
children included): SIGTERM first, SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpurig.launch.plan import LaunchPlan

GRACE_SECONDS = 10.0


@dataclass
class RunResult:
    returncode: int
    seconds: float
    timed_out: bool = False
    interrupted: bool = False
    output_tail: list[str] = field(default_factory=list)
    log_path: str | None = None


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, wait `grace` seconds, then SIGKILL whatever is left."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid):
                return
            time.sleep(0.1)
    _reap(proc)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def run_plan(
    plan: LaunchPlan,
    timeout: float | None = None,
    echo: Callable[[str], None] | None = None,
    log_name: str = "launcher.log",
    tail_lines: int = 200,
    grace: float = GRACE_SECONDS,
    cwd: str | None = None,
) -> RunResult:
    """Run the plan to completion or `timeout`; return its exit status and the tail of its output.

    `echo` receives each output line as it arrives (for a progress display); every line also goes
    to `<run_dir>/<log_name>` when the plan has a run directory.
    """
    log_file = None
    log_path = None
    if plan.run_dir:
        Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
        log_path = str(Path(plan.run_dir) / log_name)
        log_file = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
    tail: deque[str] = deque(maxlen=tail_lines)
    start = time.monotonic()
    proc = subprocess.Popen(
        plan.argv,
        env=plan.full_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so one killpg ends every worker
        cwd=cwd,
        text=True,
        errors="replace",
        bufsize=1,
    )

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if log_file:
                log_file.write(line + "\n")
                log_file.flush()
            if echo:
                echo(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = interrupted = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc, grace)
    except KeyboardInterrupt:
        interrupted = True
        _kill_group(proc, grace)
    finally:
        if proc.poll() is None:
            _kill_group(proc, grace)
        else:
            # torchrun has exited; make sure no orphaned worker or DataLoader child survives it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reader.join(timeout=5)
        if log_file:
            log_file.close()
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    if interrupted:
        print("gpurig: interrupted; every worker was stopped", file=sys.stderr)
    return RunResult(
        returncode=rc,
        seconds=time.monotonic() - start,
        timed_out=timed_out,
        interrupted=interrupted,
        output_tail=list(tail),
        log_path=log_path,
    )


LAST_RUN_POINTER = os.path.join("gpurig-runs", "last-launch")


def remember_last_run(run_dir: str, pointer: str = LAST_RUN_POINTER) -> None:
    """Record the run directory so `gpurig explain` with no argument finds it."""
    try:
        Path(pointer).parent.mkdir(parents=True, exist_ok=True)
        Path(pointer).write_text(os.path.abspath(run_dir) + "\n", encoding="utf-8")
    except OSError:
        pass  # a read-only working directory only costs the shortcut


def last_run_dir(pointer: str = LAST_RUN_POINTER) -> str | None:
    try:
        path = Path(pointer).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return path if path and Path(path).is_dir() else None


def run_launch(
    plan: LaunchPlan,
    description: dict,
    max_time: float | None = None,
    echo: Callable[[str], None] | None = None,
    grace: float = GRACE_SECONDS,
):
    """Run a `gpurig launch` plan and read back what it left: (RunResult, launch.collect.RunRecord).

    The plan is saved as `<run_dir>/plan.json` first, so a later `gpurig explain RUN_DIR` knows
    the world size. SIGTERM to this process (a scheduler's preemption) ends every worker like Ctrl-C.
    """
    import json

    from gpurig.launch.collect import collect_run

    assert plan.run_dir, "a launch plan always has a run directory"
    Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
    Path(plan.run_dir, "plan.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    remember_last_run(plan.run_dir)

    previous = None
    if threading.current_thread() is threading.main_thread():
        def _on_term(signum, frame):  # turn a scheduler's SIGTERM into the Ctrl-C path
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        result = run_plan(plan, timeout=max_time, echo=echo, grace=grace)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return result, collect_run(plan.run_dir)
