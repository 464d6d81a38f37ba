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


class Recorder:
    """Appends samples to `path` (created, with its folder, when missing)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
