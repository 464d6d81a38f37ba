"""Checkpoints: written atomically, loaded with `weights_only=True`, corrupt ones named.

A checkpoint is `<run>/checkpoints/step-<N>.pt`. Writing goes to a temporary file in the same
directory, is flushed and fsync'd, then renamed over the final name with `os.replace` (atomic on
POSIX), and the directory is fsync'd. A crash at any point leaves the previous checkpoint intact;
a leftover `*.tmp` is never picked up. Older checkpoints beyond `keep` are deleted only after the
new one is in place.
"""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput

CKPT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d{9})\.pt$")


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CKPT_DIR


def checkpoint_path(run_dir: str | os.PathLike, step: int) -> Path:
    return checkpoint_dir(run_dir) / f"step-{step:09d}.pt"


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints, oldest first (temporary files are ignored)."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_atomic(state: dict[str, Any], path: Path) -> Path:
    """torch.save into `path` so that readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    import torch

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)
    return path


def save_checkpoint(state: dict[str, Any], run_dir: str | os.PathLike, step: int, keep: int = 2) -> Path:
    """Write the checkpoint for `step`, then prune all but the newest `keep`."""
    path = save_atomic(state, checkpoint_path(run_dir, step))
    for old in list_checkpoints(run_dir)[:-keep]:
        try:
            old.unlink()
        except OSError:
            pass
    return path


def load_checkpoint_file(path: Path) -> dict[str, Any]:
    """Load one checkpoint with weights_only=True; BadInput naming the file if it is unreadable."""
    import torch

    try:
        data = path.read_bytes()
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise BadInput(f"--resume: checkpoint {path} does not exist") from None
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, zipfile errors...
        raise BadInput(f"--resume: checkpoint {path} is corrupt or not a gpurig checkpoint "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise BadInput(f"--resume: checkpoint {path} is not a gpurig checkpoint (no model/step)")
    return state


def load_latest(run_dir: str | os.PathLike, fallback: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in the run, or None when there is none.

    A corrupt newest checkpoint is an error naming it; with `fallback`, it is reported on stderr
    and the next older one is tried.
    """
    paths = list_checkpoints(run_dir)
    for path in reversed(paths):
        try:
            return path, load_checkpoint_file(path)
        except BadInput as exc:
            if not fallback:
                raise BadInput(f"{exc}; rerun with --resume-fallback to use the previous checkpoint") from None
            print(f"gpurig: warning: {exc}; falling back to the previous checkpoint", file=sys.stderr, flush=True)
    if paths:
        raise BadInput(f"--resume: every checkpoint in {checkpoint_dir(run_dir)} is corrupt")
    return None
