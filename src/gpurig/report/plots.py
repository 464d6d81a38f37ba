"""Plots as PNG bytes (matplotlib, Agg, no pyplot state): monitor recordings, bandwidth, scaling.

Each function takes the plain data a command produced and returns the PNG file's bytes, or None
when there is nothing to draw. Figures are built on `matplotlib.figure.Figure` directly, so no
display and no global figure registry are involved (safe in threads and in a headless CLI).
"""

from __future__ import annotations

import io
import math
from typing import Any

from matplotlib.figure import Figure

_GIB = 2**30


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _series(samples: list[dict[str, Any]], key: str, scale: float = 1.0) -> dict[int, tuple[list[float], list[float]]]:
    """Per GPU: (seconds since the first sample, value) for samples where the value is present."""
    if not samples:
        return {}
    t0 = samples[0]["time"]
    out: dict[int, tuple[list[float], list[float]]] = {}
    for s in samples:
        for g in s.get("gpus", []):
            v = g.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                xs, ys = out.setdefault(g["index"], ([], []))
                xs.append(s["time"] - t0)
                ys.append(v * scale)
    return out


def monitor_png(samples: list[dict[str, Any]], title: str = "GPU activity") -> bytes | None:
    """Utilisation, memory and power over time, one line per GPU (a `gpurig monitor --record` file)."""
    return _over_time(samples, title, [("utilization_pct", 1.0, "utilisation (%)"),
                                       ("memory_used_bytes", 1 / _GIB, "memory used (GiB)"),
                                       ("power_w", 1.0, "power (W)")])


def burn_png(samples: list[dict[str, Any]], title: str = "GPUs during the burn-in") -> bytes | None:
    """SM clock, power and temperature over time, one line per GPU: what `gpurig burn` judges them by."""
    return _over_time(samples, title, [("sm_clock_mhz", 1.0, "SM clock (MHz)"), ("power_w", 1.0, "power (W)"),
                                       ("temperature_c", 1.0, "temperature (°C)")])


def _over_time(samples: list[dict[str, Any]], title: str, panels: list[tuple[str, float, str]]) -> bytes | None:
    """One panel per (key, scale, label), one line per GPU; a power panel gets each GPU's limit dashed,
    a memory panel the total dotted, a utilisation panel 0-100."""
    series = [_series(samples, key, scale) for key, scale, _ in panels]
    if not any(series):
        return None
    fig = Figure(figsize=(11, 8))
    axes = fig.subplots(len(panels), 1, sharex=True)
    colors: dict[int, Any] = {}
    for ax, data, (key, _, label) in zip(axes, series, panels, strict=True):
        for index, (xs, ys) in sorted(data.items()):
            (line,) = ax.plot(xs, ys, label=f"GPU {index}", color=colors.get(index))
            colors.setdefault(index, line.get_color())
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if not data:
            ax.text(0.5, 0.5, "not reported", transform=ax.transAxes, ha="center", va="center", color="gray")
        if key == "utilization_pct":
            ax.set_ylim(-2, 102)
        else:
            ax.set_ylim(bottom=0)  # from zero, so an idle GPU's few watts and GiB read as small
        if key == "memory_used_bytes":
            totals = [g.get("memory_total_bytes") for s in samples for g in s.get("gpus", []) if g.get("memory_total_bytes")]
            if totals:
                ax.axhline(max(totals) / _GIB, color="gray", linestyle=":", linewidth=1, label="memory total")
        if key == "power_w":
            for index, (xs, ys) in sorted(_series(samples, "power_limit_w").items()):
                ax.plot(xs, ys, linestyle="--", linewidth=1, color=colors.get(index), alpha=0.7, label=f"GPU {index} limit")
        if key == "sm_clock_mhz":
            for index, (xs, ys) in sorted(_series(samples, "sm_clock_max_mhz").items()):
                ax.plot(xs, ys, linestyle=":", linewidth=1, color=colors.get(index), alpha=0.7, label=f"GPU {index} maximum")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:  # outside the axes: a busy GPU's line sits at the top
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0)
    axes[-1].set_xlabel("seconds since the first sample")
    fig.suptitle(title)
    fig.tight_layout()
    return _png(fig)


