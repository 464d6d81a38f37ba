"""`gpurig verify`: prove that the GPUs exchange data correctly and that DDP replicas stay in sync."""

from __future__ import annotations

from pathlib import Path

import typer

from gpurig.comm.results import VerifyResult
from gpurig.commands import nodes as node_opts
from gpurig.errors import BadInput
from gpurig.report.output import console_for, emit_json

HELP = """Prove that the GPUs exchange data correctly and that data-parallel training stays in sync.

Starts one worker per GPU through torch.distributed.run (NCCL), or two gloo workers on the CPU, and
runs, each collective under a time limit:

  collectives  all-reduce (sum, max), all-gather, reduce-scatter, broadcast, all-to-all on random
               integer-valued tensors, exact in float32, bfloat16 and int32, odd sizes up to 400 MB
  p2p          random bytes copied between every ordered GPU pair, checksums compared on both sides
  ddp          K DDP steps on N ranks == one process on the whole batch; replicas bit-identical;
               uneven inputs finish under torch.distributed.algorithms.Join
  transport    which transport NCCL really uses per pair (its INFO log), held against NVLink/PCIe

A collective that waits longer than --timeout is reported as a hang naming the check, the op and the
ranks that never arrived; every worker is stopped.

Defaults: --device auto (CUDA when a GPU is usable, else CPU), --nproc auto (every visible GPU, or 2
on the CPU), --timeout 60 s per collective; the run folder (per-rank results, progress files, NCCL
logs) is temporary and removed after a passing run, kept after a failing one (the output says where),
and always kept under --out DIR.

Examples:
  gpurig verify
  gpurig verify --device cpu --json
  gpurig verify --nproc 2 --out runs/        keep the run folder (NCCL log, per-rank results)
  gpurig verify --nnodes 2 --node-rank 0 --master-addr 10.0.0.1     on node0 (10.0.0.1), and on node1:
  gpurig verify --nnodes 2 --node-rank 1 --master-addr 10.0.0.1     every check across both machines

Across machines every node runs the same command; the checks span every rank of every node, and
node 0 (where rank 0 runs) prints the result. The network interface is the one on the route to
--master-addr unless --iface NAME (or your GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME) says otherwise.

Exit status: 0 every check passed, 1 a check failed, 2 bad usage.
"""

_MARK = {"pass": "[green]pass[/green]", "fail": "[bold red]FAIL[/bold red]", "n/a": "[dim]n/a[/dim]", "not run": "[yellow]not run[/yellow]"}


def verify_document(result: VerifyResult) -> dict:
    return result.to_dict()


def render(console, result: VerifyResult) -> None:
    from rich.table import Table

    nodes = f"{result.node['nnodes']} nodes, " if result.node else ""
    table = Table(title=f"gpurig verify: {nodes}{result.nproc} × {result.device} ({result.backend})", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    table.add_column("seconds", justify="right")
    table.add_column("detail", overflow="fold")
    for c in result.checks:
        secs = f"{c.seconds:.1f}" if c.seconds is not None else "-"
        table.add_row(c.name, _MARK.get(c.status, c.status), secs, c.detail)
    console.print(table)
    if result.node and result.node.get("network"):
        console.print(result.node["network"], markup=False, highlight=False)
    for f in result.findings:
        console.print(f"[bold red]{f['title']}[/bold red]\n  fix: {f['fix']}")
    verdict = "[green]all checks passed[/green]" if result.passed else "[bold red]verification failed[/bold red]"
    where = (f"run folder: {result.run_dir}" if result.run_dir
             else "the temporary run folder was removed (--out DIR keeps per-rank results and NCCL logs)")
    console.print(f"{verdict} in {result.seconds:.1f} s; {where}")


def register(app: typer.Typer) -> None:
    @app.command("verify", help=HELP)
    def verify(
        device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
        nproc: str = typer.Option("auto", "--nproc-per-node", "--nproc_per_node", "--nproc", help="Processes: 'auto' (every visible GPU, or 2 on the CPU) or a number. Also spelled --nproc or --nproc_per_node."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: {"passed", "checks": [...], "transport": {...}}.'),
        out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Keep the run folder (logs, per-rank results) under DIR."),
        timeout: float = typer.Option(60.0, "--timeout", metavar="SECONDS", help="How long one collective may wait before it is a hang."),
        quick: bool = typer.Option(False, "--quick", help="Largest GPU message 64 MB instead of 400 MB."),
        framework: str = typer.Option("torch", "--framework", help="torch (DDP over torchrun) or tf "
                                      "(MirroredStrategy replicas equal and equal to one device)."),
        nnodes: int = node_opts.NNODES,
        node_rank: int = node_opts.NODE_RANK,
        master_addr: str | None = node_opts.MASTER_ADDR,
        master_port: int | None = node_opts.MASTER_PORT,
        iface: str | None = node_opts.IFACE,
    ) -> None:
        from gpurig.comm.verify import run_verify
        from gpurig.errors import require_torch

        if framework not in ("torch", "tf"):
            raise BadInput(f"--framework must be torch or tf, got {framework!r}")
        nodes = node_opts.nodes_from(nnodes, node_rank, master_addr, master_port, iface)
        if nodes is not None and framework == "tf":
            raise BadInput("--nnodes/--master-addr: verify across machines runs PyTorch workers (--framework torch)")
        if framework == "torch":
            require_torch("verify")
        console = console_for(json_out)
        with console.status("starting the workers...") as status:
            if framework == "tf":
                from gpurig.comm.tf_verify import as_verify_result, run_tf_verify
                from gpurig.launch.plan import parse_nproc

                # --timeout bounds one collective for torch; TensorFlow's run is bounded as a whole.
                result = as_verify_result(run_tf_verify(
                    device=device, replicas=parse_nproc(nproc), out_dir=out,
                    echo=lambda line: status.update(f"verify: {line}"),
                ))
            else:
                if nodes is not None:
                    status.update(f"verify: node {nodes.node_rank} of {nodes.nnodes}, waiting at {nodes.endpoint} "
                                  "until every node has joined")
                result = run_verify(
                    device=device, nproc=nproc, out_dir=out, timeout=timeout, quick=quick, nodes=nodes,
                    echo=lambda line: status.update(f"verify: {line}"),
                )
        if json_out:
            emit_json(verify_document(result))
        elif result.node and result.node.get("node") not in (0, None):
            verdict = "[green]every check passed[/green]" if result.passed else "[bold red]verification failed[/bold red]"
            console.print(f"{node_opts.node_line(result.node)}: {verdict}")
        else:
            render(console, result)
        raise typer.Exit(0 if result.passed else 1)
