"""Two test hosts joined by a real network: Linux network namespaces and a veth pair.

Each host is a namespace with its own loopback, the veth end `wire0` (10.200.0.1 and 10.200.0.2,
/24, on the veth only) and a decoy interface `decoy0` (a veth whose peer stays in the same host, with 10.201.0.1/24 on host 0 and
10.201.0.2/24 on host 1, reaching nothing), so a program that takes the wrong interface fails.
Traffic stays inside the two namespaces this module makes; they are removed on exit even when the
test fails.

    with two_hosts() as hosts:
        p = hosts.popen(0, ["python", "-c", "..."])     # runs in host 0
        hosts.run(1, ["ip", "-br", "addr"])              # runs in host 1, waits, returns CompletedProcess

`netns_unavailable()` says why namespaces cannot be made here (not root, no `ip`, no permission),
or returns None; tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

ADDRS = ("10.200.0.1", "10.200.0.2")
DECOYS = ("10.201.0.1", "10.201.0.2")
WIRE = "wire0"
DECOY = "decoy0"
DECOY_PEER = "decoy0p"

_REASON: list[str | None] = []


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def netns_unavailable() -> str | None:
    """Why two namespaces cannot be made on this machine, or None (the answer is kept)."""
    if _REASON:
        return _REASON[0]
    reason = None
    if shutil.which("ip") is None:
        reason = "the `ip` command (iproute2) is not installed"
    elif os.geteuid() != 0:
        reason = "network namespaces need root"
    else:
        name = f"gpurig-probe-{uuid.uuid4().hex[:8]}"
        made = _ip("netns", "add", name, check=False)
        if made.returncode != 0:
            reason = f"`ip netns add` failed: {made.stderr.strip()}"
        else:
            _ip("netns", "del", name, check=False)
    _REASON.append(reason)
    return reason


@dataclass
class Hosts:
    names: tuple[str, str]
    addrs: tuple[str, str] = ADDRS
    decoys: tuple[str, str] = DECOYS
    iface: str = WIRE
    decoy: str = DECOY
    _procs: list[subprocess.Popen] = field(default_factory=list)

    def argv(self, host: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[host], *argv]

    def popen(self, host: int, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` in host 0 or 1; it is killed on exit if still running."""
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(self.argv(host, argv), **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, host: int, argv: list[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.argv(host, argv), timeout=timeout, **kwargs)

    def _kill_all(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, 9)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)


@contextlib.contextmanager
def two_hosts() -> Iterator[Hosts]:
    """Two namespaces joined by a veth pair, each with a decoy interface (see the module docstring)."""
    tag = uuid.uuid4().hex[:6]
    names = (f"gpurig-{tag}-a", f"gpurig-{tag}-b")
    hosts = Hosts(names)
    made: list[str] = []
    try:
        for name in names:
            _ip("netns", "add", name)
            made.append(name)
        # Both veth ends are created straight inside their namespaces: nothing appears in ours.
        _ip("link", "add", WIRE, "netns", names[0], "type", "veth", "peer", "name", WIRE, "netns", names[1])
        for i, name in enumerate(names):
            ns = ("-n", name)
            _ip(*ns, "link", "set", "lo", "up")
            _ip(*ns, "addr", "add", f"{ADDRS[i]}/24", "dev", WIRE)
            _ip(*ns, "link", "set", WIRE, "up")
            # The decoy: a veth pair with both ends in this host (no dummy driver needed), up and
            # addressed, leading nowhere.
            _ip(*ns, "link", "add", DECOY, "type", "veth", "peer", "name", DECOY_PEER)
            _ip(*ns, "addr", "add", f"{DECOYS[i]}/24", "dev", DECOY)
            _ip(*ns, "link", "set", DECOY_PEER, "up")
            _ip(*ns, "link", "set", DECOY, "up")
        yield hosts
    finally:
        hosts._kill_all()
        for name in made:
            _ip("netns", "del", name, check=False)
