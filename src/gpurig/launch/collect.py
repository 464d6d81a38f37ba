"""What a finished `gpurig launch` run left behind, read back as data: torchrun's failure table,
each rank's log and error file, and the NCCL flight recorder's dumps.

Nothing here judges; `diagnose.explain.explain_run()` decides which rank caused the failure.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpurig.launch.plan import TRACE_PREFIX

TAIL_LINES = 400

_FAILURE_BLOCK = re.compile(
    r"^\[(\d+)\]:\s*\n"
    r"\s*time\s*:\s*(?P<time>\S+)\s*\n"
    r"\s*host\s*:\s*(?P<host>\S+)\s*\n"
    r"\s*rank\s*:\s*(?P<rank>-?\d+)\s*\(local_rank:\s*(?P<local>-?\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<exit>-?\d+)\s*\(pid:\s*(?P<pid>\d+)\)[ \t]*(?:\((?P<signal>SIG\w+)\))?\s*\n"
    r"\s*error_file\s*:\s*(?P<error_file>[^\n]*)\n"
    r"\s*traceback\s*:\s*(?P<traceback>[^\n]*)",
    re.M,
)


@dataclass
class TableFailure:
    """One entry of torchrun's ChildFailedError table."""

    rank: int
    local_rank: int
    exitcode: int
    pid: int | None = None
    signal: str | None = None
    host: str | None = None
    time: str | None = None
    error_file: str | None = None
    root_cause: bool = False  # torchrun listed it under "Root Cause (first observed failure)"


@dataclass
class RankLog:
    rank: int
    local_rank: int
    log_paths: list[str] = field(default_factory=list)
    text: str = ""  # the tail of stderr then stdout
    error_message: str | None = None  # from the worker's error file
    error_traceback: str | None = None
    error_time: float | None = None


@dataclass
class TraceEntry:
    """One collective in a rank's flight recorder dump."""

    pg: str
    seq: int
    op: str
    state: str
    p2p: bool = False
    where: str | None = None  # the user's line that called it: "train.py:18"


def _user_line(frames: Any) -> str | None:
    """The innermost frame outside torch and site-packages, as "file.py:line"."""
    if not isinstance(frames, list):
        return None
    for f in frames:
        if not isinstance(f, dict):
            continue
        name = str(f.get("filename", ""))
        if not name or "/torch/" in name or "site-packages" in name or name.startswith("<frozen"):
            continue
        return f"{name.rsplit('/', 1)[-1]}:{f.get('line')}"
    return None


@dataclass
class RunRecord:
    run_dir: str
    nproc_per_node: int | None = None
    nnodes: int | None = None
    node_rank: int = 0
    world_size: int | None = None
    launcher_tail: str = ""
    failures: list[TableFailure] = field(default_factory=list)
    ranks: dict[int, RankLog] = field(default_factory=dict)
    traces: dict[int, list[TraceEntry]] = field(default_factory=dict)
    trace_files: list[str] = field(default_factory=list)
    attempt: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_failure_table(text: str) -> list[TableFailure]:
    """The entries of torchrun's ChildFailedError table, with the root cause marked."""
    root_at = text.rfind("Root Cause (first observed failure):")
    out = []
    for m in _FAILURE_BLOCK.finditer(text):
        error_file = m.group("error_file").strip()
        exitcode = int(m.group("exit"))
        sig = m.group("signal")
        if sig is None and exitcode < 0:  # older torch prints the signal only in the traceback line
            try:
                sig = signal.Signals(-exitcode).name
            except ValueError:
                sig = None
        out.append(
            TableFailure(
                rank=int(m.group("rank")),
                local_rank=int(m.group("local")),
                exitcode=exitcode,
                pid=int(m.group("pid")),
                signal=sig,
                host=m.group("host"),
                time=m.group("time"),
                error_file=None if error_file in ("<N/A>", "") else error_file,
                root_cause=root_at >= 0 and m.start() > root_at,
            )
        )
    return out


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _latest_attempt_dir(log_dir: Path) -> tuple[Path | None, int | None]:
    """torchrun writes `<log_dir>/<run_id>_<random>/attempt_<n>/<local_rank>/`; take the newest."""
    if not log_dir.is_dir():
        return None, None
    attempts = []
    for run in log_dir.iterdir():
        if not run.is_dir():
            continue
        for att in run.glob("attempt_*"):
            m = re.fullmatch(r"attempt_(\d+)", att.name)
            if m and att.is_dir():
                attempts.append((att.stat().st_mtime, int(m.group(1)), att))
    if not attempts:
        return None, None
    attempts.sort()
    _, number, path = attempts[-1]
    return path, number


