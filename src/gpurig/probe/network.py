"""The network between this machine and the rendezvous (MASTER_ADDR:MASTER_PORT), as plain facts.

    python -m gpurig.probe.network 10.0.0.1 29400     # the rendezvous facts as JSON

What it reads: this host's interfaces (`socket.if_nameindex()`, their flags and MTU through
`ioctl`, addresses from `ip -j addr` where iproute2 is installed, else `ioctl` and
`/proc/net/if_inet6`), the interface the kernel routes the master's address through (`ip -j route
get`, else the source address of a connected UDP socket, which sends nothing), and whether the
rendezvous port answers a TCP connection (opened and closed at once; nothing is written). Every
step is bounded in time, and what cannot be told is `None` with the reason beside it.

The interface variables are read the way their libraries read them (a value of one character or
none is ignored by both, which then choose on their own; spaces are kept as part of the names):
- `NCCL_SOCKET_IFNAME`: a comma-separated list of name prefixes; a leading `^` excludes what the
  list matches, a leading `=` (after the `^`, if any) makes the entries exact names; a `:port`
  after an entry is ignored for interfaces. NCCL only considers interfaces that have an IPv4 or
  IPv6 address (and, in recent releases, are running). The syntax: NCCL's "Environment Variables"
  page, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname ;
  the `:port` suffix, the length check and the address checks: NCCL's source, `parseStringList`
  (src/misc/utils.cc), `ncclFindInterfaces` (src/misc/socket.cc) and the search it calls.
- `GLOO_SOCKET_IFNAME`: exact interface names, one or several separated by commas (gloo then
  spreads its operations over them, and every process must list the same number). (PyTorch's
  torch.distributed page, "Choosing the network interface to use":
  https://docs.pytorch.org/docs/stable/distributed.html#choosing-the-network-interface-to-use ;
  the length check: `ProcessGroupGloo::Options::create_default` in PyTorch's source)
- `TP_SOCKET_IFNAME` (TensorPipe, torch.distributed.rpc): collected, not judged.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PORT = 29400  # the c10d rendezvous port of torchrun --rdzv-endpoint and of gpurig across machines
SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
PORT_STATUSES = ("open", "refused", "timeout", "unresolved", "unreachable", "error")

# <linux/sockios.h> and <linux/if.h>
_SIOCGIFFLAGS, _SIOCGIFADDR, _SIOCGIFNETMASK, _SIOCGIFMTU = 0x8913, 0x8915, 0x891B, 0x8921
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}


@dataclass
class InterfaceFacts:
    """One network interface of this host (of this network namespace)."""

    name: str
    index: int | None = None
    up: bool | None = None  # IFF_UP: switched on
    running: bool | None = None  # IFF_RUNNING: up and with a carrier (recent NCCL skips the others)
    loopback: bool | None = None
    operstate: str | None = None  # /sys/class/net/NAME/operstate: "up", "down", "unknown" (lo, some virtual ones)
    mtu: int | None = None
    ipv4: list[str] = field(default_factory=list)  # "10.200.0.2/24"
    ipv6: list[str] = field(default_factory=list)  # "fe80::1/64"

    @property
    def addresses(self) -> list[str]:
        """The addresses without their prefix length, IPv4 first."""
        return [a.split("/")[0] for a in (*self.ipv4, *self.ipv6)]


@dataclass
class RouteFacts:
    """How this host reaches an address: through which interface, from which source address."""

    destination: str | None = None  # the address the kernel was asked about (resolved)
    interface: str | None = None
    source: str | None = None
    gateway: str | None = None
    local: bool | None = None  # the address is this host's own (this host is the master)
    method: str | None = None  # "local address", "ip route get", "udp connect"
    reason: str | None = None  # why `interface` is None


@dataclass
class PortProbe:
    """One TCP connection attempt to host:port, closed as soon as it is made."""

    host: str
    port: int
    status: str  # one of PORT_STATUSES
    address: str | None = None  # the address actually tried
    elapsed_s: float | None = None
    timeout_s: float | None = None
    error: str | None = None  # the error text the system gave


@dataclass
class RendezvousFacts:
    """What the doctor judges about a multi-node rendezvous (`gpurig doctor --master-addr`)."""

    master_addr: str
    master_port: int
    address: str | None = None  # master_addr resolved
    resolve_error: str | None = None
    route: RouteFacts = field(default_factory=RouteFacts)
    port: PortProbe | None = None
    interfaces: list[InterfaceFacts] = field(default_factory=list)
    interfaces_source: str | None = None  # "ip -j addr" or "ioctl"
    socket_ifname: dict[str, str | None] = field(default_factory=dict)  # SOCKET_IFNAME_VARS -> value or None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RendezvousFacts:
        """The inverse of `to_dict` (a recorded rendezvous, e.g. the "network" of `doctor --json`)."""
        data = dict(data)
        data["route"] = RouteFacts(**data.get("route") or {})
        data["port"] = PortProbe(**data["port"]) if data.get("port") else None
        data["interfaces"] = [InterfaceFacts(**i) for i in data.get("interfaces") or []]
        return cls(**data)


# --- the interface variables, read as NCCL and gloo read them (pure) ---------------------------------


def ifname_ignored(value: str | None) -> bool:
    """True when NCCL and gloo ignore the variable: unset, or one character at most."""
    return value is None or len(value) <= 1


def parse_nccl_ifname(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL_SOCKET_IFNAME -> (exclude, exact, entries).

    >>> parse_nccl_ifname("^=docker0,lo")
    (True, True, ['docker0', 'lo'])
    >>> parse_nccl_ifname("eth,ib:1")
    (False, False, ['eth', 'ib'])
    """
    rest = value
    exclude = rest.startswith("^")
    rest = rest[1:] if exclude else rest
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    entries = [e.split(":", 1)[0] for e in rest.split(",")]
    return exclude, exact, [e for e in entries if e]


