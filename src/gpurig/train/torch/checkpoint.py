"""Checkpoints: written atomically, loaded with `weights_only=True`, corrupt ones named.

A checkpoint is `<run>/checkpoints/step-<N>.pt`. Writing goes to a temporary file in the same
directory, is flushed and fsync'd, then renamed over the final name with `os.replace` (atomic on
POSIX), and the directory is fsync'd. A crash at any point leaves the previous checkpoint intact;
a leftover `*.tmp` is never picked up. Older checkpoints beyond `keep` are deleted only after the
new one is in place. `check_resume` says, before any state is loaded, whether a checkpoint fits
this run (the model's shapes, the data, the global batch).
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


def step_of(path: Path) -> int | None:
    """The step a checkpoint file's name records, or None for another name."""
    m = _NAME.match(path.name)
    return int(m.group(1)) if m else None


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


def archive_problem(path: Path) -> str | None:
    """Why `path` cannot be a checkpoint, judged from its zip directory alone (no torch, no reading
    of the tensors, so the parent can ask before starting any worker); None when it looks whole.
    torch.save writes a zip archive whose directory sits at the end: a truncated copy loses it."""
    import zipfile

    try:
        if path.stat().st_size == 0:
            return "the file is empty"
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except FileNotFoundError:
        return "it does not exist"
    except IsADirectoryError:
        return "it is a directory"
    except zipfile.BadZipFile:
        return "it is truncated or not a PyTorch checkpoint (no zip directory at its end)"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
        return "it is a zip archive but not a PyTorch checkpoint (no data.pkl)"
    return None


def describe_load_error(exc: BaseException) -> str:
    """torch.load's complaint in words for this tool. PyTorch's weights-only message advises
    `weights_only=False`, which runs whatever code the file holds: gpurig never suggests it."""
    text = str(exc)
    if "Weights only load failed" in text or "WeightsUnpickler" in text:
        return ("it holds objects other than tensors and plain data, which gpurig refuses to load "
                "(checkpoints are read with weights_only=True, so no code in a file is ever run)")
    if "failed finding central directory" in text or "zip archive" in text:
        return "it is truncated or not a PyTorch checkpoint (no zip directory at its end)"
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def load_checkpoint_file(path: Path) -> dict[str, Any]:
    """Load one checkpoint with weights_only=True; BadInput naming the file if it is unreadable."""
    import torch

    try:
        data = path.read_bytes()
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise BadInput(f"--resume: checkpoint {path} does not exist") from None
    except IsADirectoryError:
        raise BadInput(f"--resume {path}: is a directory, not a checkpoint file") from None
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, zipfile errors...
        raise BadInput(f"--resume: checkpoint {path} is corrupt or not a gpurig checkpoint: "
                       f"{describe_load_error(exc)}") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise BadInput(f"--resume: checkpoint {path} is not a gpurig checkpoint (no model/step)")
    return state


def load_latest(run_dir: str | os.PathLike, fallback: bool = False,
                warn: bool = True) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in the run, or None when there is none.

    A corrupt newest checkpoint is an error naming it; with `fallback`, it is reported on stderr
    (when `warn`: rank 0 alone says it) and the next older one is tried.
    """
    paths = list_checkpoints(run_dir)
    for path in reversed(paths):
        try:
            return path, load_checkpoint_file(path)
        except BadInput as exc:
            if not fallback:
                raise BadInput(f"{exc}; rerun with --resume-fallback to use the previous checkpoint") from None
            if warn:
                print(f"gpurig: warning: {exc}; falling back to the previous checkpoint", file=sys.stderr, flush=True)
    if paths:
        raise BadInput(f"--resume: every checkpoint in {checkpoint_dir(run_dir)} is corrupt")
    return None


# ---------------------------------------------------------------------------------------------
# Resuming: does the checkpoint fit this run?

# Config keys that change the shapes of the parameters or the meaning of the data.
_SHAPE_KEYS = ("model", "data.dataset", "data.num_classes", "data.image_size", "data.vocab_size", "data.seq_len")


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out


def resume_mismatches(saved_config: dict[str, Any] | None, saved_world: int | None, config: dict[str, Any],
                      world: int) -> list[str]:
    """What differs between a checkpoint and this run, in words; empty when it fits.

    The model and the data's shape must be the same. The number of processes may change only if
    the global batch (batch per device x processes x accumulation) stays the same: otherwise the
    optimisation would not be the one the checkpoint belongs to.
    """
    diffs: list[str] = []
    if saved_config:
        old, new = _flat(saved_config), _flat(config)
        for key in sorted(set(old) & set(new)):  # a key added to gpurig since the checkpoint is no difference
            if not any(key == p or key.startswith(p + ".") for p in _SHAPE_KEYS):
                continue
            if old.get(key) != new.get(key):
                diffs.append(f"{key}: checkpoint {old.get(key)!r}, this run {new.get(key)!r}")
    if saved_world and saved_world != world:
        def gbatch(cfg: dict[str, Any], n: int) -> int | None:
            try:
                return int(cfg["data"]["batch_size"]) * n * int(cfg["train"]["grad_accum"])
            except (KeyError, TypeError, ValueError):
                return None

        old_g = gbatch(saved_config or {}, saved_world)
        new_g = gbatch(config, world)
        if old_g is None or old_g != new_g:
            diffs.append(f"world size: checkpoint written by {saved_world} processes (global batch {old_g}), this run "
                         f"has {world} (global batch {new_g}); resume with --nproc {saved_world}, or keep the global "
                         f"batch by setting data.batch_size so that batch x processes = {old_g}")
    return diffs


def check_resume(state: dict[str, Any], config: dict[str, Any], world: int, path: str | os.PathLike) -> None:
    """BadInput naming every difference when the checkpoint at `path` does not fit this run."""
    saved_world = (state.get("sampler") or {}).get("world_size")
    diffs = resume_mismatches(state.get("config"), saved_world, config, world)
    if diffs:
        raise BadInput(f"--resume: checkpoint {path} belongs to another run: " + "; ".join(diffs))
