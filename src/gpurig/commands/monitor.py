"""`gpurig monitor`: what the GPUs are doing right now, what it means, and recordings to plot later."""

from __future__ import annotations

import collections
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.text import Text

from gpurig import __version__
from gpurig.errors import BadInput, check_output_file, write_file_atomic
from gpurig.monitor.watch import VERDICT_WINDOW, samples_every, snapshot, wait_for_gpu
from gpurig.report.monitor_view import compact_line, sample_table, verdict_lines
from gpurig.report.output import console_for, emit_json

HELP = """Watch every GPU and say what the numbers mean for a multi-GPU job.

Per GPU: utilisation, memory, power against its limit, temperature, SM clock, throttle reasons, PCIe and NVLink traffic, and the processes on it. A GPU idle while the others work, or running slower clocks, is highlighted, with the verdict and its fix below the table. Reads NVML only, never CUDA, so it cannot disturb the training it watches. Default: a live view refreshed every second until Ctrl-C.

Without a GPU or NVML it says so in one line: with --once, --json or --count it exits 0, otherwise it waits for a GPU to appear (Ctrl-C ends).

[bold]Examples[/bold]

  gpurig monitor                                  [dim]# live view, every 1 s[/dim]

  gpurig monitor --once                           [dim]# one snapshot and exit[/dim]

  gpurig monitor --json                           [dim]# one snapshot as a JSON document[/dim]

  gpurig monitor --record run.jsonl               [dim]# one JSON line per sample; hours are fine[/dim]

  gpurig monitor --plot run.jsonl --out run.png   [dim]# utilisation, memory, power over time[/dim]

Exit status: 0 done, 2 bad usage or an unreadable recording.
"""

@dataclass
class MonitorOptions:
    interval: float = 1.0
    once: bool = False
    json_out: bool = False
    record: Path | None = None
    count: int = 0
    plot: Path | None = None
    out: Path | None = None
    force: bool = False  # replace an existing --out PNG

    def validate(self) -> None:
        """Bad combinations, named by their flags (exit 2)."""
        if not (self.interval > 0) or self.interval > 3600:
            raise BadInput(f"--interval: {self.interval} must be more than 0 and at most 3600 seconds")
        if self.count < 0:
            raise BadInput(f"--count: {self.count} must be 0 (until Ctrl-C) or more")
        if self.plot is not None and (self.record is not None or self.once):
            raise BadInput("--plot reads a recording; it does not combine with --record or --once")
        if self.out is not None and self.plot is None:
            raise BadInput("--out names the PNG that --plot writes; give --plot FILE.jsonl too")
        if self.json_out and self.record is not None and not self.once:
            raise BadInput("--json prints one snapshot and --record records many: use --record alone, or add --once")

    def png_path(self) -> Path:
        """Where --plot writes: --out, or the recording's name with .png."""
        assert self.plot is not None
        return self.out or self.plot.with_suffix(".png")

    def check_files(self) -> None:
        """The files the run will write, checked before any reading or waiting: gpurig's one rule
        (the folder must exist, a folder is not a file, an existing PNG is replaced only with
        --force). An existing --record file is extended, so only its folder is checked here."""
        if self.plot is not None:
            out = self.png_path()
            check_output_file(str(out), "--out", self.force)
            if out.exists() and self.plot.exists() and out.resolve() == self.plot.resolve():
                raise BadInput(f"--out {out}: is the recording --plot reads; give the PNG another name")
        if self.record is not None:
            check_output_file(str(self.record), "--record", force=True)


# ------------------------------------------------------------------------------------------
# the command


def _verdicts(window: collections.deque | list) -> list[Any]:
    from gpurig.diagnose.verdicts import sample_verdicts

    return sample_verdicts(list(window))


def plot_recording(opts: MonitorOptions, console: Console) -> None:
    from gpurig.monitor.recorder import PLOT_FIELDS, RecordingError, read_recording
    from gpurig.report.plots import monitor_png

    assert opts.plot is not None
    try:
        rec = read_recording(opts.plot, fields=PLOT_FIELDS)
    except RecordingError as exc:
        raise BadInput(f"--plot: {exc}") from None
    out = opts.png_path()
    png = monitor_png(rec.samples, title=f"{opts.plot.name}: {len(rec.samples)} samples")
    if png is None:
        raise BadInput(f"--plot: {opts.plot} has no utilisation, memory or power values to plot")
    check_output_file(str(out), "--out", opts.force)  # again: a file may have appeared while plotting
    write_file_atomic(str(out), png, "--out")
    findings = _verdicts(rec.samples)
    if opts.json_out:
        emit_json({"gpurig_version": __version__, "plot": str(out), "samples": len(rec.samples),
                   "gpus": rec.gpu_indices, "skipped": rec.skipped, "verdicts": [f.to_dict() for f in findings]})
        return
    console.print(f"wrote {out}: {len(rec.samples)} samples of GPU {', '.join(map(str, rec.gpu_indices))}")
    for note in rec.skipped:
        console.print(f"[yellow]note[/yellow]: {note}")
    if findings:
        console.print(verdict_lines(findings))