def _read_error_file(path: Path) -> tuple[str | None, str | None, float | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        message = data["message"]
        if isinstance(message, str):
            return message, None, None
        extra = message.get("extraInfo", {})
        when = extra.get("gpurig_time") or extra.get("timestamp")
        return message.get("message"), extra.get("py_callstack"), float(when) if when else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, None, None


class _PlainUnpickler(pickle.Unpickler):
    """Flight recorder dumps hold only dicts, lists, strings and numbers; refuse anything else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a flight recorder dump")


def read_trace_dump(path: str | Path) -> list[TraceEntry]:
    """The collectives in one flight recorder dump (pickle, or JSON from newer torch)."""
    raw = Path(path).read_bytes()
    try:
        if raw[:1] == b"\x80":  # pickle's protocol marker
            data = _PlainUnpickler(io.BytesIO(raw)).load()
        else:
            data = json.loads(raw.decode("utf-8"))
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable flight recorder dump ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a flight recorder dump (a {type(data).__name__})")
    entries = []
    for e in data.get("entries", []):
        pg = e.get("process_group")
        pg_name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", "0"))
        p2p = bool(e.get("is_p2p")) or (e.get("collective_seq_id", 0) == 0 and e.get("p2p_seq_id", 0) > 0)
        seq = e.get("p2p_seq_id", 0) if p2p else e.get("collective_seq_id", 0)
        entries.append(
            TraceEntry(
                pg=pg_name, seq=int(seq), op=str(e.get("profiling_name", "?")), state=str(e.get("state", "?")),
                p2p=p2p, where=_user_line(e.get("frames")),
            )
        )
    return entries


def collect_run(run_dir: str | Path, launcher_log: str = "launcher.log") -> RunRecord:
    """Read everything a run directory holds about how the run ended."""
    run = Path(run_dir)
    record = RunRecord(run_dir=str(run))
    plan_file = run / "plan.json"
    if plan_file.is_file():
        try:
            plan = json.loads(plan_file.read_text())
            record.nproc_per_node = int(plan.get("nproc_per_node") or 0) or None
            nnodes = str(plan.get("nnodes") or "1").split(":")[-1]
            record.nnodes = int(nnodes)
            record.node_rank = int(plan.get("node_rank") or 0)
        except (ValueError, TypeError):
            pass
    if record.nproc_per_node and record.nnodes:
        record.world_size = record.nproc_per_node * record.nnodes
    launcher = run / launcher_log
    if launcher.is_file():
        record.launcher_tail = _tail(launcher, 2000)
        record.failures = parse_failure_table(record.launcher_tail)
    attempt_dir, record.attempt = _latest_attempt_dir(run / "logs")
    table_rank = {f.local_rank: f.rank for f in record.failures}
    if attempt_dir is not None:
        for rank_dir in sorted(attempt_dir.iterdir()):
            if not (rank_dir.is_dir() and rank_dir.name.isdigit()):
                continue
            local = int(rank_dir.name)
            rank = table_rank.get(local, record.node_rank * (record.nproc_per_node or 0) + local)
            log = RankLog(rank=rank, local_rank=local)
            parts = []
            for name in ("stderr.log", "stdout.log"):
                path = rank_dir / name
                if path.is_file():
                    log.log_paths.append(str(path))
                    parts.append(_tail(path))
            log.text = "\n".join(p for p in parts if p)
            error_file = rank_dir / "error.json"
            if error_file.is_file():
                log.error_message, log.error_traceback, log.error_time = _read_error_file(error_file)
            record.ranks[rank] = log
    for path in sorted(run.glob(TRACE_PREFIX + "*")):
        m = re.fullmatch(re.escape(TRACE_PREFIX) + r"(\d+)(?:\.json)?", path.name)
        if not m:
            continue
        try:
            record.traces[int(m.group(1))] = read_trace_dump(path)
            record.trace_files.append(str(path))
        except Exception:  # a dump cut short by the process dying is no reason to fail the report
            continue
    return record
