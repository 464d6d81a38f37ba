"""What `gpurig monitor` shows: the per-GPU table of a sample, the verdict lines under it, and the
one-line form for logs. Laid out by hand: the live view redraws every second and must cost the
training it watches next to nothing."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text


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
