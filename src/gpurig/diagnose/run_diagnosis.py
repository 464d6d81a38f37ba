"""A failed `gpurig launch` run, diagnosed: which rank failed first and why, read from what
`launch.collect` gathered (each rank's exit, traceback and log), with the catalogue's explanation.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpurig.diagnose.catalogue import (
    EXCEPTION_LINE,
    NEXT_STEPS,
    ROLES,
    Match,
    generic_exception,
    match_catalogue,
    rank_matches,
)
from gpurig.diagnose.explain import GENERIC, _threads_for
from gpurig.diagnose.loglines import installed_frame

# --- reading a traceback --------------------------------------------------------------------

_C10D_FRAME = re.compile(r'File "[^"]*distributed_c10d\.py", line \d+, in (\w+)')
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n(?:[^\n]*\]: )?\s+(\S[^\n]*)')
_NCCL_FRAME = re.compile(r"^#\d+ (\S+) from (\S+):(\d+)\s*$", re.M)
_NCCL_OP = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)")


def collective_in_text(text: str) -> tuple[str | None, int | None]:
    """The collective a rank was in when it failed: NCCL's watchdog line, else the traceback."""
    ops = list(_NCCL_OP.finditer(text))
    if ops:
        m = ops[-1]
        return m.group(2).lower(), int(m.group(1))
    names = _C10D_FRAME.findall(text)
    return (names[-1] if names else None), None


def user_frame(text: str) -> str | None:
    """The last traceback frame outside torch and the standard library: where the user's code was."""
    found = None
    for m in _NCCL_FRAME.finditer(text):
        path = m.group(2)
        if "/torch/" not in path and not installed_frame(path):
            found = f"{path.rsplit('/', 1)[-1]}:{m.group(3)}"
            break  # innermost first in this format
    if found:
        return found
    for m in _FRAME.finditer(text):
        path = m.group(1)
        if "/torch/" in path or installed_frame(path) or "/launch/inject/" in path:
            continue
        name = re.split(r"[/\\]", path)[-1]
        found = f"{name}:{m.group(2)} {m.group(4).strip()}"
    return found


# --- a failed `gpurig launch` run --------------------------------------------------------------

_EXIT_SIGNALS = {6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 2: "SIGINT"}


@dataclass
class RunDiagnosis:
    """Why a run ended: the root-cause rank, its explanation, and for a hang who did not arrive."""

    status: str  # "ok", "failed", "hang", "interrupted"
    exit_code: int  # what `gpurig launch` exits with: the failing worker's (128+N for signal N)
    summary: str
    root_rank: int | None = None
    worker_exitcode: int | None = None  # as torchrun reports it: negative for a signal
    signal: str | None = None
    matches: list[Match] = field(default_factory=list)
    collective: str | None = None
    sequence: int | None = None
    arrived_ranks: list[int] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    hang_source: str | None = None  # "flight-recorder" or "logs"
    where: str | None = None  # the user's line the root rank was at
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    ranks: dict[str, str] = field(default_factory=dict)  # rank -> what its log says, one word
    next_steps: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["matches"] = [m.to_dict() for m in self.matches]
        return data


def exit_code_for(worker_exitcode: int | None, fallback: int = 1) -> int:
    """A worker's exit status as a shell sees it: 1 stays 1, killed by signal 9 (-9) becomes 137."""
    if worker_exitcode is None:
        return fallback
    if worker_exitcode < 0:
        return 128 + (-worker_exitcode)
    return worker_exitcode or fallback


def _exit_text(exitcode: int, pid: int | None = None) -> str:
    """The lines torchrun prints for an exit code, so the catalogue's exit-code entries apply."""
    text = f"  exitcode  : {exitcode} (pid: {pid or '?'})\n"
    if exitcode < 0 and -exitcode in _EXIT_SIGNALS:
        text += f"  traceback : Signal {-exitcode} ({_EXIT_SIGNALS[-exitcode]}) received by PID {pid or '?'}\n"
    return text




