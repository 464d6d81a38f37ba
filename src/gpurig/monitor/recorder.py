"""Recordings: samples appended as JSON lines, one sample per line, flushed as each is written.

A recording can run for hours: the recorder holds no samples in memory, only the open file, and
each line is flushed so a killed monitor loses at most the line it was writing. `read_recording`
skips such a torn last line and says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpurig.monitor.samples import Sample


class RecordingError(ValueError):
    """A recording that cannot be read; the message names the file and the line."""


# The first line of a recording is one sample: a few kB per GPU. Reading this much of a file is
# enough to tell a recording from anything else without reading a day-long recording whole.
FIRST_LINE_LIMIT = 4 << 20


class Recorder:
    """Appends samples to `path`: a new file, or an existing recording, which is extended.

    The folder must exist (the command checks it; nothing here creates folders). An existing file
    that is not a recording is refused with `RecordingError`, so a mistyped name never gets JSON
    lines appended to someone's file. When the monitor that wrote an existing recording was killed
    in the middle of a line, that torn line (never a readable sample; `read_recording` skips it)
    is cut off before extending, or it would sit in the middle of the file and make the whole
    recording unreadable; `dropped_bytes` says how much was cut.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.dropped_bytes = 0
        self.extended = False
        if self.path.is_file() and self.path.stat().st_size > 0:
            self.dropped_bytes = _prepare_to_extend(self.path)
            self.extended = True
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self.written = 0

    def write(self, sample: Sample | dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: the recorder is closed")
        data = sample.to_dict() if isinstance(sample, Sample) else sample
        self._file.write(json.dumps(data, separators=(",", ":")) + "\n")
        self._file.flush()  # a recording is read while it grows, and survives a kill
        self.written += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prepare_to_extend(path: Path) -> int:
    """Check that `path` is a recording and cut a torn last line; returns the bytes cut."""
    with path.open("rb+") as f:
        first = f.readline(FIRST_LINE_LIMIT)
        try:
            Sample.from_dict(json.loads(first))
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
            raise RecordingError(f"{path}: the file exists and is not a monitor recording (its first line is not "
                                 "a sample); nothing was written to it: give a new file name") from None
        size = f.seek(0, os.SEEK_END)
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # Find the end of the last whole line, reading backwards in blocks.
        end = size
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            block = f.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                f.truncate(keep)
                return size - keep
            end = start
    # The only line is the first, read above as a whole sample: it merely lacks its newline.
    with path.open("ab") as f:
        f.write(b"\n")
    return 0


@dataclass
class Recording:
    """The samples of a recording, as dicts (the JSON form), with what could not be read."""

    path: Path
    samples: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "line N: why"

    @property
    def gpu_indices(self) -> list[int]:
        return sorted({g["index"] for s in self.samples for g in s["gpus"]})


# What `--plot` and the sample verdicts read: enough to keep a day-long recording small in memory.
PLOT_FIELDS = frozenset({"index", "error", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w",
                         "power_limit_w", "temperature_c", "sm_clock_mhz", "sm_clock_max_mhz", "throttle_reasons",
                         "nvlink_tx_bytes_per_s", "processes"})


def read_recording(path: str | os.PathLike[str], fields: frozenset[str] | None = None) -> Recording:
    """Read a recording made by `gpurig monitor --record`, line by line.

    `fields` keeps only those keys of each GPU (e.g. PLOT_FIELDS), so long recordings stay small.
    A torn last line (the monitor was killed while writing it) is skipped with a note; a bad line
    anywhere else raises RecordingError naming the line, since the file is then not a recording.
    """
    p = Path(path)
    rec = Recording(path=p)
    pending: tuple[int, str] | None = None  # a bad line is an error only if another line follows it
    try:
        with p.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                if pending is not None:
                    raise RecordingError(f"{p}: line {pending[0]} is not a monitor sample: {pending[1]}")
                try:
                    sample = Sample.from_dict(json.loads(line)).to_dict()
                except (json.JSONDecodeError, ValueError, TypeError) as exc:
                    pending = (number, str(exc))
                    continue
                if fields is not None:
                    sample["gpus"] = [{k: v for k, v in g.items() if k in fields} for g in sample["gpus"]]
                rec.samples.append(sample)
    except FileNotFoundError:
        raise RecordingError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"{p}: cannot be read ({exc})") from None
    if pending is not None:
        if not rec.samples:
            raise RecordingError(f"{p}: line {pending[0]} is not a monitor sample: {pending[1]}")
        rec.skipped.append(f"line {pending[0]}: incomplete last line skipped ({pending[1]})")
    if not rec.samples:
        raise RecordingError(f"{p}: holds no samples")
    return rec