def nccl_ifname_matches(value: str, names: Iterable[str]) -> list[str]:
    """The interface names NCCL_SOCKET_IFNAME=value selects among `names`, by name alone.

    >>> nccl_ifname_matches("eth", ["lo", "eth0", "eth1", "ib0"])
    ['eth0', 'eth1']
    >>> nccl_ifname_matches("^docker,lo", ["lo", "docker0", "eth0"])
    ['eth0']
    >>> nccl_ifname_matches("=eth0", ["eth0", "eth01"])
    ['eth0']
    """
    exclude, exact, entries = parse_nccl_ifname(value)

    def hit(name: str) -> bool:
        return any(name == e if exact else name.startswith(e) for e in entries)

    return [n for n in names if hit(n) != exclude]


def gloo_ifnames(value: str) -> list[str]:
    """The exact interface names GLOO_SOCKET_IFNAME=value asks for (spaces are part of them).

    >>> gloo_ifnames("eth0,eth1")
    ['eth0', 'eth1']
    """
    return [n for n in value.split(",") if n]


def usable(iface: InterfaceFacts) -> bool:
    """Could a socket library bind there: an IP address, and not known to be down."""
    return bool(iface.ipv4 or iface.ipv6) and iface.up is not False and iface.running is not False


def selected_interfaces(var: str, value: str, ifaces: list[InterfaceFacts]) -> tuple[list[str], list[str]]:
    """(names the variable names, the usable ones among them) for NCCL_ or GLOO_SOCKET_IFNAME."""
    names = [i.name for i in ifaces]
    if var == "NCCL_SOCKET_IFNAME":
        named = nccl_ifname_matches(value, names)
    else:
        named = [n for n in gloo_ifnames(value) if n in names]
    by_name = {i.name: i for i in ifaces}
    return named, [n for n in named if usable(by_name[n])]


# --- this host's interfaces --------------------------------------------------------------------------


def interfaces() -> list[InterfaceFacts]:
    """This host's interfaces (of the current network namespace), in index order."""
    return _interfaces_with_source()[0]


def _interfaces_with_source() -> tuple[list[InterfaceFacts], str | None]:
    try:
        pairs = sorted(socket.if_nameindex())
    except OSError:
        pairs = [(None, n) for n in sorted(_listdir("/sys/class/net"))]
    out = []
    with _ioctl_socket() as sock:
        for index, name in pairs:
            iface = InterfaceFacts(name=name, index=index)
            flags = _ioctl_int(sock, _SIOCGIFFLAGS, name, "H")
            if flags is not None:
                iface.up, iface.running = bool(flags & _IFF_UP), bool(flags & _IFF_RUNNING)
                iface.loopback = bool(flags & _IFF_LOOPBACK)
            iface.mtu = _ioctl_int(sock, _SIOCGIFMTU, name, "i")
            iface.operstate = _sysfs_operstate(name, index)
            out.append(iface)
    if _fill_from_ip(out):
        return out, "ip -j addr"
    _fill_from_ioctl(out)
    return out, "ioctl"


class _ioctl_socket:
    def __enter__(self) -> socket.socket | None:
        try:
            self.sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        except OSError:
            self.sock = None
        return self.sock

    def __exit__(self, *exc) -> None:
        if self.sock is not None:
            self.sock.close()


def _ifreq(sock: socket.socket | None, request: int, name: str) -> bytes | None:
    if sock is None:
        return None
    import fcntl

    try:
        return fcntl.ioctl(sock.fileno(), request, struct.pack("40s", name.encode()[:15]))
    except OSError:
        return None


