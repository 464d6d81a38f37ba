"""Turn a hang into a diagnosis: per-rank progress files and a watchdog around every collective.

Before each collective a worker appends `{"seq", "check", "op", "what"}` to
`<run_dir>/progress-rank<R>.jsonl`. Every rank runs the same sequence of collectives, so sequence
number N names the same operation on every rank. When a collective waits longer than the timeout,
the worker's watchdog thread records the hang and ends the process (torchrun then stops the
others); the parent reads the files and names the ranks that never entered operation N.

This module does not import torch: the parent uses the reader, the workers the writer.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HANG_EXIT_CODE = 124


def progress_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"progress-rank{rank}.jsonl"


class Progress:
    """The worker side: numbers collectives, logs entry to each, and watches for one that hangs."""

    def __init__(
        self,
        run_dir: str | Path,
        rank: int,
        timeout: float,
        on_hang: Callable[[dict[str, Any]], None] | None = None,
        poll: float = 0.2,
    ) -> None:
        self.rank = rank
        self.timeout = timeout
        self.seq = 0
        self.on_hang = on_hang
        self._path = progress_path(run_dir, rank)
        self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 - open for the worker's life
        self._current: dict[str, Any] | None = None
        self._started = 0.0
        self._lock = threading.Lock()
        self._poll = poll
        self._thread = threading.Thread(target=self._watch, name="gpurig-watchdog", daemon=True)
        self._thread.start()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @contextmanager
    def op(self, check: str, op: str, what: str = "") -> Iterator[int]:
        """Run the body as collective number `seq`; the watchdog fires if it outlasts the timeout."""
        seq = self.next_seq()
        entry = {"seq": seq, "check": check, "op": op, "what": what, "rank": self.rank}
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        with self._lock:
            self._current = entry
            self._started = time.monotonic()
        try:
            yield seq
        finally:
            with self._lock:
                self._current = None

    @contextmanager
    def local(self, check: str, op: str, what: str = "") -> Iterator[None]:
        """Watch work that only this rank does (a copy between two GPUs in this process).

        It takes no sequence number, so the ranks' numbering of collectives stays aligned.
        """
        entry = {"seq": None, "check": check, "op": op, "what": what, "rank": self.rank, "local": True}
        with self._lock:
            self._current = entry
            self._started = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._current = None

    def _watch(self) -> None:
        while True:
            time.sleep(self._poll)
            with self._lock:
                current = self._current
                waited = time.monotonic() - self._started
            if current is not None and waited > self.timeout:
                record = dict(current, waited_s=round(waited, 1))
                try:
                    if self.on_hang:
                        self.on_hang(record)
                finally:
                    # The main thread is stuck inside the collective; only leaving the process
                    # frees it. torchrun sees the exit and stops the other workers.
                    os._exit(HANG_EXIT_CODE)

    def close(self) -> None:
        self._file.close()


def read_progress(run_dir: str | Path, world_size: int) -> dict[int, list[dict[str, Any]]]:
    """Every rank's progress entries (an empty list for a rank that wrote none)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rank in range(world_size):
        entries = []
        path = progress_path(run_dir, rank)
        if path.exists():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short when the process was killed
        out[rank] = entries
    return out


def _describe(entry: dict[str, Any]) -> str:
    what = f" ({entry['what']})" if entry.get("what") else ""
    return f"{entry.get('op')} #{entry.get('seq')}{what} in check '{entry.get('check')}'"


def diagnose_hang(
    progress: dict[int, list[dict[str, Any]]],
    hangs: list[dict[str, Any]],
    world_size: int,
    timeout: float | None = None,
) -> dict[str, Any] | None:
    """Name the collective that never completed and the ranks that never arrived at it.

    `hangs` are the records of ranks whose watchdog fired. Without any (the whole run was stopped
    from outside), the furthest collective any rank entered is taken as the one that hung.
    """
    local = [h for h in hangs if h.get("local")]
    if local:
        # Work of one rank alone stalled (a GPU copy); the other ranks only waited for it.
        h = local[0]
        waited = h.get("waited_s", timeout)
        what = f" ({h['what']})" if h.get("what") else ""
        message = (f"{h.get('op')}{what} on rank {h.get('rank')} in check '{h.get('check')}' did not finish within "
                   f"{waited:g} s; the other ranks waited for it")
        return {"check": h.get("check"), "op": h.get("op"), "seq": None, "what": h.get("what", ""), "waited_s": waited,
                "arrived": [], "missing": [], "stalled_rank": h.get("rank"), "last_seen": {}, "message": message}
    if hangs:
        stuck = min(hangs, key=lambda h: h.get("seq") or 0)
    else:
        entered = [e for entries in progress.values() for e in entries]
        if not entered:
            return None
        stuck = max(entered, key=lambda e: e.get("seq", 0))
    seq = stuck.get("seq")
    # Arrived means entered this very step: a rank that lost count (it raised part-way through a
    # check) can carry the same number on a different collective, and that is not arriving.
    arrived = sorted(r for r, entries in progress.items()
                     if any(e.get("seq") == seq and e.get("op") == stuck.get("op") and e.get("check") == stuck.get("check")
                            for e in entries))
    missing = [r for r in range(world_size) if r not in arrived]
    last_seen: dict[str, str] = {}
    for r in missing:
        entries = progress.get(r) or []
        last_seen[str(r)] = f"last entered {_describe(entries[-1])}" if entries else "entered no collective at all"
    waited = stuck.get("waited_s", timeout)
    message = f"{_describe(stuck)} did not complete"
    if waited is not None:
        message += f" within {waited:g} s"
    if missing:
        message += f": rank(s) {', '.join(map(str, missing))} never arrived"
        message += " (" + "; ".join(f"rank {r} {s}" for r, s in last_seen.items()) + ")"
    else:
        message += ": every rank entered it, so it stalled inside the communication library"
    if arrived:
        message += f"; rank(s) {', '.join(map(str, arrived))} waited in it"
    return {
        "check": stuck.get("check"),
        "op": stuck.get("op"),
        "seq": seq,
        "what": stuck.get("what", ""),
        "waited_s": waited,
        "arrived": arrived,
        "missing": missing,
        "last_seen": last_seen,
        "message": message,
    }