def _uncaught_exception(rank: int, log, text: str) -> Match | None:
    """The script's own exception (not one in the catalogue): still the reason this rank died."""
    message = log.error_message
    if not message:
        found = EXCEPTION_LINE.findall(text)
        message = found[-1].strip() if found else None
    if not message or message.startswith(("KeyboardInterrupt", "SystemExit")):
        return None
    return generic_exception(str(rank), message)


def _role(matches: list[Match]) -> str | None:
    roles = {m.role for m in matches}
    for role in ROLES:
        if role in roles:
            return role
    return None


def analyze_traces(traces: dict[int, list], world_size: int | None) -> dict[str, Any] | None:
    """Merge flight recorder dumps: the collective some ranks entered and others never reached.

    `traces` maps rank -> TraceEntry list (launch.collect.read_trace_dump). Returns None when the
    dumps hold no collective.
    """
    by_pg: dict[str, dict[int, list]] = {}
    for rank, entries in traces.items():
        for e in entries:
            if not e.p2p:
                by_pg.setdefault(e.pg, {}).setdefault(rank, []).append(e)
    best = None
    for pg, ranks in by_pg.items():
        last = {r: max(es, key=lambda e: e.seq) for r, es in ranks.items()}
        top = max(e.seq for e in last.values())
        top_entry = next(e for e in last.values() if e.seq == top)
        unfinished = any(e.state != "completed" for e in last.values())
        if not unfinished and best is not None:
            continue
        expected = set(range(world_size)) if world_size else set(traces)
        arrived = sorted(r for r, e in last.items() if e.seq == top)
        missing = sorted(expected - set(arrived))
        behind = {r: last[r].seq for r in missing if r in last}
        last_seen = {r: f"{last[r].op.split(':')[-1]} #{last[r].seq}" + (f" at {last[r].where}" if last[r].where else "")
                     for r in missing if r in last}
        candidate = {
            "process_group": pg,
            "collective": top_entry.op.split(":")[-1],
            "sequence": top,
            "state": top_entry.state,
            "arrived_ranks": arrived,
            "missing_ranks": missing,
            "last_sequence_of_missing": behind,
            "last_collective_of_missing": last_seen,
            "where": next((last[r].where for r in arrived if last[r].where), None),
            "no_dump_ranks": sorted(expected - set(traces)),
        }
        if best is None or (unfinished and (missing or not best["missing_ranks"])):
            best = candidate
    return best


# How an interrupted run's line names the signal that stopped it.
_STOP_WORDS = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM (from a scheduler or kill)"}


def _interrupted(record, stop_signal: str | None, again: str) -> RunDiagnosis:
    """The user (or their scheduler) stopped the run: one quiet line, no matches and no advice.

    The workers' last words are the signal we sent them, not a fault to explain."""
    import signal as signals

    name = stop_signal or "SIGINT"
    try:
        number = signals.Signals[name].value
    except KeyError:
        name, number = "SIGINT", signals.SIGINT.value
    where = f"; logs in {record.run_dir}" if getattr(record, "run_dir", None) else ""
    summary = f"stopped by {_STOP_WORDS.get(name, name)}; every worker was stopped{where}; {again}"
    return RunDiagnosis(status="interrupted", exit_code=128 + number, summary=summary, signal=name)


