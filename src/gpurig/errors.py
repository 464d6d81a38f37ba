"""Exceptions that map onto the exit-code contract (0 good, 1 problem found, 2 bad usage or input)."""

from __future__ import annotations


class BadInput(Exception):
    """Bad usage or bad input. The message names the offending flag, key, file or value. Exit 2."""

    exit_code = 2


class ProblemFound(Exception):
    """The command ran and found a problem (a failed check, a failed run). Exit 1."""

    exit_code = 1


def read_user_text(path: str, label: str, kind: str) -> str:
    """The text of a file the user named; a missing, directory or unreadable path is `BadInput`
    starting with `label` (the flag and the path as the user gave them), e.g. "SCRIPT x.py: no such file"."""
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise BadInput(f"{label}: no such file")
    if p.is_dir():
        raise BadInput(f"{label}: is a directory, not a {kind}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{label}: cannot read it ({exc})") from None