def _size_label(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n:.0f} B"


def wants_log_scale(values: list[float]) -> bool:
    """Whether bandwidths span more than two decades: small messages reach a thousandth of the
    large ones, and on a linear axis they all sit on zero."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > 100


def bandwidth_png(bench_comm: dict[str, Any]) -> bytes | None:
    """Bus bandwidth against message size, one line per collective, with the link's capability."""
    by_op: dict[str, list[tuple[float, float]]] = {}
    for r in bench_comm.get("results") or []:
        size, bw = r.get("bytes"), r.get("busbw_gbps")
        if isinstance(size, (int, float)) and isinstance(bw, (int, float)) and size > 0:
            by_op.setdefault(str(r.get("op", "?")), []).append((float(size), float(bw)))
    if not by_op:
        return None
    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    sizes: set[float] = set()
    for op, points in sorted(by_op.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{op} busbw")
        sizes.update(p[0] for p in points)
    cap = bench_comm.get("link_capability_gbps")
    if cap is None and isinstance(bench_comm.get("capability"), dict):
        cap = bench_comm["capability"].get("gbps")  # the form `gpurig bench comm --json` writes
    if isinstance(cap, (int, float)) and cap > 0:
        ax.axhline(cap, color="crimson", linestyle="--", label=f"link capability {cap:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ticks = sorted(sizes)
    if len(ticks) > 10:
        step = math.ceil(len(ticks) / 10)
        ticks = ticks[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([_size_label(t) for t in ticks], rotation=30, ha="right")
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    if wants_log_scale([p[1] for points in by_op.values() for p in points]):
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    ax.set_title("Collective bandwidth against message size")
    fig.tight_layout()
    return _png(fig)


def scaling_png(bench_train: dict[str, Any]) -> bytes | None:
    """Training throughput against the number of processes, beside perfect linear scaling."""
    rows = []
    for r in bench_train.get("results") or []:
        n, per = r.get("nproc"), r.get("samples_per_s_per_device")
        if isinstance(n, int) and n > 0 and isinstance(per, (int, float)):
            rows.append((n, float(per), r.get("scaling_efficiency")))
    if not rows:
        return None
    rows.sort()
    fig = Figure(figsize=(9, 4.5))
    left, right = fig.subplots(1, 2)
    ns = [r[0] for r in rows]
    totals = [r[0] * r[1] for r in rows]
    left.plot(ns, totals, marker="o", label="measured")
    base_n, base_per = rows[0][0], rows[0][1]
    left.plot(ns, [n * base_per for n in ns], linestyle="--", color="gray",
              label=f"linear from {base_n} process{'es' if base_n > 1 else ''}")
    left.set_xticks(ns)
    left.set_xlabel("processes")
    left.set_ylabel("samples/s (all processes)")
    left.set_ylim(bottom=0)
    left.grid(True, alpha=0.3)
    left.legend(fontsize="small")
    effs = [(n, e) for n, _, e in rows if isinstance(e, (int, float))]
    if effs:
        right.bar([str(n) for n, _ in effs], [100 * e for _, e in effs], color="tab:green")
        right.axhline(100, color="gray", linestyle="--", linewidth=1)
        for i, (_, e) in enumerate(effs):
            right.text(i, 100 * e, f"{100 * e:.0f}%", ha="center", va="bottom", fontsize="small")
        right.set_ylim(0, max(110, max(100 * e for _, e in effs) + 10))
    else:
        right.text(0.5, 0.5, "not measured", transform=right.transAxes, ha="center", va="center", color="gray")
    right.set_xlabel("processes")
    right.set_ylabel("scaling efficiency (%)")
    workload = bench_train.get("workload")
    fig.suptitle(f"Training throughput and scaling{f' ({workload})' if workload else ''}")
    fig.tight_layout()
    return _png(fig)
