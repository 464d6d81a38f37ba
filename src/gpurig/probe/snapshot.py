"""Save and load `RigFacts` snapshots (`gpurig doctor --save-facts` / `--facts`)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from gpurig.errors import BadInput, read_user_text
from gpurig.probe.facts import FactsError, RigFacts


def load_facts_file(path: str | os.PathLike, flag: str = "--facts") -> RigFacts:
    """Read a saved snapshot; any problem is `BadInput` naming the file and what is wrong."""
    p = Path(path)
    if str(path) == "-":
        raise BadInput(f"{flag}: reading facts from stdin is not supported; give a file")
    text = read_user_text(str(p), f"{flag} {p}", "facts file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{flag} {p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    try:
        return RigFacts.from_dict(data)
    except FactsError as exc:
        raise BadInput(f"{flag} {p}: not a gpurig facts snapshot: {exc}") from None


def save_facts_file(facts: RigFacts, path: str | os.PathLike, flag: str = "--save-facts") -> Path:
    """Write the snapshot atomically (temporary file, fsync, rename): a crash never leaves half a file."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise BadInput(f"{flag} {p}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise BadInput(f"{flag} {p}: the folder {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(facts.to_dict(), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
        raise BadInput(f"{flag} {p}: cannot write it ({exc.strerror or exc})") from None
    return p
