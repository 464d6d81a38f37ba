"""probe/network.py: the interface variables read as NCCL and gloo read them, and the live probes on
loopback (the two-host tests on network namespaces are in tests/diagnose/test_rules_network.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from tests.conftest import ROOT

from gpurig.probe import network as net
from gpurig.probe.network import InterfaceFacts, RendezvousFacts

NAMES = ["lo", "eth0", "eth1", "eth10", "ib0", "docker0", "docker_gwbridge", "enp3s0"]


@pytest.mark.parametrize("value, expect", [
    ("eth", ["eth0", "eth1", "eth10"]),              # a prefix
    ("eth0", ["eth0"]),                              # a prefix that is also a whole name
    ("eth1", ["eth1", "eth10"]),                     # ... and takes the longer names too
    ("=eth1", ["eth1"]),                             # exact
    ("=eth0,eth1", ["eth0", "eth1"]),                # `=` applies to the whole list
    ("^docker", ["lo", "eth0", "eth1", "eth10", "ib0", "enp3s0"]),
    ("^docker,lo", ["eth0", "eth1", "eth10", "ib0", "enp3s0"]),
    ("^=docker0", ["lo", "eth0", "eth1", "eth10", "ib0", "docker_gwbridge", "enp3s0"]),
    ("ib,enp", ["ib0", "enp3s0"]),
    ("eth0:1", ["eth0"]),                            # a `:port` suffix is ignored for interfaces
    ("eth9", []),
    ("=eth", []),
    (" eth0", []),                                  # spaces are part of the name, as in NCCL
    ("eth0, eth1", ["eth0"]),
])
def test_nccl_socket_ifname_matching(value, expect):
    assert net.nccl_ifname_matches(value, NAMES) == expect


def test_parse_nccl_ifname_keeps_the_flags_apart():
    assert net.parse_nccl_ifname("^=a,b,,c") == (True, True, ["a", "b", "c"])
    assert net.parse_nccl_ifname("=^a") == (False, True, ["^a"])  # `^` only counts first


def test_gloo_takes_exact_names_one_or_a_comma_list():
    assert net.gloo_ifnames("eth0") == ["eth0"]
    assert net.gloo_ifnames("eth0,eth1,,eth2") == ["eth0", "eth1", "eth2"]
    assert net.gloo_ifnames("eth0, eth1") == ["eth0", " eth1"]
    ifaces = [InterfaceFacts("eth0", ipv4=["10.0.0.1/24"]), InterfaceFacts("eth10", ipv4=["10.1.0.1/24"])]
    assert net.selected_interfaces("GLOO_SOCKET_IFNAME", "eth", ifaces) == ([], [])  # no prefixes in gloo
    assert net.selected_interfaces("NCCL_SOCKET_IFNAME", "eth", ifaces) == (["eth0", "eth10"], ["eth0", "eth10"])


def test_a_value_of_one_character_or_none_is_ignored_by_both_libraries():
    assert [net.ifname_ignored(v) for v in (None, "", "e", "^", "=", "lo")] == [True] * 5 + [False]


def test_an_interface_without_address_or_down_is_not_usable():
    ifaces = [InterfaceFacts("eth0", up=True, running=True),                      # no address
              InterfaceFacts("eth1", up=False, running=False, ipv4=["10.0.0.1/24"]),
              InterfaceFacts("eth2", up=True, running=None, ipv6=["fd00::1/64"])]   # running unknown: usable
    assert net.selected_interfaces("NCCL_SOCKET_IFNAME", "eth", ifaces) == (["eth0", "eth1", "eth2"], ["eth2"])


def test_this_host_lists_loopback_with_its_address():
    ifaces, source = net._interfaces_with_source()
    lo = next(i for i in ifaces if i.loopback)
    assert lo.up and "127.0.0.1/8" in lo.ipv4
    assert source in ("ip -j addr", "ioctl")
    # The fallback without iproute2 reads the same IPv4 addresses.
    bare = [InterfaceFacts(i.name) for i in ifaces]
    net._fill_from_ioctl(bare)
    assert {i.name: i.ipv4[:1] for i in bare} == {i.name: i.ipv4[:1] for i in ifaces}
    json.dumps([vars(i) for i in ifaces])  # plain data


def test_route_to_loopback_is_lo_and_local():
    r = net.route_interface("127.0.0.1")
    assert (r.interface, r.local, r.source) == ("lo", True, "127.0.0.1")
    r = net._route_by_udp("127.0.0.1", 9, net.interfaces())
    assert (r.interface, r.source, r.method) == ("lo", "127.0.0.1", "udp connect")


def test_probe_port_open_and_refused_on_loopback():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        p = net.probe_port("127.0.0.1", port, timeout=2)
        assert (p.status, p.address, p.error) == ("open", "127.0.0.1", None)
        assert 0 <= p.elapsed_s < 2
    p = net.probe_port("localhost", port, timeout=2)  # closed now
    assert p.status == "refused" and p.error


def test_probe_port_says_unresolved_without_asking_the_network(monkeypatch):
    def no_such_host(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    p = net.probe_port("node0.example", 29500, timeout=1)
    assert p.status == "unresolved" and "not known" in p.error
    facts = net.collect_rendezvous("node0.example", 29500, timeout=1, environ={"GLOO_SOCKET_IFNAME": "eth0"})
    assert facts.port.status == "unresolved" and facts.route.interface is None and facts.route.reason
    assert facts.socket_ifname == {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": None}


def test_a_slow_name_lookup_is_cut_short(monkeypatch):
    import threading

    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: release.wait(5))
    try:
        ip, why = net.resolve("slow.example", timeout=0.2)
    finally:
        release.set()
    assert ip is None and "0.2 s" in why


def test_probe_port_refuses_a_port_out_of_range():
    with pytest.raises(ValueError):
        net.probe_port("127.0.0.1", 70000)


def test_rendezvous_facts_round_trip_through_json():
    facts = net.collect_rendezvous("127.0.0.1", 9, timeout=1, environ={})
    again = RendezvousFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts
    assert facts.route.interface == "lo" and facts.port.status == "refused"


def test_probing_a_live_torch_store_leaves_it_working():
    """The doctor's connection attempt against a real rendezvous store (torch's TCPStore, what
    torchrun's master listens with) neither breaks it nor makes it complain."""
    pytest.importorskip("torch")
    code = (
        "import datetime, sys\n"
        "from torch.distributed import TCPStore\n"
        "from gpurig.probe.network import probe_port\n"
        "t = datetime.timedelta(seconds=20)\n"
        "server = TCPStore('127.0.0.1', 0, 2, True, timeout=t, wait_for_workers=False)\n"
        "print(probe_port('127.0.0.1', server.port, 2).status)\n"
        "client = TCPStore('127.0.0.1', server.port, 2, False, timeout=t)\n"
        "client.set('k', 'v'); print(server.get('k').decode())\n"
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["open", "v"]
    assert "socket" not in r.stderr.lower() and "error" not in r.stderr.lower(), r.stderr