def _ioctl_int(sock: socket.socket | None, request: int, name: str, fmt: str) -> int | None:
    res = _ifreq(sock, request, name)
    return None if res is None else struct.unpack_from(fmt, res, 16)[0]


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _sysfs_operstate(name: str, index: int | None) -> str | None:
    # /sys shows the namespace it was mounted in, which need not be ours: trust it only when the
    # interface's index there is the one the kernel gave us.
    base = f"/sys/class/net/{name}"
    if index is not None and _read(f"{base}/ifindex") != str(index):
        return None
    return _read(f"{base}/operstate")


def _fill_from_ip(ifaces: list[InterfaceFacts]) -> bool:
    """Addresses from `ip -j addr` (every address, with its prefix); False when it cannot tell."""
    data = _ip_json(["addr", "show"])
    if not isinstance(data, list):
        return False
    by_name = {i.name: i for i in ifaces}
    for entry in data:
        iface = by_name.get(entry.get("ifname"))
        if iface is None:
            continue
        flags = set(entry.get("flags") or [])
        if iface.up is None:
            iface.up, iface.loopback = "UP" in flags, "LOOPBACK" in flags
        if iface.operstate is None and entry.get("operstate"):
            iface.operstate = str(entry["operstate"]).lower()
        for a in entry.get("addr_info") or []:
            if not a.get("local"):
                continue
            text = f"{a['local']}/{a.get('prefixlen', 128 if a.get('family') == 'inet6' else 32)}"
            if a.get("family") == "inet":
                iface.ipv4.append(text)
            elif a.get("family") == "inet6":
                iface.ipv6.append(text)
    return True


def _fill_from_ioctl(ifaces: list[InterfaceFacts]) -> None:
    """Without iproute2: each interface's primary IPv4 address by ioctl, IPv6 from /proc/net/if_inet6."""
    with _ioctl_socket() as sock:
        for iface in ifaces:
            addr, mask = _ifreq(sock, _SIOCGIFADDR, iface.name), _ifreq(sock, _SIOCGIFNETMASK, iface.name)
            if addr is not None:
                prefix = bin(int.from_bytes(mask[20:24], "big")).count("1") if mask is not None else 32
                iface.ipv4.append(f"{socket.inet_ntoa(addr[20:24])}/{prefix}")
    by_name = {i.name: i for i in ifaces}
    for line in (_read("/proc/net/if_inet6") or "").splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[5] in by_name:
            addr = ipaddress.IPv6Address(bytes.fromhex(parts[0]))
            by_name[parts[5]].ipv6.append(f"{addr}/{int(parts[2], 16)}")


def _ip_json(args: list[str], timeout: float = 2.0) -> Any:
    """`ip -j ARGS` parsed, or None when iproute2 is missing, fails or says nothing parseable."""
    exe = shutil.which("ip")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-j", *args], capture_output=True, text=True, timeout=timeout)
        return json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


# --- addresses, routes and ports ---------------------------------------------------------------------


