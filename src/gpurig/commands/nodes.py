"""The options of a run across machines, one wording for every command that takes them."""

from __future__ import annotations

import typer

from gpurig.errors import BadInput
from gpurig.launch.nodes import RDZV_PORT, Nodes

NNODES = typer.Option(1, "--nnodes", help="Machines in the run: start the same command on each, with its own "
                      "--node-rank and the same --master-addr.")
NODE_RANK = typer.Option(0, "--node-rank", help="This machine's index, 0 .. nnodes-1.")
MASTER_ADDR = typer.Option(None, "--master-addr", metavar="HOST",
                           help="Address of node 0, where the nodes meet (with --nnodes > 1).")
MASTER_PORT = typer.Option(None, "--master-port", metavar="PORT",
                           help=f"Rendezvous port on node 0 (default {RDZV_PORT}); open it between the machines.")
IFACE = typer.Option(None, "--iface", metavar="NAME",
                     help="Network interface to the other nodes (sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME); "
                          "default: the one on the route to --master-addr.")


def nodes_from(nnodes: int, node_rank: int, master_addr: str | None, master_port: int | None,
               iface: str | None) -> Nodes | None:
    """The checked `Nodes` of a run across machines, or None for one machine (exit 2 on a bad value)."""
    nodes = Nodes(nnodes, node_rank, master_addr, master_port, iface).check()
    if nnodes == 1:
        if master_addr is not None or master_port is not None:
            raise BadInput("--master-addr/--master-port say where the machines of a run meet: give --nnodes 2 or "
                           "more with them (on one machine the run picks a free local port itself)")
        return None
    return nodes


def node_line(node: dict) -> str:
    """What a node other than node 0 prints: the result is printed where rank 0 ran."""
    ranks = node.get("ranks") or []
    span = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}" if ranks else "no rank"
    first = (node.get("hosts") or {}).get("0")
    return (f"node {node.get('node')} of {node.get('nnodes')} ({span} of {node.get('world_size')}): finished; "
            f"the full result is printed on node 0{f' ({first})' if first else ''}, where rank 0 ran")
