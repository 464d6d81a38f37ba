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

# Samples kept for the live verdicts: enough to smooth NVML's jumpy utilisation, small enough that
# a view left open for days holds constant memory.
VERDICT_WINDOW = 10


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
# rendering


def _fmt(value: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def _rate_pair(tx: float | None, rx: float | None) -> str:
    """'121/120 GB/s': sent and received in one unit, picked by the larger of the two."""
    if tx is None and rx is None:
        return "n/a"
    top = max(v for v in (tx, rx) if v is not None)
    unit, size = next(((u, z) for u, z in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)) if top >= z), ("B/s", 1.0))

    def one(v: float | None) -> str:
        return "n/a" if v is None else f"{v / size:.0f}" if v / size >= 10 or v == 0 else f"{v / size:.1f}"

    return f"{one(tx)}/{one(rx)} {unit}"


def _gpus_named(findings: list[Any]) -> dict[int, str]:
    """GPU index -> style, for the GPUs a sample verdict singles out."""
    marks: dict[int, str] = {}
    for f in findings:
        ev = f.evidence
        style = "bold red" if f.severity in ("error", "warn") else "yellow"
        if f.id == "gpu-idle":
            for i in ev.get("idle", []):
                marks[i] = style
        elif isinstance(ev.get("gpu"), int):
            marks.setdefault(ev["gpu"], style)
    return marks


_COLUMNS = ("GPU", "util", "memory GiB", "power W", "temp", "SM MHz", "throttle", "PCIe tx/rx", "NVLink tx/rx",
            "processes")
_LEFT = {"throttle", "processes"}


def sample_table(sample: dict[str, Any], findings: list[Any]) -> Text:
    """The per-GPU table of one sample, GPUs named by a verdict highlighted.

    Laid out by hand rather than with rich's Table: the live view redraws it every second, and a
    rich Table costs about ten times as much CPU, which the monitor must not take from the job."""
    marks = _gpus_named(findings)
    names = sorted({g.get("name") or "?" for g in sample["gpus"] if not g.get("error")})
    title = f"{len(sample['gpus'])}x {' / '.join(names) or 'GPU'} at " + time.strftime(
        "%H:%M:%S", time.localtime(sample["time"]))
    rows: list[tuple[list[str], str]] = []
    for g in sample["gpus"]:
        if g.get("error"):
            rows.append(([str(g["index"]), f"cannot be read: {g['error']}"], "bold red"))
            continue
        mem = "n/a"
        if g.get("memory_used_bytes") is not None and g.get("memory_total_bytes"):
            mem = f"{g['memory_used_bytes'] / 2**30:.1f}/{g['memory_total_bytes'] / 2**30:.0f}"
        clock = _fmt(g.get("sm_clock_mhz"), "d")
        if g.get("sm_clock_max_mhz"):
            clock += f"/{g['sm_clock_max_mhz']}"
        reasons = g.get("throttle_reasons")
        throttle = "n/a" if reasons is None else (", ".join(r for r in reasons if r != "gpu_idle") or "-")
        procs = g.get("processes") or []
        proc_text = ", ".join(f"{p.get('name') or '?'}[{p['pid']}]" for p in procs[:2])
        if len(procs) > 2:
            proc_text += f" +{len(procs) - 2}"
        rows.append(([
            str(g["index"]), _fmt(g.get("utilization_pct"), ".0f", "%"), mem,
            f"{_fmt(g.get('power_w'))}/{_fmt(g.get('power_limit_w'))}", _fmt(g.get("temperature_c"), ".0f", " °C"),
            clock, throttle, _rate_pair(g.get("pcie_tx_bytes_per_s"), g.get("pcie_rx_bytes_per_s")),
            _rate_pair(g.get("nvlink_tx_bytes_per_s"), g.get("nvlink_rx_bytes_per_s")), proc_text or "-",
        ], marks.get(g["index"], "")))
    full = [cells for cells, _ in rows if len(cells) == len(_COLUMNS)]
    widths = [max([len(h)] + [len(c[i]) for c in full]) for i, h in enumerate(_COLUMNS)]

    def line(cells: list[str]) -> str:
        if len(cells) < len(_COLUMNS):  # an error row: index, then the message across the columns
            return cells[0].rjust(widths[0]) + "  " + cells[1]
        return "  ".join(c.ljust(w) if h in _LEFT else c.rjust(w)
                         for c, w, h in zip(cells, widths, _COLUMNS, strict=True)).rstrip()

    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(title + "\n", style="bold")
    text.append(line(list(_COLUMNS)) + "\n", style="bold underline")
    for cells, style in rows:
        text.append(line(cells) + "\n", style=style)
    return text


def verdict_lines(findings: list[Any]) -> Text:
    text = Text()
    for f in findings:
        style = {"error": "bold red", "warn": "bold yellow", "info": "cyan", "ok": "green"}[f.severity]
        text.append(f"{f.severity:>5}  ", style=style)
        text.append(f.title + "\n")
        if f.fix:
            text.append(f"       fix: {f.fix}\n", style="dim")
    return text


def compact_line(sample: dict[str, Any]) -> str:
    """One line per sample for logs (stdout is not a terminal)."""
    parts = [time.strftime("%H:%M:%S", time.localtime(sample["time"]))]
    for g in sample["gpus"]:
        if g.get("error"):
            parts.append(f"GPU{g['index']} error")
            continue
        mem = g.get("memory_used_bytes")
        parts.append(f"GPU{g['index']} {_fmt(g.get('utilization_pct'))}% "
                     f"{_fmt(mem / 2**30 if mem is not None else None, '.1f')}GiB "
                     f"{_fmt(g.get('power_w'))}W {_fmt(g.get('temperature_c'))}C {_fmt(g.get('sm_clock_mhz'), 'd')}MHz")
    return " | ".join(parts)


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


def _snapshot(sampler: Any, interval: float, sleep: Any) -> dict[str, Any]:
    """One sample with traffic rates: NVLink and PCIe counters need two readings to give a rate."""
    sampler.sample()
    sleep(min(interval, 0.5))
    return sampler.sample().to_dict()


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
        if not _wait_for_gpu(sampler, opts.interval, sleep):
            return 0

    try:
        if single:
            sample = _snapshot(sampler, opts.interval, sleep)
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


def _wait_for_gpu(sampler: Any, interval: float, sleep: Any) -> bool:
    """Poll until NVML answers with a GPU; False when interrupted (Ctrl-C is a normal way out)."""
    from gpurig.monitor.sampler import MonitorUnavailable

    try:
        while True:
            sleep(max(interval, 2.0))
            try:
                sampler.open()
                return True
            except MonitorUnavailable:
                continue
    except KeyboardInterrupt:
        return False


def _loop(sampler: Any, opts: MonitorOptions, console: Console, recorder: Any, sleep: Any) -> int:
    """Sample every `interval` seconds (on a fixed cadence, not drifting by the sampling time)."""
    window: collections.deque = collections.deque(maxlen=VERDICT_WINDOW)
    live = None
    if console.is_terminal:
        from rich.live import Live

        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    taken = 0
    next_at = time.monotonic()
    try:
        while opts.count == 0 or taken < opts.count:
            sample = sampler.sample().to_dict()
            taken += 1
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
            if opts.count and taken >= opts.count:
                break
            next_at += opts.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow NVML call): skip ahead rather than burst
                next_at = time.monotonic()
                delay = 0
            sleep(delay)
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


