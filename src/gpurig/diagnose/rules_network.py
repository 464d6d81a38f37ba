"""Doctor rules about reaching a multi-node rendezvous: the master's port and the interface variables.

They judge the `RendezvousFacts` that `gpurig doctor --master-addr HOST` gathers (see
`gpurig.probe.network`), with no I/O: a rule is `RendezvousFacts -> list[Finding]`.
"""

from __future__ import annotations

import ipaddress

from gpurig.diagnose.findings import Finding
from gpurig.probe.network import (
    InterfaceFacts,
    RendezvousFacts,
    gloo_ifnames,
    ifname_ignored,
    parse_nccl_ifname,
    selected_interfaces,
)

# What each library prints when its variable names no usable interface (the error catalogue,
# knowledge/errors-dist.toml, holds these messages with their sources).
FAILS_WITH = {
    "NCCL_SOCKET_IFNAME": "NCCL stops at start-up (`Bootstrap : no socket interface found`)",
    "GLOO_SOCKET_IFNAME": "gloo stops at start-up (`Unable to find address for: {name}`)",
}


def _endpoint(net: RendezvousFacts) -> str:
    where = f"{net.master_addr}:{net.master_port}"
    if net.address and net.address != net.master_addr.strip("[]"):
        where += f" ({net.address})"
    return where


def _via(net: RendezvousFacts) -> str:
    r = net.route
    if r.interface is None:
        return ""
    return f" through {r.interface}" + (f" (from {r.source})" if r.source else "")


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _interface_list(net: RendezvousFacts) -> str:
    """"lo (127.0.0.1), wire0 (10.200.0.2), veth1 (link-local IPv6 only), eth1 (down, no address)"."""
    parts = []
    for i in net.interfaces:
        state = [] if i.up is not False else ["down"]
        addrs = [a for a in i.addresses if not a.lower().startswith("fe80:")]  # routable ones
        if not addrs:
            addrs = ["link-local IPv6 only"] if i.addresses else ["no address"]
        parts.append(f"{i.name} ({', '.join(state + addrs)})")
    return ", ".join(parts) or "none could be listed"


def _routable(iface: InterfaceFacts) -> bool:
    """An address other than IPv6 link-local (fe80::/10), which reaches no other network."""
    return any(not a.lower().startswith("fe80:") for a in iface.addresses)


def _route_evidence(net: RendezvousFacts) -> dict:
    r = net.route
    return {"route_interface": r.interface, "route_source": r.source, "route_local": r.local,
            "route_reason": r.reason}


def rendezvous_port(net: RendezvousFacts) -> list[Finding]:
    p = net.port
    if p is None:
        return []
    ep, port, addr = _endpoint(net), net.master_port, net.address or net.master_addr
    ev = {"master_addr": net.master_addr, "master_port": port, "address": net.address, "status": p.status,
          "elapsed_s": p.elapsed_s, "timeout_s": p.timeout_s, "error": p.error, **_route_evidence(net)}
    if p.status == "open":
        ms = "" if p.elapsed_s is None else f" in {p.elapsed_s * 1000:.0f} ms"
        return [Finding(
            id="rendezvous-port-open", severity="ok", area="network",
            title=f"The rendezvous {ep} answers{_via(net)}",
            detail=f"A TCP connection to port {port} was accepted{ms}.",
            fix="Nothing to do", evidence=ev,
        )]
    if p.status == "refused" and net.route.local and not _is_loopback(net.address):
        return [Finding(
            id="rendezvous-port-refused", severity="info", area="network",
            title=f"Nothing listens on port {port} yet: {addr} is this machine, the master",
            detail=("torchrun on the master (node rank 0) opens the rendezvous port when it starts and waits "
                    "there for the other nodes; until then a connection is refused."),
            fix=(f"Start node 0 here first (`torchrun --nnodes=N --node_rank=0 --master_addr={addr} "
                 f"--master_port={port} ...`), then run `gpurig doctor --master-addr {addr} --master-port {port}` "
                 "on the other nodes"),
            evidence=ev,
        )]
    if p.status == "refused":
        return [Finding(
            id="rendezvous-port-refused", severity="error", area="network",
            title=f"Connection to the rendezvous {ep} refused: nothing listens there",
            detail=(f"{addr} answered{_via(net)}, so the machine is reachable, but it refused the connection to "
                    f"port {port}: node 0 has not started yet, it listens on another port, its torchrun agent has "
                    "exited (look at its output), or a firewall there rejects the port."),
            fix=(f"Start node 0 first (its torchrun listens on {port} while it waits for the others); give every "
                 f"node the same --master-port / MASTER_PORT ({port} here); on node 0, "
                 f"`ss -ltnp | grep :{port}` shows whether anything listens"),
            evidence=ev,
        )]
    if p.status == "timeout":
        src = net.route.source
        allow_from = f"`sudo ufw allow from {src}` (this node)" if src else "`sudo ufw allow from <this node's address>`"
        within = f" within {p.timeout_s:g} s" if p.timeout_s is not None else ""
        return [Finding(
            id="rendezvous-port-timeout", severity="error", area="network",
            title=f"No answer from the rendezvous {ep}{within}: a firewall drops the connection",
            detail=(f"The route to {addr} goes{_via(net) or ' somewhere'}, but the connection got no answer at "
                    "all, neither accepted nor refused. That is what a firewall that drops packets does (the "
                    "host firewall of node 0, a cloud security group or network ACL); a machine that is down "
                    "or not at that address looks the same. Besides this port, NCCL and gloo connect between "
                    "all nodes on other ports chosen at run time, so the nodes must accept TCP from each other, "
                    f"not only on {port}."),
            fix=(f"On node 0 open the port: `sudo ufw allow {port}/tcp`, or `sudo iptables -I INPUT -p tcp "
                 f"--dport {port} -j ACCEPT`; in a cloud, add an inbound rule for TCP {port} from the other "
                 f"nodes to the security group; for NCCL and gloo allow all TCP between the nodes, e.g. "
                 f"{allow_from} on node 0"),
            evidence=ev,
        )]
    if p.status == "unresolved":
        return [Finding(
            id="rendezvous-host-unresolved", severity="error", area="network",
            title=f"The master address {net.master_addr} does not resolve",
            detail=(f"The name lookup failed: {p.error}. Every node must resolve MASTER_ADDR to the same "
                    "address of node 0."),
            fix=(f"Use node 0's IP address (`hostname -I` on node 0) as --master-addr / MASTER_ADDR, or add "
                 f"`<node 0's address> {net.master_addr}` to /etc/hosts on every node"),
            evidence=ev,
        )]
    if p.status == "unreachable":
        kernel = f" The kernel's route lookup: {net.route.reason}." if net.route.reason else ""
        return [Finding(
            id="rendezvous-no-route", severity="error", area="network",
            title=f"The rendezvous {ep} cannot be reached from here: {p.error}",
            detail=(f"This machine has no way to {addr}.{kernel} The master address must be an address of "
                    "node 0 on a network both nodes share."),
            fix=(f"Check the address: `ip -br addr` on node 0 lists its addresses, `ip route get {addr}` here "
                 "shows the route; connect the nodes to a common network (same subnet, a route or a VPN) "
                 "or use node 0's address on the network they share"),
            evidence=ev,
        )]
    local_fw = " A firewall on this machine blocks outgoing connections." if "not permitted" in (p.error or "") else ""
    return [Finding(
        id="rendezvous-port-error", severity="error", area="network",
        title=f"Connecting to the rendezvous {ep} failed: {p.error}",
        detail=f"The connection attempt failed with an error other than refused, timed out or unreachable.{local_fw}",
        fix=(f"Allow outgoing TCP to {addr} port {port} on this machine (`sudo iptables -I OUTPUT -p tcp -d {addr} "
             f"--dport {port} -j ACCEPT`)" if local_fw else
             f"Check --master-addr and --master-port, then try `nc -zv {addr} {port}` for the system's own message"),
        evidence=ev,
    )]


