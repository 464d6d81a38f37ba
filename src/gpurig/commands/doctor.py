"""`gpurig doctor`: is this machine ready for multi-GPU training, and if not, what exactly to type."""

from __future__ import annotations

from pathlib import Path

import typer

from gpurig.diagnose.findings import has_error
from gpurig.errors import BadInput, check_output_file
from gpurig.launch.nodes import RDZV_PORT
from gpurig.report.output import console_for, emit_json
from gpurig.suite.doctor import doctor_data, doctor_document, gather, gather_network

HELP = """Check that this machine (or container) is ready for multi-GPU training, and say how to fix what is not.

Reads the GPUs (NVML or nvidia-smi), links, driver, PyTorch/TensorFlow builds, container limits and
environment, without ever initialising CUDA, then prints findings worst first, each with its fix.
PyTorch and TensorFlow are imported in child processes once; their answers are kept (in
~/.cache/gpurig) until a package, the driver, the GPUs or the environment changes, so the next
doctor answers in about a second. --refresh probes them again.

With --master-addr (run it on each node of a multi-node job) the doctor also checks the way to the
rendezvous: that node 0's port answers (refused, or silently dropped by a firewall, are errors with
the fix), the interface this node reaches the master through, and that NCCL_SOCKET_IFNAME /
GLOO_SOCKET_IFNAME name an interface that exists here and is the one on that route. It opens one
TCP connection to the port and closes it; it takes a few seconds at most.

Examples:
  gpurig doctor                        judge this machine
  gpurig doctor --json > doctor.json   facts and findings as JSON
  gpurig doctor --save-facts rig.json  keep the snapshot to share
  gpurig doctor --facts rig.json       judge a saved snapshot
  gpurig doctor --refresh              import the frameworks again (after fixing something)
  gpurig doctor --master-addr node0    on every other node: can it reach node 0's rendezvous (port 29400)?
  gpurig doctor --master-addr 10.0.0.1 --master-port 29500 --json   torchrun --master-port's default, as JSON

Exit status: 0 no error finding, 1 at least one error finding, 2 bad usage or an unreadable facts file.
"""


def register(app: typer.Typer) -> None:
    @app.command("doctor", help=HELP)
    def doctor(
        json_out: bool = typer.Option(
            False, "--json", help="Print one JSON document {facts, findings} on stdout (and network, with --master-addr)."
        ),
        save_facts: Path | None = typer.Option(
            None, "--save-facts", metavar="FILE",
            help="Write the machine's facts snapshot to FILE (JSON); its folder must exist, and an existing "
                 "FILE is replaced only with --force.",
        ),
        facts_file: Path | None = typer.Option(
            None, "--facts", metavar="FILE", help="Judge a saved snapshot instead of this machine."
        ),
        fast: bool = typer.Option(
            False, "--fast", help="Never import PyTorch/TensorFlow: use their cached answers if any, else read "
                                  "their versions from their files (answers in well under a second)."
        ),
        refresh: bool = typer.Option(
            False, "--refresh", help="Probe PyTorch and TensorFlow again instead of using their cached answers "
                                     "(kept until a package, the driver, the GPUs or the environment changes)."
        ),
        force: bool = typer.Option(False, "--force", help="Replace an existing --save-facts file."),
        master_addr: str | None = typer.Option(
            None, "--master-addr", metavar="HOST",
            help="Node 0's address (hostname or IP), as given to torchrun: check that its rendezvous port "
                 "answers from here, the interface on the route to it, and NCCL_/GLOO_SOCKET_IFNAME.",
        ),
        master_port: int | None = typer.Option(
            None, "--master-port", metavar="PORT",
            help="The rendezvous port on node 0 (default 29400: gpurig train/verify/bench across machines and "
                 "torchrun --rdzv-endpoint; torchrun --master-port's is 29500); needs --master-addr.",
        ),
    ) -> None:
        if save_facts is not None:
            # Before probing: a file that would not be replaced (or a missing folder) costs nothing.
            check_output_file(str(save_facts), "--save-facts", force)
        if facts_file is not None and refresh:
            raise BadInput("--refresh probes this machine; it cannot be used with --facts FILE")
        master = _check_master(master_addr, master_port, facts_file)
        facts = gather(facts_file, frameworks=not fast, use_cache=True, refresh=refresh)
        if save_facts is not None:
            from gpurig.probe.snapshot import save_facts_file

            save_facts_file(facts, save_facts, force=force)
        network = gather_network(*master) if master is not None else None
        facts, findings = doctor_data(facts, network)
        if json_out:
            emit_json(doctor_document(facts, findings, network))
        else:
            from gpurig.report.terminal import render_doctor

            console = console_for(False)
            render_doctor(console, facts, findings)
            if save_facts is not None:
                console.print(f"facts saved to {save_facts}")
        raise typer.Exit(1 if has_error(findings) else 0)


def _check_master(addr: str | None, port: int | None, facts_file: Path | None) -> tuple[str, int] | None:
    """(host, port) to probe, None without --master-addr; bad values are `BadInput` naming the flag."""
    if addr is None:
        if port is not None:
            raise BadInput("--master-port: needs --master-addr HOST (the address of node 0)")
        return None
    if facts_file is not None:
        raise BadInput("--master-addr probes this machine's network; it cannot be used with --facts FILE")
    host = addr.strip()
    if not host:
        raise BadInput("--master-addr: empty; give node 0's hostname or IP address")
    if any(c.isspace() for c in host) or "/" in host:
        raise BadInput(f"--master-addr {addr!r}: not a hostname or IP address")
    if ":" in host.strip("[]"):
        import ipaddress

        try:
            ipaddress.IPv6Address(host.strip("[]"))
        except ValueError:
            raise BadInput(f"--master-addr {addr}: give the host alone and the port with --master-port "
                           "(e.g. --master-addr node0 --master-port 29400)") from None
    port = RDZV_PORT if port is None else port
    if not 1 <= port <= 65535:
        raise BadInput(f"--master-port {port}: not a TCP port (1-65535)")
    return host, port
