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

    check_user_file(path, label, kind)
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{label}: cannot read it ({exc})") from None


def check_user_file(path: str, label: str, kind: str) -> None:
    """A file the user named must exist and be a file: `BadInput` starting with `label` otherwise."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise BadInput(f"{label}: is a directory, not a {kind}")
    if not p.exists():
        raise BadInput(f"{label}: no such file")


def check_output_file(path: str, flag: str, force: bool = False) -> None:
    """The one rule for every file gpurig writes where the user said: its folder must exist (gpurig
    never creates a folder the user may have mistyped), a folder is not a file, and an existing file
    is replaced only with --force. Raises `BadInput` naming the flag and the path."""
    from pathlib import Path

    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise BadInput(f"{flag} {p}: is a directory; give a file name")
    if parent.exists() and not parent.is_dir():
        raise BadInput(f"{flag} {p}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise BadInput(f"{flag} {p}: the folder {parent} does not exist")
    if p.exists() and not force:
        raise BadInput(f"{flag} {p}: the file exists; add --force to replace it")


def _default_mode() -> int:
    """What open() would give a new file under this process's umask (mkstemp gives 0600)."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_file_atomic(path: str, data: str | bytes, flag: str, mode: int | None = None) -> None:
    """Write `data` (text as UTF-8, or bytes) through a temporary file, fsync and rename: a crash or
    a full disk never leaves half a file, and the file that was there stays whole. The file gets
    `mode`, or what the umask gives a new file. `BadInput` naming the flag on failure."""
    import os
    import tempfile
    from pathlib import Path

    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode() if mode is None else mode)
        os.replace(tmp, p)
    except OSError as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise BadInput(f"{flag} {p}: cannot write it ({exc.strerror or exc})") from None


def framework_installed(module: str) -> bool:
    """Whether `module` (torch, tensorflow) can be found, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_torch(command: str) -> None:
    """Stop `gpurig <command>` before it starts any process when PyTorch is missing: one line with
    the install command, instead of every worker failing on `torch.distributed.run` (exit 1)."""
    if not framework_installed("torch"):
        raise ProblemFound(
            f"PyTorch is not installed, and `gpurig {command}` runs PyTorch processes: pip install 'gpurig[torch]' "
            "(or the exact line `gpurig env pip` prints for this machine's driver)")


def require_tensorflow(command: str) -> None:
    if not framework_installed("tensorflow"):
        raise ProblemFound(
            f"TensorFlow is not installed, and `gpurig {command}` runs it: pip install 'gpurig[tf]' "
            "(on a GPU machine: pip install 'tensorflow[and-cuda]')")