def socket_ifnames(net: RendezvousFacts) -> list[Finding]:
    findings = []
    route_if = net.route.interface
    by_name = {i.name: i for i in net.interfaces}
    route_loop = route_if is not None and (by_name[route_if].loopback if route_if in by_name else route_if == "lo")
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = net.socket_ifname.get(var)
        if ifname_ignored(value):  # unset, or too short for NCCL and gloo to read: they choose themselves
            continue
        shown = value if value.strip() == value and " " not in value else repr(value)
        spaces = " The spaces in it are part of the names." if shown != value else ""
        named, good = selected_interfaces(var, value, net.interfaces)
        if var == "NCCL_SOCKET_IFNAME":
            exclude, exact, entries = parse_nccl_ifname(value)
            reads = (("every interface except " if exclude else "")
                     + ("the exact names " if exact else "the names starting with ") + ", ".join(entries))
            missing = [] if good else ["(all)"]
        else:
            asked = gloo_ifnames(value)
            reads = "the exact name(s) " + ", ".join(asked)
            missing = [n for n in asked if n not in good]
        ev = {var: value, "reads_as": reads, "named": named, "usable": good, "route_interface": route_if,
              "interfaces": {i.name: i.addresses for i in net.interfaces}}
        if missing:
            unusable = [n for n in named if n not in good]
            why = (f"{', '.join(unusable)} {'is' if len(unusable) == 1 else 'are'} down or without an IP address"
                   if unusable else "no interface here has such a name")
            forms = (" gloo takes exact names only, not NCCL's `^` and `=` forms."
                     if var == "GLOO_SOCKET_IFNAME" and value.strip()[:1] in "^=" else "")
            name = missing[0] if var == "GLOO_SOCKET_IFNAME" else ""
            if route_if and not route_loop:
                fix = f"`export {var}={route_if}` (the interface on the route to {net.master_addr})"
            else:
                choices = [i.name for i in net.interfaces if not i.loopback and _routable(i)] or ["<interface>"]
                fix = f"`unset {var}`, or set it to the interface that reaches the other nodes: one of {', '.join(choices)}"
            findings.append(Finding(
                id="socket-ifname-matches-nothing", severity="error", area="network",
                title=f"{var}={shown} names no usable network interface on this machine",
                detail=(f"It is read as {reads}: {why}.{spaces}{forms} {FAILS_WITH[var].format(name=name)}. "
                        f"This machine has: {_interface_list(net)}."),
                fix=fix, evidence=ev,
            ))
        elif route_if and not route_loop and route_if not in good:
            findings.append(Finding(
                id="socket-ifname-not-route", severity="warn", area="network",
                title=(f"{var}={shown} selects {', '.join(good)}, but the route to the master "
                       f"{net.master_addr} goes through {route_if}"),
                detail=(f"The processes then offer the other nodes an address on {', '.join(good)}, which is not "
                        f"the network this machine reaches {net.master_addr} on: connecting between the nodes "
                        "hangs or times out, or the traffic takes a slower network."),
                fix=f"`export {var}={route_if}` (on every node, the interface of the network the nodes share)",
                evidence=ev,
            ))
    return findings


RULES = [rendezvous_port, socket_ifnames]
