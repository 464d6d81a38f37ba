"""Runs across machines: where the nodes meet, and which network each node reaches the others through.

    from gpurig.launch.nodes import Nodes, interface_env
    nodes = Nodes(nnodes=2, node_rank=1, master_addr="10.0.0.1").check()
    net = interface_env(nodes.master_addr)   # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, --local-addr, is_host

torchrun does the rendezvous; this only chooses what it is told.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpurig.errors import BadInput


def node_range(value: str | int) -> tuple[int, int]:
    """`--nnodes` as torchrun takes it: "2" -> (2, 2), "1:4" -> (1, 4); BadInput naming the flag."""
    text = str(value).strip()
    try:
        nums = [int(p) for p in text.split(":")]
    except ValueError:
        raise BadInput(f"--nnodes must be N or MIN:MAX, got {value!r}") from None
    if len(nums) == 1 and nums[0] < 1:
        raise BadInput(f"--nnodes: must be at least 1, got {nums[0]}")  # check_nodes' words
    if len(nums) > 2 or any(n < 1 for n in nums) or (len(nums) == 2 and nums[0] > nums[1]):
        raise BadInput(f"--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got {value!r}")
    return nums[0], nums[-1]


def check_nodes(nnodes: int, node_rank: int, nnodes_text: str | None = None) -> None:
    """--nnodes and --node-rank, checked the same way by every command (one wording)."""
    if nnodes < 1:
        raise BadInput(f"--nnodes: must be at least 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise BadInput(f"--node-rank: {node_rank} is outside 0..{nnodes - 1} (--nnodes {nnodes_text or nnodes})")


SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
RDZV_PORT = 29400  # the c10d rendezvous port across machines when --master-port is not given


@dataclass
class Network:
    """How one node of a run across machines reaches the others."""

    env: dict[str, str]  # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to set
    note: str | None  # why, for the plan's notes
    is_host: bool | None = None  # this machine holds --master-addr: it hosts the rendezvous store
    local_addr: str | None = None  # this machine's address on that network, for torchrun's --local-addr


def interface_env(master_addr: str, iface: str | None = None,
                  environ: dict[str, str] | None = None) -> Network:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for a run across machines, and a note saying why.

    gloo and NCCL otherwise pick an interface by themselves (gloo: the address the host name
    resolves to; NCCL: the first that is not loopback or docker), which on a machine with several
    networks is often one the other nodes cannot reach. `iface` (--iface) names it; without it a
    variable the user set is kept, and the one missing is the interface on this host's route to
    `master_addr` (the interface holding it on the master itself). NCCL gets `=NAME`: that exact
    interface, not every name starting with NAME.

    `is_host`: whether this machine holds `master_addr`; `local_addr`: this machine's address on the
    chosen network. torchrun guesses both from the host name, which on many machines resolves to
    another address (127.0.1.1, another network): then no node starts the rendezvous store, or the
    workers are told to meet at an address the other nodes cannot reach, and every node waits.
    """
    from gpurig.probe.network import interfaces, route_interface

    environ = os.environ if environ is None else environ
    route = route_interface(master_addr)
    loopback = route.interface == "lo" or (route.destination or "").startswith("127.")
    is_host = None if loopback or route.interface is None else bool(route.local)
    local_addr = None if loopback else route.source
    if iface is not None:
        ifaces = interfaces()
        named = next((i for i in ifaces if i.name == iface), None)
        if ifaces and named is None:
            raise BadInput(f"--iface {iface}: no interface of that name on this host "
                           f"(it has {', '.join(i.name for i in ifaces)})")
        if named is not None and named.ipv4:
            local_addr = named.ipv4[0].split("/")[0]
        return Network({"GLOO_SOCKET_IFNAME": iface, "NCCL_SOCKET_IFNAME": f"={iface}"},
                       f"network interface {iface} (--iface): GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME=\"={iface}\"",
                       is_host, local_addr)
    missing = [v for v in SOCKET_IFNAME_VARS if not environ.get(v)]
    yours = [f"{v}={environ[v]}" for v in SOCKET_IFNAME_VARS if environ.get(v)]
    if not missing:
        return Network({}, f"network interface as you set it: {' '.join(yours)}", is_host, local_addr)
    if route.interface is None:
        return Network({}, f"network interface: left to gloo/NCCL ({route.reason}); give --iface NAME if the nodes "
                           "cannot reach each other")
    if loopback:
        return Network({}, None)  # every node on this machine: loopback is right
    chosen = {"GLOO_SOCKET_IFNAME": route.interface, "NCCL_SOCKET_IFNAME": f"={route.interface}"}
    env = {v: chosen[v] for v in missing}
    where = f"this machine's {master_addr}" if route.local else f"the route to {master_addr}"
    shown = " ".join(f'{k}="{v}"' if v.startswith("=") else f"{k}={v}" for k, v in env.items())
    return Network(env, f"network interface {route.interface} ({where}): {shown}"
                   + (f", yours kept: {' '.join(yours)}" if yours else "")
                   + " (--iface NAME chooses another)", is_host, local_addr)


@dataclass
class Nodes:
    """A run across machines: this node's place and where every node meets (`--nnodes` etc.)."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    iface: str | None = None

    def check(self) -> Nodes:
        check_nodes(self.nnodes, self.node_rank)
        if self.nnodes > 1 and not self.master_addr:
            raise BadInput(f"--nnodes {self.nnodes} needs --master-addr HOST: the address of node 0, the same on "
                           "every node")
        if self.master_addr is not None and not self.master_addr.strip():
            raise BadInput("--master-addr: give a host name or an address, got an empty value")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise BadInput(f"--master-port must be between 1 and 65535, got {self.master_port}")
        if self.iface is not None and self.nnodes == 1:
            raise BadInput("--iface chooses the network between machines: it needs --nnodes 2 or more")
        return self

    @property
    def endpoint(self) -> str:
        return f"{self.master_addr}:{self.master_port or RDZV_PORT}"
