"""`gpurig bench comm`: collective and peer-to-peer bandwidth, against what the links allow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpurig.comm.metrics import normalise_dtype, normalise_op, parse_bytes
from gpurig.commands import nodes as node_opts
from gpurig.errors import BadInput
from gpurig.report.output import console_for, emit_json

HELP = """Measure how fast the GPUs talk, against what their links allow.

For each op and message size (min to max, ×4): warm-up calls, then repeated samples of --iters calls
timed between CUDA events; the median sample per rank, averaged over ranks as nccl-tests does.
Reports time, algbw and busbw (nccl-tests definitions: busbw = algbw × 2(n-1)/n for all-reduce,
(n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast), the NCCL settings in force,
and each figure's efficiency against the link from the machine's facts (NVLink count × per-link
speed, or PCIe generation × width). Small messages are timed by replaying a CUDA graph of the loop
(--graph auto: up to 64 MiB), which removes Python and launch overhead. On GPUs it also measures a
peer-to-peer copy matrix, one way and both ways. A link far below its kind is reported as a finding.
On one GPU there is no link between GPUs: it measures the host link (pinned copies each way and
both at once, against the PCIe link's rate) and device memory (a device copy, against the
datasheet's peak) instead.

Defaults: GPU 1 KiB to 1 GiB, 20 iterations × 5 samples after 5 warm-ups, all five ops; CPU (gloo)
1 KiB to 256 KiB, 5 iterations × 3 samples, so it finishes in seconds. The run folder is temporary
(removed after a run that completed) unless --out DIR is given.

Examples:
  gpurig bench comm
  gpurig bench comm --ops allreduce --min-bytes 1MiB --max-bytes 1GiB --json
  gpurig bench comm --device cpu --max-bytes 64KiB
  gpurig bench comm --nnodes 2 --node-rank 0 --master-addr 10.0.0.1    on node0, and the same with
                                                                       --node-rank 1 on node1

Across machines the collectives span every rank of every node: the figures are the network's (the
slowest link of the ring), node 0 prints them, and the peer-to-peer matrix (within one machine) is
left out. The interface is the one on the route to --master-addr unless --iface NAME says otherwise.

Exit status: 0 measured with no finding, 1 a finding (slow link) or a failed run, 2 bad usage.
"""


def _parse_ops(text: str | None) -> list[str] | None:
    if text is None:
        return None
    ops = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        op = normalise_op(item)
        if op is None:
            raise BadInput(f"--ops: unknown op {item!r} (choose from allreduce, allgather, reducescatter, broadcast, alltoall)")
        ops.append(op)
    if not ops:
        raise BadInput("--ops: give at least one op")
    return ops


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def render(console, data: dict[str, Any]) -> None:
    from rich.table import Table

    mem = data.get("memory")
    if mem:
        console.print(f"[bold]gpurig bench comm[/bold]: 1 × {data['device']}; pinned host copies of "
                      f"{mem.get('host_bytes', 0) >> 20} MiB and a device copy of {mem.get('device_bytes', 0) >> 20} MiB, "
                      f"{mem.get('copies')} copies × {mem.get('repeats')} samples after a warm-up")
    else:
        nodes = f"{data['node']['nnodes']} nodes, " if data.get("node") else ""
        console.print(f"[bold]gpurig bench comm[/bold]: {nodes}{data['nproc']} × {data['device']} ({data['backend']}), {data['dtype']}, "
                      f"{data['iters']} calls × {data['repeats']} samples after {data['warmup']} warm-ups")
    nccl = data["nccl"]
    settings = ", ".join(f"{k}={v}" for k, v in nccl["settings"].items()) or "none set (NCCL chooses algorithm and protocol)"
    if data["backend"] == "nccl" and not mem:
        console.print(f"NCCL {nccl['version'] or '?'}; settings: {settings}")
    cap = data["capability"]
    if data.get("memory"):
        render_memory(console, data["memory"])
    elif data["results"] or data["device"] == "cpu":
        if data.get("node") and data["node"].get("network"):
            console.print(data["node"]["network"], markup=False, highlight=False)
        console.print(f"link bounding the collectives: {cap['how']}" + (f" = {cap['gbps']:.0f} GB/s per direction" if cap["gbps"] else ""))
    for op in dict.fromkeys(p["op"] for p in data["results"]):
        table = Table(title=op, title_justify="left")
        for col in ("size", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "of link", "graph"):
            table.add_column(col, justify="right")
        for p in (p for p in data["results"] if p["op"] == op):
            eff = f"{p['efficiency']:.0%}" if p["efficiency"] is not None else "n/a"
            table.add_row(p["size"], f"{p['time_us']:.1f}", _fmt(p["algbw_gbps"], ".3f"), _fmt(p["busbw_gbps"], ".3f"), eff,
                          "yes" if p["graph"] else "no")
        console.print(table)
    if data.get("p2p"):
        table = Table(title=f"peer-to-peer copies, {data['p2p']['bytes'] >> 20} MiB", title_justify="left")
        for col in ("pair", "one way (GB/s)", "both ways (GB/s)", "link", "of link (one way)"):
            table.add_column(col, justify="right")
        for row in data["p2p"]["pairs"]:
            eff = f"{row['one_way_efficiency']:.0%}" if row["one_way_efficiency"] is not None else "n/a"
            table.add_row(row["pair"].replace("->", " → "), f"{row['one_way_gbps']:.1f}", f"{row['bidirectional_gbps']:.1f}",
                          row["capability"], eff)
        console.print(table)
    elif data["device"] == "cpu":
        console.print("peer-to-peer copies: n/a on CPU")
    elif data.get("node"):
        console.print("peer-to-peer copies: left out across machines (run `gpurig bench comm` on one node for them)")
    for f in data["findings"]:
        console.print(f"[yellow]{f['title']}[/yellow]\n  fix: {f['fix']}")
    if data.get("error"):
        console.print(f"[bold red]{data['error']}[/bold red]")
    if data.get("run_dir"):
        console.print(f"run folder: {data['run_dir']}")


def render_memory(console, mem: dict[str, Any]) -> None:
    """One GPU: its host link and its memory, against what they allow."""
    from rich.table import Table

    console.print("One GPU: there is no link between GPUs to measure. Measured instead what a single GPU's "
                  "training depends on: its link to the host and its own memory.")
    host, dev = mem.get("host_link") or {}, mem.get("device_memory") or {}
    table = Table(title=f"GPU 0{' (' + mem['gpu'] + ')' if mem.get('gpu') else ''}", title_justify="left")
    table.add_column("copy", justify="left")
    for col in ("measured (GB/s)", "capability", "of capability"):
        table.add_column(col, justify="right")

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0%}"

    hb = mem.get("host_bytes", 0) >> 20
    host_cap = f"{host['gbps']:.1f} GB/s, {host['how']}" if host.get("gbps") else host.get("how", "n/a")
    if host.get("current") and host.get("how") and host["current"] not in host["how"]:
        host_cap += f" (running at {host['current']})"
    both_cap = f"{2 * host['gbps']:.1f} GB/s, both directions" if host.get("gbps") else "n/a"
    dev_cap = f"{dev['gbps']:.0f} GB/s, {dev['how']}" if dev.get("gbps") else dev.get("how", "n/a")
    table.add_row(f"host → device (pinned, {hb} MiB)", _fmt(mem.get("h2d_gbps"), ".1f"), host_cap, pct(mem.get("h2d_efficiency")))
    table.add_row(f"device → host (pinned, {hb} MiB)", _fmt(mem.get("d2h_gbps"), ".1f"), host_cap, pct(mem.get("d2h_efficiency")))
    table.add_row("both at once", _fmt(mem.get("bidirectional_gbps"), ".1f"), both_cap, pct(mem.get("bidirectional_efficiency")))
    table.add_row("device memory (copy, read + write)", _fmt(mem.get("d2d_gbps"), ".0f"), dev_cap,
                  pct(mem.get("d2d_efficiency")))
    console.print(table)


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("comm", help=HELP)
    def comm(
        device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
        nproc: str = typer.Option("auto", "--nproc-per-node", "--nproc_per_node", "--nproc", help="'auto' (every visible GPU, or 2 on the CPU) or a number. Also spelled --nproc or --nproc_per_node."),
        ops: str | None = typer.Option(None, "--ops", help="Comma-separated ops out of allreduce, allgather, reducescatter, broadcast and alltoall (default: all five), e.g. --ops allreduce,allgather."),
        min_bytes: str | None = typer.Option(None, "--min-bytes", help="Smallest message, e.g. 1KiB (default 1 KiB)."),
        max_bytes: str | None = typer.Option(None, "--max-bytes", help="Largest message, e.g. 1GiB (default 1 GiB on GPU, 256 KiB on CPU)."),
        dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16, float16, int32 or float64."),
        iters: int | None = typer.Option(None, "--iters", help="Calls per timed sample (default 20 on GPU, 5 on CPU)."),
        warmup: int | None = typer.Option(None, "--warmup", help="Untimed calls first (default 5 on GPU, 2 on CPU)."),
        repeats: int | None = typer.Option(None, "--repeats", help="Timed samples per size; the median counts (default 5 / 3)."),
        graph: str = typer.Option("auto", "--graph", help="auto (CUDA graph up to 64 MiB), on, or off."),
        no_p2p: bool = typer.Option(False, "--no-p2p", help="Skip the peer-to-peer copy matrix."),
        short: bool = typer.Option(False, "--short", help="All-reduce at a few sizes only (what `gpurig check` runs)."),
        json_out: bool = typer.Option(False, "--json", help="One JSON document with every data point."),
        out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Keep the run folder under DIR."),
        timeout: float = typer.Option(120.0, "--timeout", metavar="SECONDS", help="How long one timed step may wait before it is a hang."),
        nnodes: int = node_opts.NNODES,
        node_rank: int = node_opts.NODE_RANK,
        master_addr: str | None = node_opts.MASTER_ADDR,
        master_port: int | None = node_opts.MASTER_PORT,
        iface: str | None = node_opts.IFACE,
    ) -> None:
        from gpurig.errors import require_torch

        require_torch("bench comm")
        from gpurig.comm.bench import run_bench_comm

        dt = normalise_dtype(dtype)
        if dt is None:
            raise BadInput(f"--dtype: unknown type {dtype!r} (choose from float32, bfloat16, float16, int32, float64)")
        try:
            lo = parse_bytes(min_bytes, "--min-bytes") if min_bytes is not None else None
            hi = parse_bytes(max_bytes, "--max-bytes") if max_bytes is not None else None
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        if timeout <= 0:
            raise BadInput(f"--timeout must be a positive number of seconds, got {timeout:g}")
        nodes = node_opts.nodes_from(nnodes, node_rank, master_addr, master_port, iface)
        console = console_for(json_out)
        with console.status("starting the workers...") as status:
            if nodes is not None:
                status.update(f"bench comm: node {nodes.node_rank} of {nodes.nnodes}, waiting at {nodes.endpoint} "
                              "until every node has joined")
            data = run_bench_comm(
                device=device, nproc=nproc, ops=_parse_ops(ops), min_bytes=lo, max_bytes=hi, dtype=dt,
                iters=iters, warmup=warmup, repeats=repeats, graph=graph, p2p=not no_p2p, out_dir=out,
                timeout=timeout, short=short, echo=lambda line: status.update(f"bench comm: {line}"), nodes=nodes,
            )
        if json_out:
            emit_json(data)
        elif data.get("node") and data["node"].get("node") not in (0, None):
            state = "[green]measured[/green]" if data["ok"] else f"[bold red]failed[/bold red]: {data.get('error')}"
            console.print(f"{node_opts.node_line(data['node'])}: {state}")
        else:
            render(console, data)
        raise typer.Exit(0 if data["ok"] and not data["findings"] else 1)
