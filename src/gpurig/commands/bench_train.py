"""`gpurig bench train`: training throughput at 1, 2, ... N processes, scaling efficiency, vs the DDP tutorial template."""

from __future__ import annotations

from pathlib import Path

import typer

from gpurig.report.output import console_for, emit_json

HELP = """Train the same workload on 1, 2, 4 ... N GPUs and print throughput per GPU and scaling efficiency.

Scaling efficiency = (per-GPU rate at N) / (per-GPU rate at 1); 1.00 is perfect. With
[bold]--baseline seed[/bold] the common DDP tutorial template (fp32, default DataLoader, batch 32) runs the same
model and image size at each count, side by side, so you see what gpurig's defaults buy.

On GPUs the table also gives the slowest GPU's mean SM clock during the timed steps (NVML). The
ranks wait for each other every step, so a GPU that holds a lower clock at its power limit sets
the pace of all of them; when that explains lost scaling, a note says so, and says whether NVLink
stayed out of its low-power state (at a power limit, awake links take power from the SMs' clock).

Workloads: resnet50 (synthetic 224x224, batch 256/GPU; the default on GPUs), resnet50-cifar (32x32,
batch 512/GPU), gpt (124M decoder, tokens/s and MFU), cpu-cnn (the default on the CPU), demo.

Exit status: 0 measured, 1 a run failed, 2 bad usage.

Examples:
  gpurig bench train                               # every visible GPU, ResNet-50
  gpurig bench train --baseline seed --steps 100
  gpurig bench train --device cpu --workload demo --json
"""


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("train", help=HELP)
    def bench_train(
        workload: str | None = typer.Option(None, "--workload", help="resnet50, resnet50-cifar, gpt, cpu-cnn or demo."),
        nproc: str = typer.Option("auto", "--nproc-per-node", "--nproc_per_node", "--nproc", help="Largest process count: auto (every GPU, or 2 on the CPU) or N. Also spelled --nproc or --nproc_per_node."),
        device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
        steps: int | None = typer.Option(None, "--steps", min=10, help="Optimizer steps per run (default: the workload's)."),
        sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Config override for every run (repeatable)."),
        baseline: str | None = typer.Option(None, "--baseline", help="seed: also run the DDP tutorial template."),
        out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Where runs go (default: runs/bench-train-<time>)."),
        max_time: float | None = typer.Option(None, "--max-time", metavar="SECONDS", help="Wall-clock seconds allowed per run (default: no limit)."),
        timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS", help="How long one collective may wait for the other ranks before the run is stopped as hung (default 600)."),
        json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON document on stdout."),
    ) -> None:
        from gpurig.errors import require_torch

        require_torch("bench train")
        from gpurig.train.bench import run_bench_train

        console = console_for(json_out)

        def on_event(kind: str, p: dict) -> None:
            if kind == "bench":
                console.print(f"  running {p['variant']} on {p['nproc']} process(es)...")

        overrides = list(sets) + ([f"train.steps={steps}"] if steps else [])
        result = run_bench_train(device=device, nproc=nproc, out_dir=str(out) if out else None, workload=workload,
                                 overrides=overrides, baseline=baseline, timeout=max_time, on_event=on_event,
                                 collective_timeout=timeout)
        if result.get("summary"):
            from gpurig.commands.train import attach_verdicts

            attach_verdicts(result["summary"])
        if json_out:
            emit_json(result)
            return
        from rich.table import Table

        unit = result.get("unit") or "samples"
        t = Table(title=f"{result['workload_doc']} on {result['device']}", title_justify="left")
        t.add_column("processes", justify="right")
        t.add_column(f"{unit}/s per device", justify="right")
        several = len(result["results"]) > 1  # one process count (one GPU): no scaling to show
        if several:
            t.add_column("scaling", justify="right")
        t.add_column("data wait", justify="right")
        t.add_column("exposed comm", justify="right")
        if baseline:
            t.add_column("seed template /device", justify="right")
            t.add_column("x seed", justify="right")
        clocks = any(r.get("gpu_clock") for r in result["results"])
        if clocks:
            t.add_column("slowest GPU clock", justify="right")

        def pct(v):
            return f"{v:.1%}" if isinstance(v, (int, float)) else "n/a"

        for r in result["results"]:
            st = r.get("step_time") or {}
            per = r.get("units_per_s_per_device") or r.get("samples_per_s_per_device")
            row = [str(r["nproc"]), f"{per:,.0f}" if per else "n/a"]
            if several:
                row.append(f"{r['scaling_efficiency']:.3f}" if r.get("scaling_efficiency") else "n/a")
            row += [pct(st.get("data_wait_fraction")), pct(st.get("comm_exposed_fraction"))]
            if baseline:
                seed = r.get("seed_samples_per_s_per_device")
                row += [f"{seed:,.0f}" if seed else "failed", f"{r['speedup_vs_seed']:.2f}" if r.get("speedup_vs_seed") else "n/a"]
            if clocks:
                row.append(clock_cell(r.get("gpu_clock")))
            t.add_row(*row)
        console.print(t)
        for f in result.get("scaling_findings") or []:
            colour = "cyan" if f.get("severity") == "info" else "yellow"
            console.print(f"[{colour}]{f['title']}[/{colour}]: {f['detail']}")
        s = result.get("summary") or {}
        if s.get("verdicts"):
            console.print(f"step-time verdict at {s.get('world_size')} processes: {s['verdicts'][0].get('title')}")
        console.print(f"results: {Path(result['out_dir']) / 'bench-train.json'}")


def clock_cell(c: dict | None) -> str:
    """'1,800 MHz, power cap 100%' for the slowest GPU of a run; n/a without NVML."""
    if not c or not c.get("slowest_sm_clock_mhz"):
        return "n/a"
    capped = c.get("slowest_power_capped_fraction")
    return f"{c['slowest_sm_clock_mhz']:,.0f} MHz" + (f", power cap {capped:.0%}" if capped else "")
