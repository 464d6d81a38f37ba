"""Where output goes: one JSON document on stdout with `--json`, human text otherwise.

With `--json`, progress and messages go to stderr so stdout stays one parseable document.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from rich.console import Console


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=_default, sort_keys=False)


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout, and nothing else."""
    sys.stdout.write(to_json(obj) + "\n")
    sys.stdout.flush()


def console_for(json_mode: bool) -> Console:
    """The console for human text: stderr when stdout is reserved for JSON."""
    return Console(stderr=json_mode, highlight=False, soft_wrap=False)
