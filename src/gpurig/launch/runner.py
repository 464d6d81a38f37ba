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


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, start time) of a process from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = data[data.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


class _Descendants:
    """Every process torchrun starts, remembered while torchrun is alive.

    torchrun puts each worker in a session of its own (its SubprocessHandler uses
    start_new_session), so killing torchrun's process group does not reach the workers or their
    DataLoader processes; and once torchrun is gone they are orphans nobody can trace back. So the
    tree is scanned while it exists, and whatever is still alive at the end is killed by pid and
    process group (the start time guards against a reused pid).
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[int, int]] = {}  # pid -> (pgid, start time)
        self._lock = threading.Lock()

    def scan(self) -> None:
        if not os.path.isdir("/proc"):
            return
        parents: dict[int, list[int]] = {}
        stats: dict[int, tuple[int, int, int]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            st = _proc_stat(int(name))
            if st is not None:
                stats[int(name)] = st
                parents.setdefault(st[0], []).append(int(name))
        found, stack = {}, list(parents.get(self.root, []))
        while stack:
            pid = stack.pop()
            if pid in found:
                continue
            found[pid] = (stats[pid][1], stats[pid][2])
            stack += parents.get(pid, [])
        with self._lock:
            self.seen.update(found)

    def alive(self) -> list[tuple[int, int]]:
        with self._lock:
            items = list(self.seen.items())
        out = []
        for pid, (pgid, start) in items:
            st = _proc_stat(pid)
            if st is not None and st[2] == start:
                out.append((pid, pgid))
        return out

    def kill(self, sig: int) -> None:
        own = os.getpgid(0)
        for pid, pgid in self.alive():
            if pgid != own:
                try:
                    os.killpg(pgid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _kill_group(proc: subprocess.Popen, grace: float, tree: _Descendants | None = None) -> None:
    """SIGTERM the process group, wait `grace` seconds, then SIGKILL whatever is left."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    if tree is not None:
        tree.scan()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL and tree is not None:
            tree.kill(signal.SIGKILL)  # workers in sessions of their own, DataLoader children
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid) and not (tree and tree.alive()):
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
    tree = _Descendants(proc.pid)
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            tree.scan()
            finished.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    timed_out = interrupted = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc, grace, tree)
    except KeyboardInterrupt:
        interrupted = True
        _kill_group(proc, grace, tree)
    finally:
        finished.set()
        watcher.join(timeout=5)
        if proc.poll() is None:
            _kill_group(proc, grace, tree)
        else:
            # torchrun has exited; make sure no orphaned worker or DataLoader child survives it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            tree.kill(signal.SIGKILL)
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