def explain_run(
    record,
    returncode: int,
    timed_out: bool = False,
    interrupted: bool = False,
    tail: int = 30,
    stop_signal: str | None = None,
    again: str = "run the same command again to start over",
) -> RunDiagnosis:
    """Decide which rank caused the run to end, and why. `record` is a launch.collect.RunRecord.

    An `interrupted` run was stopped on purpose by `stop_signal` ("SIGINT", the default, or
    "SIGTERM"): its diagnosis is that one fact and `again`, how to continue.
    """
    if interrupted:
        return _interrupted(record, stop_signal, again)
    failures = {f.rank: f for f in record.failures}
    per_rank: dict[int, list[Match]] = {}
    roles: dict[int, str | None] = {}
    for rank in sorted(set(record.ranks) | set(failures)):
        log = record.ranks.get(rank)
        text = ""
        if log is not None:
            text = log.text
            if log.error_traceback and log.error_traceback not in text:
                text += "\n" + log.error_traceback
        log_matches = match_catalogue(text) if text else []
        role = _role(log_matches)
        matches = log_matches
        if rank in failures:
            exit_matches = match_catalogue(_exit_text(failures[rank].exitcode, failures[rank].pid))
            exit_role = _role(exit_matches)
            if role in (None, "secondary"):
                # A death by signal (SIGKILL, SIGSEGV, ...) is this rank's own fault; SIGTERM from
                # torchrun is not.
                if exit_role == "primary" or (role is None and exit_role is not None):
                    role = exit_role
                matches = rank_matches(exit_matches + log_matches)
            else:
                matches = rank_matches(log_matches + [m for m in exit_matches if m.role != "secondary"])
        if role in (None, "secondary") and log is not None:
            raised = _uncaught_exception(rank, log, text)
            if raised is not None and (role is None or not any(m.role == "secondary" for m in log_matches)):
                matches = rank_matches([raised] + matches)
                role = "primary"
        per_rank[rank] = matches
        roles[rank] = role
    ranks_summary = {str(r): (roles[r] or "no error") for r in sorted(roles)}

    def first(candidates: list[int]) -> int:
        def key(r: int):
            log = record.ranks.get(r)
            when = log.error_time if log and log.error_time else float("inf")
            torchrun_root = 0 if r in failures and failures[r].root_cause else 1
            return (when, torchrun_root, r)

        return min(candidates, key=key)

    def finish(diag: RunDiagnosis, rank: int | None) -> RunDiagnosis:
        if rank is not None:
            log = record.ranks.get(rank)
            if log is not None:
                diag.log_path = str(Path(log.log_paths[0]).parent) if log.log_paths else None
                lines = log.text.splitlines()
                # NCCL_DEBUG=INFO buries the rank's own last words under set-up chatter.
                quiet = [line for line in lines if " NCCL INFO " not in line]
                if quiet and len(quiet) < len(lines):
                    diag.log_tail = ["(NCCL INFO lines left out)"] + quiet[-tail:]
                else:
                    diag.log_tail = lines[-tail:]
                diag.where = diag.where or user_frame(log.text + "\n" + (log.error_traceback or ""))
        diag.ranks = ranks_summary
        if rank is not None and diag.status == "failed" and (not diag.matches or diag.matches[0].id in GENERIC):
            # The catalogue says only how the rank ended (an exception, a signal): a resolved
            # thread may know why.
            log = record.ranks.get(rank)
            if log is not None:
                diag.matches = _threads_for(diag.matches, log.text + "\n" + (log.error_traceback or ""))
        if not diag.matches and diag.status != "ok":
            diag.next_steps = list(NEXT_STEPS)
        return diag

    primary = [r for r, role in roles.items() if role == "primary"]
    timeouts = [r for r, role in roles.items() if role == "timeout"]

    if primary:
        root = first(primary)
        f = failures.get(root)
        code = f.exitcode if f else None
        diag = RunDiagnosis(
            status="failed",
            exit_code=exit_code_for(code, returncode or 1),
            summary="",
            root_rank=root,
            worker_exitcode=code,
            signal=_EXIT_SIGNALS.get(-code) if code and code < 0 else None,
            matches=per_rank[root],
        )
        title = per_rank[root][0].title if per_rank[root] else "failed"
        how = f" (exit code {code}{', ' + diag.signal if diag.signal else ''})" if code is not None else ""
        diag.summary = f"rank {root} failed first{how}: {title}"
        return finish(diag, root)

    if timeouts:
        waiting = first(timeouts)
        world = record.world_size or (max(set(record.ranks) | set(failures), default=-1) + 1) or None
        merged = analyze_traces(record.traces, world) if record.traces else None
        diag = RunDiagnosis(status="hang", exit_code=1, summary="", matches=per_rank[waiting])
        missing_last: dict = {}
        if merged:
            missing_last = merged.get("last_collective_of_missing", {})
            diag.hang_source = "flight-recorder"
            diag.collective = merged["collective"]
            diag.sequence = merged["sequence"]
            diag.arrived_ranks = merged["arrived_ranks"]
            diag.missing_ranks = merged["missing_ranks"]
        else:
            diag.hang_source = "logs"
            log = record.ranks.get(waiting)
            op, seq = collective_in_text(log.text if log else "")
            diag.collective, diag.sequence = op, seq
            diag.arrived_ranks = sorted(timeouts)
            everyone = set(range(world)) if world else set(record.ranks)
            diag.missing_ranks = sorted(everyone - set(timeouts))
        f = failures.get(waiting)
        diag.worker_exitcode = f.exitcode if f else None
        diag.signal = f.signal if f else None
        diag.exit_code = exit_code_for(diag.worker_exitcode, returncode or 1)
        op = diag.collective or "a collective"
        seq = f" #{diag.sequence}" if diag.sequence else ""
        if diag.missing_ranks:
            who = ", ".join(str(r) for r in diag.missing_ranks)
            diag.summary = (
                f"rank(s) {', '.join(str(r) for r in diag.arrived_ranks)} waited in {op}{seq} until the "
                f"timeout; rank(s) {who} never arrived (read from the {diag.hang_source})"
            )
            if missing_last:
                diag.summary += "; last collective of " + ", ".join(
                    f"rank {r}: {what}" for r, what in sorted(missing_last.items()))
            root = diag.missing_ranks[0]
        else:
            diag.summary = (
                f"every rank entered {op}{seq} and none finished: not a missing rank but a stuck "
                f"collective (network or peer-to-peer), read from the {diag.hang_source}"
            )
            root = waiting
        diag.root_rank = root
        waited_at = user_frame(record.ranks[waiting].text) if waiting in record.ranks else None
        waited_at = waited_at or (merged or {}).get("where")
        diag.where = f"rank {waiting} waited at {waited_at}" if waited_at else None
        return finish(diag, root)

    if timed_out:
        diag = RunDiagnosis(
            status="hang",
            exit_code=124,
            summary="the run did not finish within --max-time and no rank reported an error; the last lines of each rank show where they were",
        )
        return finish(diag, min(record.ranks) if record.ranks else None)

    if failures:
        root_entry = next((f for f in record.failures if f.root_cause), record.failures[0])
        root = root_entry.rank
        diag = RunDiagnosis(
            status="failed",
            exit_code=exit_code_for(root_entry.exitcode, returncode or 1),
            summary=f"rank {root} failed first (exit code {root_entry.exitcode})",
            root_rank=root,
            worker_exitcode=root_entry.exitcode,
            signal=root_entry.signal,
            matches=per_rank.get(root, []),
        )
        return finish(diag, root)

    if returncode == 0:
        return finish(RunDiagnosis(status="ok", exit_code=0, summary="every worker finished"), None)

    # torchrun itself failed before any worker ran (bad script path, rendezvous error, ...).
    matches = match_catalogue(record.launcher_tail)
    diag = RunDiagnosis(
        status="failed",
        exit_code=returncode if returncode > 0 else exit_code_for(returncode),
        summary="torchrun failed before the workers ran" + (f": {matches[0].title}" if matches else ""),
        matches=matches,
        log_tail=record.launcher_tail.splitlines()[-tail:],
    )
    diag.ranks = ranks_summary
    if not matches:
        diag.next_steps = list(NEXT_STEPS)
    return diag
