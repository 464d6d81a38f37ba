"""`gpurig burn`: burn-in and silent-data-corruption screening of every GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from gpurig.errors import BadInput
from gpurig.report.output import console_for, emit_json

HELP = """Screen every GPU before a job trusts it: wrong answers without an error, bad memory, throttling, stragglers.

Every visible GPU at once, one worker per GPU: sustained matrix products in bf16, fp16, tf32 and
fp32 whose every result is checked bit for bit (against the first product, and against the other
GPUs of the same model), at least 90% of the free memory written with patterns and read back on
the device, host<->device and GPU<->GPU copies held against their links; NVML watched from here the
whole time (clocks, power, temperature, throttling, ECC, retired pages, remapped rows, PCIe and
NVLink error counters, Xid events). A verdict per GPU: pass, watch or fail, with the evidence and
the next step. Without a GPU it runs small on two CPU processes.

Examples:
  gpurig burn --quick                 about 30 s: each part briefly
  gpurig burn                         3 minutes
  gpurig burn --long --gpus 0,1       15 minutes on GPUs 0 and 1
  gpurig burn --duration 1h --json > burn.json
  gpurig burn --dcgm                  then DCGM's `dcgmi diag -r 2`, in the same verdict

Exit status: 0 no GPU failed (pass or watch), 1 a GPU failed or a worker died, 2 bad usage,
130/143 stopped by Ctrl-C/SIGTERM (the partial result is shown and kept in the run directory).
"""


def _progress_line(event: dict[str, Any]) -> str | None:
    part, rank = event.get("part"), event.get("rank")
    if part == "compute":
        bad = f", {event['mismatches']} WRONG" if event.get("mismatches") else ""
        return f"  rank {rank} compute {event['dtype']}: {event['tflops']:,.3g} TFLOP/s{bad}"
    if part == "memory":
        bad = f", {event['errors']} ERROR(S)" if event.get("errors") else ""
        return (f"  rank {rank} memory: {event['bytes'] / 2**30:,.2f} GiB tested at {event['gbps'] or 0:,.0f} GB/s"
                + bad)
    return None


def render(console: Any, doc: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"gpurig burn: {doc['nproc']} {doc['device']} worker(s), {doc['seconds']:.0f} s")
    dtypes = sorted({d for g in doc["gpus_judged"] for d in g["compute"]})
    cols = ["GPU" if doc["device"] == "cuda" else "worker", "verdict", *[f"{d} TFLOP/s" for d in dtypes], "memory"]
    if doc["device"] == "cuda":
        cols.append("host link GB/s (in/out)")
    for col in cols:
        table.add_column(col, justify="left" if col in ("verdict", "memory") else "right")
    style = {"pass": "green", "watch": "yellow", "fail": "bold red", "incomplete": "dim"}
    for g in doc["gpus_judged"]:
        mem, t = g["memory"], g.get("transfers") or {}
        row = [str(g["index"]), f"[{style[g['verdict']]}]{g['verdict']}[/{style[g['verdict']]}]",
               *[f"{(g['compute'].get(d) or {}).get('tflops') or 0:,.3g}" for d in dtypes],
               f"{(mem.get('bytes_tested') or 0) / 2**30:,.1f} GiB, {mem.get('gbps') or 0:,.0f} GB/s"
               + (f" ({mem['vs_copy']:.0%} of a copy)" if mem.get("vs_copy") else "")]
        if doc["device"] == "cuda":
            row.append(f"{t.get('h2d_gbps') or 0:,.1f} / {t.get('d2h_gbps') or 0:,.1f}"
                       + (f" of {t['host_link']['gbps']:,.1f}" if (t.get("host_link") or {}).get("gbps") else ""))
        table.add_row(*row)
    console.print(table)
    p2p = doc.get("p2p") or {}
    if p2p.get("pairs"):
        worst = min(p2p["pairs"], key=lambda r: r["one_way_gbps"])
        console.print(f"peer copies: {len(p2p['pairs'])} pairs, the slowest {worst['pair']} at "
                      f"{worst['one_way_gbps']:,.0f} GB/s" + (f" ({worst['one_way_efficiency']:.0%} of its "
                      f"{worst['capability']})" if worst.get("one_way_efficiency") else ""), highlight=False)
    dcgm = doc.get("dcgm")
    if dcgm:
        if dcgm.get("error"):
            console.print(f"[yellow]DCGM: {dcgm['error']}[/yellow]", highlight=False)
        else:
            ran = [r for r in dcgm.get("results") or [] if r["status"] not in ("skip", "not run")]
            console.print(f"DCGM {dcgm.get('version') or ''} level {dcgm['level']}: {len(ran)} results, "
                          f"{sum(r['status'] == 'fail' for r in ran)} failed; its output is in dcgm.txt", highlight=False)
    for g in doc["gpus_judged"]:
        for f in g["findings"]:
            color = "bold red" if f["severity"] == "fail" else "yellow"
            console.print(f"[{color}]{f['severity']}[/{color}] {f['title']}", highlight=False)
            console.print(f"  {f['detail']}", highlight=False, markup=False)
            console.print(f"  next: {f['fix']}", highlight=False, markup=False)
    console.print(("[green]no GPU failed[/green]" if doc["passed"] else "[bold red]a GPU failed[/bold red]")
                  + f"; everything is in {doc['run_dir']}/burn.json")


def register(app: typer.Typer) -> None:
    @app.command("burn", help=HELP)
    def burn(
        duration: str | None = typer.Option(None, "--duration", metavar="TIME",
                                            help="How long: 90s, 3m, 1h (default 3m)."),
        quick: bool = typer.Option(False, "--quick", help="About 30 seconds."),
        long: bool = typer.Option(False, "--long", help="15 minutes."),
        gpus: str | None = typer.Option(None, "--gpus", metavar="LIST", help="Only these GPUs, e.g. 0,1."),
        device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
        out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                        help="Run directory (default runs/burn-<time>)."),
        json_out: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
        dcgm: bool = typer.Option(False, "--dcgm", help="Then run NVIDIA DCGM's level-2 diagnostic "
                                  "(`dcgmi diag -r 2`, a few minutes) on the same GPUs and fold its results in."),
    ) -> None:
        from gpurig.burn.run import LEVELS, parse_duration, parse_gpus, run_burn

        if sum(bool(x) for x in (duration, quick, long)) > 1:
            raise BadInput("--duration, --quick and --long each set the length: give one")
        seconds = LEVELS["quick"] if quick else LEVELS["long"] if long else parse_duration(duration)
        chosen = parse_gpus(gpus)
        console = console_for(json_out)

        import threading
        import time

        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        # A bar with the time left on a terminal (the workers' start-up counts as part of the run);
        # one line per finished part either way.
        progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=30), TimeRemainingColumn(),
                            console=console, transient=True, disable=json_out or not console.is_terminal)
        task = progress.add_task("burning", total=seconds)
        done = threading.Event()

        def tick() -> None:
            start = time.monotonic()
            while not done.wait(0.5):
                progress.update(task, completed=min(seconds, time.monotonic() - start))

        def echo(event: dict[str, Any]) -> None:
            line = _progress_line(event)
            if line and not json_out:
                progress.console.print(line, highlight=False)

        if not json_out:
            console.print(f"gpurig burn: {seconds:g} s on every {'chosen ' if chosen else ''}GPU at once, or two CPU workers "
                          "(compute checked bit for bit, memory patterns, transfers; NVML watched)")
        ticker = threading.Thread(target=tick, daemon=True)
        from gpurig.launch.plan import default_run_dir

        run_dir = out or Path(default_run_dir("burn-"))
        with progress:
            ticker.start()
            try:
                doc = run_burn(device=device, gpus=chosen, seconds=seconds, out_dir=run_dir, echo=echo, dcgm=dcgm)
            except KeyboardInterrupt:  # Ctrl-C, and SIGTERM (launch.signals.Stop)
                # Stopped: what was measured so far is judged and shown, then the stop goes on up (130/143).
                kept = run_dir / "burn.json"
                if kept.is_file():
                    partial = json.loads(kept.read_text())
                    if json_out:
                        emit_json({k: v for k, v in partial.items() if k != "nvml_samples"})
                    else:
                        progress.stop()
                        console.print("[yellow]stopped before the end: the partial result[/yellow]")
                        render(console, partial)
                raise
            finally:
                done.set()
                ticker.join(timeout=2)
        if json_out:
            emit_json({k: v for k, v in doc.items() if k != "nvml_samples"})
        else:
            render(console, doc)
        raise typer.Exit(0 if doc["passed"] else 1)