def run(opts: MonitorOptions, backend: Any = None, console: Console | None = None,
        sleep: Any = time.sleep) -> int:
    """Run the monitor; returns the exit status. `backend` replaces NVML (tests pass a FakeBackend)."""
    from gpurig.monitor.recorder import Recorder, RecordingError

    opts.validate()
    opts.check_files()
    if console is None:
        console = console_for(opts.json_out)
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = 160  # a log file has no width: do not squeeze the table into 80 columns
    if opts.plot is not None:
        plot_recording(opts, console)
        return 0

    # Open the recording first, so a path that cannot be written is a clear error before any waiting.
    recorder = None
    if opts.record is not None:
        try:
            recorder = Recorder(opts.record)
        except RecordingError as exc:
            raise BadInput(f"--record {exc}") from None
        except OSError as exc:
            raise BadInput(f"--record {opts.record}: cannot append to it ({exc.strerror or exc})") from None
        if recorder.dropped_bytes:
            console.print(f"note: --record {opts.record}: its last line was cut off ({recorder.dropped_bytes} bytes, "
                          "a monitor killed while writing it) and was dropped before extending the recording",
                          markup=False, highlight=False, soft_wrap=True)
    try:
        return _watch(opts, backend, console, recorder, sleep)
    finally:
        if recorder is not None:
            recorder.close()


def _watch(opts: MonitorOptions, backend: Any, console: Console, recorder: Any, sleep: Any) -> int:
    from gpurig.monitor.sampler import MonitorUnavailable, Sampler

    sampler = Sampler(backend)
    single = opts.once or opts.json_out
    try:
        sampler.open()
    except MonitorUnavailable as exc:
        line = f"gpurig monitor: no GPU to watch: {exc}"
        if opts.json_out:
            emit_json({"gpurig_version": __version__, "available": False, "reason": str(exc),
                       "sample": None, "verdicts": []})
            return 0
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        if single or opts.count:  # a bounded run (a script, a CI step) must end, not wait for hardware
            return 0
        if not wait_for_gpu(sampler, opts.interval, sleep):
            return 0

    try:
        if single:
            sample = snapshot(sampler, opts.interval, sleep)
            findings = _verdicts([sample])
            if recorder is not None:
                recorder.write(sample)
            if opts.json_out:
                emit_json({"gpurig_version": __version__, "available": True, "reason": None,
                           "sample": sample, "verdicts": [f.to_dict() for f in findings]})
            else:
                console.print(sample_table(sample, findings))
                if findings:
                    console.print(verdict_lines(findings))
            return 0
        return _loop(sampler, opts, console, recorder, sleep)
    finally:
        sampler.close()


def _loop(sampler: Any, opts: MonitorOptions, console: Console, recorder: Any, sleep: Any) -> int:
    """The live view (or one line per sample when stdout is not a terminal), until --count or Ctrl-C."""
    window: collections.deque = collections.deque(maxlen=VERDICT_WINDOW)
    live = None
    if console.is_terminal:
        from rich.live import Live

        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    try:
        for sample in samples_every(sampler, opts.interval, opts.count, sleep):
            if recorder is not None:
                recorder.write(sample)
            window.append(sample)
            findings = _verdicts(window)
            if live is not None:
                footer = Text(f"recording to {opts.record} ({recorder.written} samples)  " if recorder else "",
                              style="dim")
                footer.append("Ctrl-C ends", style="dim")
                live.update(Group(sample_table(sample, findings), verdict_lines(findings), footer), refresh=True)
            else:
                # Plain write, not console.print: rich caches the width of every distinct string it
                # lays out, which grows (up to its cache size) over a long recording.
                console.file.write(compact_line(sample) + "\n")
                console.file.flush()
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
    if recorder is not None:
        console.print(f"recorded {recorder.written} samples to {opts.record}", markup=False, highlight=False)
    return 0


def register(app: typer.Typer) -> None:
    @app.command("monitor", help=HELP)
    def monitor(
        interval: float = typer.Option(1.0, "--interval", "-i", metavar="SECONDS", help="Seconds between samples."),
        once: bool = typer.Option(False, "--once", help="Print one snapshot and exit."),
        json_out: bool = typer.Option(False, "--json", help="Print one snapshot as a JSON document on stdout."),
        record: Path | None = typer.Option(None, "--record", metavar="FILE",
                                           help="Append every sample to FILE as one JSON line (flushed each time). "
                                                "An existing recording is extended, never replaced; a file that is "
                                                "not one is refused. The folder must exist."),
        count: int = typer.Option(0, "--count", "-n", metavar="N",
                                  help="Stop after N samples (default 0: until Ctrl-C)."),
        plot: Path | None = typer.Option(None, "--plot", metavar="FILE.jsonl",
                                         help="Plot a recording: utilisation, memory and power over time."),
        out: Path | None = typer.Option(None, "--out", metavar="PNG",
                                        help="Where --plot writes the PNG (default: the recording's name, .png); "
                                             "the folder must exist."),
        force: bool = typer.Option(False, "--force", help="Replace an existing --out PNG (a --record recording is "
                                                          "extended, never replaced)."),
    ) -> None:
        opts = MonitorOptions(interval=interval, once=once, json_out=json_out, record=record, count=count,
                              plot=plot, out=out, force=force)
        # `kill` (SIGTERM) ends a background recording as cleanly as Ctrl-C does.
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            code = run(opts)
        except KeyboardInterrupt:  # Ctrl-C is the normal way to end the monitor, wherever it lands
            code = 0
        finally:
            signal.signal(signal.SIGTERM, previous)
        if code:
            raise typer.Exit(code)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