def resolve(host: str, timeout: float = 2.0) -> tuple[str | None, str | None]:
    """(address, None) for a hostname or IP literal, or (None, why); a lookup taking longer than
    `timeout` counts as failed (the lookup thread is left to finish on its own)."""
    literal = host.strip().strip("[]")
    try:
        return str(ipaddress.ip_address(literal)), None
    except ValueError:
        pass
    box: list[Any] = []

    def lookup() -> None:
        try:
            box.append(socket.getaddrinfo(literal, None, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            box.append(exc)

    worker = threading.Thread(target=lookup, name="gpurig-resolve", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        return None, f"no answer from the name service within {timeout:g} s"
    if isinstance(box[0], Exception):
        return None, str(box[0])
    infos = box[0]
    return (infos[0][4][0], None) if infos else (None, "no address for this name")


def route_interface(addr: str, timeout: float = 2.0, *, ifaces: list[InterfaceFacts] | None = None,
                    port: int = DEFAULT_PORT) -> RouteFacts:
    """The interface (and source address) this host uses to reach `addr` (a hostname or an IP).

    When `addr` is one of this host's own addresses (this host is the master), the interface that
    holds it, not `lo`: that is the one the other nodes reach it through, the name to give
    NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME. `interface` is None with `reason` when it cannot be told.
    """
    ip, why = resolve(addr, timeout)
    if ip is None:
        return RouteFacts(reason=f"cannot resolve {addr}: {why}")
    ifaces = interfaces() if ifaces is None else ifaces
    owner = _owner(ip, ifaces)
    if owner is not None:
        return RouteFacts(destination=ip, interface=owner.name, source=ip, local=True, method="local address")
    route = _route_by_ip(ip, timeout)
    if route is None:
        route = _route_by_udp(ip, port, ifaces)
    if route.interface is not None and route.local is None:
        route.local = False
    return route


def _owner(ip: str, ifaces: list[InterfaceFacts]) -> InterfaceFacts | None:
    """The interface that holds address `ip`, if any."""
    norm = _normal(ip)
    for iface in ifaces:
        if norm is not None and norm in (_normal(a) for a in iface.addresses):
            return iface
    return None


def _normal(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address.split("%")[0]))
    except ValueError:
        return None


def _route_by_ip(ip: str, timeout: float) -> RouteFacts | None:
    """`ip -j route get`; None when iproute2 is missing or failed for a reason other than the route."""
    exe = shutil.which("ip")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-j", "route", "get", ip], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        err = done.stderr.strip()
        if "RTNETLINK answers" in err:  # the kernel's own answer: no route, unreachable, prohibited
            return RouteFacts(destination=ip, method="ip route get", reason=err)
        return None
    try:
        entry = json.loads(done.stdout)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    return RouteFacts(destination=ip, interface=entry.get("dev"), source=entry.get("prefsrc"),
                      gateway=entry.get("gateway"), local=entry.get("type") == "local" or None,
                      method="ip route get")


def _route_by_udp(ip: str, port: int, ifaces: list[InterfaceFacts]) -> RouteFacts:
    """The source address the kernel picks for a UDP socket connected to ip (connecting sends
    nothing), matched to the interface that holds it."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((ip, port))
            source = sock.getsockname()[0]
    except OSError as exc:
        return RouteFacts(destination=ip, method="udp connect", reason=exc.strerror or str(exc))
    owner = _owner(source, ifaces)
    if owner is None:
        return RouteFacts(destination=ip, source=source, method="udp connect",
                          reason=f"the source address {source} is on no interface listed")
    return RouteFacts(destination=ip, interface=owner.name, source=source, method="udp connect",
                      local=ipaddress.ip_address(ip).is_loopback or None)


def probe_port(host: str, port: int, timeout: float = 3.0) -> PortProbe:
    """Try one TCP connection to host:port: "open", "refused" (nothing listens), "timeout" (no
    answer at all: typically a firewall dropping the packets), "unresolved", "unreachable" (no route,
    host unreachable) or "error" (anything else, with its text)."""
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is not in 1-65535")
    start = time.monotonic()
    ip, why = resolve(host, min(timeout, 2.0))
    if ip is None:
        return PortProbe(host, port, "unresolved", elapsed_s=_since(start), timeout_s=timeout, error=why)
    return _connect(host, ip, port, timeout, start)


def _connect(host: str, ip: str, port: int, timeout: float, start: float) -> PortProbe:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    result = PortProbe(host, port, "open", address=ip, timeout_s=timeout)
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(max(0.1, timeout - (time.monotonic() - start)))
            sock.connect((ip, port))
    except TimeoutError:
        result.status, result.error = "timeout", f"no answer within {timeout:g} s"
    except ConnectionRefusedError as exc:
        result.status, result.error = "refused", exc.strerror or str(exc)
    except OSError as exc:
        result.status = "unreachable" if exc.errno in _UNREACHABLE else "error"
        result.error = exc.strerror or str(exc)
    result.elapsed_s = _since(start)
    return result


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def collect_rendezvous(master_addr: str, master_port: int = DEFAULT_PORT, timeout: float = 3.0, *,
                       environ: Mapping[str, str] | None = None) -> RendezvousFacts:
    """Everything the doctor judges about reaching the rendezvous at master_addr:master_port.

    Bounded: the name lookup takes at most 2 s, the route 2 s, the connection `timeout` s.
    """
    env = os.environ if environ is None else environ
    facts = RendezvousFacts(master_addr=master_addr, master_port=master_port,
                            socket_ifname={k: env.get(k) for k in SOCKET_IFNAME_VARS})
    facts.interfaces, facts.interfaces_source = _interfaces_with_source()
    if not facts.interfaces:
        facts.notes.append("no network interface could be listed")
    start = time.monotonic()
    facts.address, facts.resolve_error = resolve(master_addr, min(timeout, 2.0))
    if facts.address is None:
        facts.route = RouteFacts(reason=f"cannot resolve {master_addr}: {facts.resolve_error}")
        facts.port = PortProbe(master_addr, master_port, "unresolved", elapsed_s=_since(start),
                               timeout_s=timeout, error=facts.resolve_error)
        return facts
    facts.route = route_interface(facts.address, min(timeout, 2.0), ifaces=facts.interfaces, port=master_port)
    facts.port = _connect(master_addr, facts.address, master_port, timeout, time.monotonic())
    return facts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m gpurig.probe.network MASTER_ADDR [MASTER_PORT]", file=sys.stderr)
        return 2
    facts = collect_rendezvous(args[0], int(args[1]) if len(args) == 2 else DEFAULT_PORT)
    json.dump(facts.to_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
