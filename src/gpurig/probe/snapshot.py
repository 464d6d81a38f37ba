"""Save and load `RigFacts` snapshots (`gpurig doctor --save-facts` / `--facts`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpurig.errors import BadInput, check_output_file, read_user_text, write_file_atomic
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
        facts = RigFacts.from_dict(data)
    except FactsError as exc:
        raise BadInput(f"{flag} {p}: not a gpurig facts snapshot: {exc}") from None
    if not facts.holds_facts():
        raise BadInput(f"{flag} {p}: holds no facts (no GPU, driver, system or PCI section with a value), so "
                       "there is nothing to judge; save a snapshot with `gpurig doctor --save-facts FILE`")
    return facts


def save_facts_file(facts: RigFacts, path: str | os.PathLike, flag: str = "--save-facts", force: bool = True) -> Path:
    """Write the snapshot atomically (temporary file, fsync, rename): a crash never leaves half a file.

    gpurig's one rule for output files applies (`check_output_file`): the folder must exist, and an
    existing file is replaced only with `force` (`gpurig doctor` passes its --force, after checking
    it before probing)."""
    p = Path(path)
    check_output_file(str(p), flag, force)
    write_file_atomic(str(p), json.dumps(facts.to_dict(), indent=2) + "\n", flag)
    return p
