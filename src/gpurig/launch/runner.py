"""Execute a `LaunchPlan`: torchrun in its own process group, bounded in time, nothing left behind.

torchrun does the supervision; this module only starts it, tees its output into the run
directory, and on a timeout or Ctrl-C ends the whole process group (workers and their DataLoader
children included): SIGTERM first, SIGKILL after a grace period.

What torchrun itself prints while it is being stopped (its "Received 15 death signal" lines, the
SignalException traceback, the ChildFailedError table) goes to the log only: the user asked for
the stop and gets one line about it from the command, not forty lines of torchrun's internals.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpurig.launch.plan import LaunchPlan
from gpurig.launch.signals import Stop, ignoring_interrupts, sigterm_stops

GRACE_SECONDS = 10.0


@dataclass
class RunResult:
    returncode: int
    seconds: float
    timed_out: bool = False
    interrupted: bool = False
    output_tail: list[str] = field(default_factory=list)
    log_path: str | None = None
    signal: str | None = None  # what interrupted the run: "SIGINT" (Ctrl-C) or "SIGTERM" (a scheduler)


_AGENT_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S*torch/distributed/\S+\.py:\d+\] ")
_TABLE_RULE = re.compile(r"^={20,}\s*$")
# c10d's reverse lookup of a peer's address, which fails wherever the nodes' addresses have no DNS
# name (common between machines, and harmless: the connection is made by address).
_C10D_NO_HOSTNAME = re.compile(r"^(\[\w+\]:)?\[W\d{4} [\d:.]+ socket\.cpp:\d+\] \[c10d\] The hostname of the "
                               r"client socket cannot be retrieved")


class AgentNoise:
    """Tells torchrun's own lines from the workers' in its merged output.

    `feed(line)` returns the lines to show (none, the line, or a held-back traceback that turned
    out to be a worker's). torchrun's are its log lines (``W1201 21:25:46.47 3650
    torch/distributed/...py:753] ...``), a traceback whose frames are in torch.distributed.run or
    that ends in SignalException or ChildFailedError, and the failure table after it. A worker's
    traceback is shown whole once it ends. Everything goes to the log either way.
    """

    def __init__(self) -> None:
        self.held: list[str] = []  # a traceback not yet known to be torchrun's or a worker's
        self.table = 0  # inside ChildFailedError's table: the '=' rules seen so far

    @staticmethod
    def _agent_traceback(lines: list[str]) -> bool:
        text = "\n".join(lines)
        return ("torch/distributed/run.py" in text or "torch/distributed/elastic/" in text
                or "SignalException" in lines[-1] or "ChildFailedError" in lines[-1])

    def feed(self, line: str) -> list[str]:
        if self.table:
            if _TABLE_RULE.match(line):
                self.table += 1
                if self.table >= 3:  # the opening rule, then the closing one (counted from 1)
                    self.table = 0
            return []
        if self.held:
            if line.startswith((" ", "\t")) or not line.strip():
                self.held.append(line)
                return []
            block, self.held = [*self.held, line], []  # the exception line ends the traceback
            if self._agent_traceback(block):
                if "ChildFailedError" in line:
                    self.table = 1
                return []
            return block
        if line.startswith("Traceback (most recent call last):"):
            self.held = [line]
            return []
        if _AGENT_LOG.match(line) or _C10D_NO_HOSTNAME.match(line):
            return []
        return [line]

    def flush(self) -> list[str]:
        block, self.held = self.held, []
        return [] if block and self._agent_traceback(block) else block


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


STOP_SIGNAL_FILE = "stop-signal"  # in the run directory: what the user stopped the run with


def note_stop_signal(run_dir: str | None, signame: str) -> None:
    """Say in the run directory which signal stopped the run, before the workers get their SIGTERM:
    they write it into summary.json as the stop reason (a Ctrl-C reaches them as SIGTERM)."""
    if not run_dir:
        return
    try:
        (Path(run_dir) / STOP_SIGNAL_FILE).write_text(signame)
    except OSError:
        pass  # the summary then names the SIGTERM the workers saw


def stop_signal_of(run_dir: str | os.PathLike) -> str | None:
    """The signal `note_stop_signal` recorded for this run, or None."""
    try:
        return (Path(run_dir) / STOP_SIGNAL_FILE).read_text().strip() or None
    except OSError:
        return None


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
    hide_agent: bool = False,
) -> RunResult:
    """Run the plan to completion or `timeout`; return its exit status and the tail of its output.

    `echo` receives each output line as it arrives (for a progress display); every line also goes
    to `<run_dir>/<log_name>` when the plan has a run directory. torchrun's own lines (`AgentNoise`)
    are not echoed once the run is being stopped, nor at all with `hide_agent` (a command that
    explains failures itself).
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

    noise = AgentNoise()
    stopping = threading.Event()

    def show(line: str) -> None:
        if not echo:
            return
        if hide_agent or stopping.is_set():
            for kept in noise.feed(line):
                echo(kept)
        else:
            echo(line)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if log_file:
                log_file.write(line + "\n")
                log_file.flush()
            show(line)
        if echo:
            for kept in noise.flush():
                echo(kept)

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
    signame = None
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        stopping.set()
        _kill_group(proc, grace, tree)
    except KeyboardInterrupt as exc:
        interrupted = True
        signame = getattr(exc, "signame", "SIGINT")
        stopping.set()
        note_stop_signal(plan.run_dir, signame)
        with ignoring_interrupts():  # a second Ctrl-C must not leave the workers half-stopped
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
    return RunResult(
        returncode=rc,
        seconds=time.monotonic() - start,
        timed_out=timed_out,
        interrupted=interrupted,
        output_tail=list(tail),
        log_path=log_path,
        signal=signame,
    )


def raise_if_interrupted(result: RunResult) -> None:
    """For jobs whose partial results are worth nothing (verify, the benchmarks): once the workers
    are stopped, the Ctrl-C (or SIGTERM) goes on up to the command, which stops as a whole."""
    if result.interrupted:
        raise Stop("SIGTERM") if result.signal == "SIGTERM" else KeyboardInterrupt()


LAST_RUN_POINTER = os.path.join("runs", "last-launch")
_OLD_POINTER = os.path.join("gpurig-runs", "last-launch")  # where versions before 0.1 kept it


def remember_last_run(run_dir: str, pointer: str = LAST_RUN_POINTER) -> None:
    """Record the run directory so `gpurig explain` with no argument finds it."""
    try:
        Path(pointer).parent.mkdir(parents=True, exist_ok=True)
        Path(pointer).write_text(os.path.abspath(run_dir) + "\n", encoding="utf-8")
    except OSError:
        pass  # a read-only working directory only costs the shortcut


def last_run_dir(pointer: str = LAST_RUN_POINTER) -> str | None:
    for where in (pointer, _OLD_POINTER) if pointer == LAST_RUN_POINTER else (pointer,):
        try:
            path = Path(where).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if path and Path(path).is_dir():
            return path
    return None


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

    with sigterm_stops():  # a scheduler's SIGTERM takes the Ctrl-C path
        result = run_plan(plan, timeout=max_time, echo=echo, grace=grace)
    return result, collect_run(plan.run_dir)
