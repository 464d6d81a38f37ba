"""The network rules of `gpurig doctor --master-addr`: on recorded rendezvous facts, then for real
between two hosts made of Linux network namespaces (tests/netns.py): host 1 runs the doctor against
host 0 at 10.200.0.1 while host 0 listens, listens nowhere, drops the port with a firewall rule, or
host 1's interface variables name nothing or the decoy interface."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tests.netns import netns_unavailable, two_hosts

from gpurig.diagnose.rules import judge
from gpurig.diagnose.rules_network import rendezvous_port, socket_ifnames
from gpurig.probe.facts import RigFacts
from gpurig.probe.network import SOCKET_IFNAME_VARS, InterfaceFacts, PortProbe, RendezvousFacts, RouteFacts

SRC = Path(__file__).resolve().parents[2] / "src"

LO = InterfaceFacts("lo", 1, True, True, True, "unknown", 65536, ["127.0.0.1/8"], ["::1/128"])
WIRE = InterfaceFacts("wire0", 2, True, True, False, "up", 1500, ["10.200.0.2/24"], ["fe80::1/64"])
DECOY = InterfaceFacts("decoy0", 4, True, True, False, "up", 1500, ["10.201.0.2/24"])
DOWN = InterfaceFacts("eth1", 5, False, False, False, "down", 1500)
PEER = InterfaceFacts("decoy0p", 3, True, True, False, "up", 1500, [], ["fe80::2/64"])


def rdzv(status: str = "open", error: str | None = None, **env: str) -> RendezvousFacts:
    """Host 1 of the namespace pair, as recorded: the master 10.200.0.1 is reached through wire0."""
    return RendezvousFacts(
        master_addr="10.200.0.1", master_port=29500, address="10.200.0.1",
        route=RouteFacts("10.200.0.1", "wire0", "10.200.0.2", local=False, method="ip route get"),
        port=PortProbe("10.200.0.1", 29500, status, "10.200.0.1", 0.004, 3.0, error),
        interfaces=[LO, WIRE, PEER, DECOY, DOWN], interfaces_source="ip -j addr",
        socket_ifname={k: env.get(k) for k in SOCKET_IFNAME_VARS},
    )


def ids(findings) -> list[tuple[str, str]]:
    return [(f.id, f.severity) for f in findings]


# --- the port ------------------------------------------------------------------------------------------


def test_an_open_port_is_ok_and_names_the_route():
    [f] = rendezvous_port(rdzv("open"))
    assert (f.id, f.severity) == ("rendezvous-port-open", "ok")
    assert "wire0" in f.title and f.evidence["route_interface"] == "wire0"


def test_a_refused_port_says_start_node_0_or_check_the_port():
    [f] = rendezvous_port(rdzv("refused", "Connection refused"))
    assert (f.id, f.severity) == ("rendezvous-port-refused", "error")
    assert "Start node 0 first" in f.fix and "MASTER_PORT" in f.fix and "exited" in f.detail


def test_refused_on_the_master_itself_is_only_a_note():
    net = rdzv("refused", "Connection refused")
    net.route = RouteFacts("10.200.0.1", "wire0", "10.200.0.1", local=True, method="local address")
    [f] = rendezvous_port(net)
    assert (f.id, f.severity) == ("rendezvous-port-refused", "info")
    assert "this machine" in f.title and "--node_rank=0" in f.fix


def test_a_timeout_blames_a_firewall_and_gives_the_rules():
    [f] = rendezvous_port(rdzv("timeout", "no answer within 3 s"))
    assert (f.id, f.severity) == ("rendezvous-port-timeout", "error")
    assert "firewall" in f.title
    assert "sudo ufw allow 29500/tcp" in f.fix
    assert "sudo iptables -I INPUT -p tcp --dport 29500 -j ACCEPT" in f.fix
    assert "security group" in f.fix and "sudo ufw allow from 10.200.0.2" in f.fix
    assert "NCCL and gloo" in f.detail and "other ports" in f.detail


def test_unresolved_unreachable_and_other_errors():
    net = rdzv("unresolved", "[Errno -2] Name or service not known")
    net.master_addr, net.address = "node0", None
    [f] = rendezvous_port(net)
    assert (f.id, f.severity) == ("rendezvous-host-unresolved", "error") and "/etc/hosts" in f.fix
    net = rdzv("unreachable", "No route to host")
    net.route = RouteFacts("10.200.0.1", method="ip route get", reason="RTNETLINK answers: No route to host")
    [f] = rendezvous_port(net)
    assert (f.id, f.severity) == ("rendezvous-no-route", "error")
    assert "RTNETLINK" in f.detail and "ip route get 10.200.0.1" in f.fix
    [f] = rendezvous_port(rdzv("error", "Operation not permitted"))
    assert (f.id, f.severity) == ("rendezvous-port-error", "error") and "OUTPUT" in f.fix


# --- the interface variables ---------------------------------------------------------------------------


def test_nccl_ifname_naming_nothing_is_an_error_whose_fix_is_the_route_interface():
    [f] = socket_ifnames(rdzv(NCCL_SOCKET_IFNAME="eth9"))
    assert (f.id, f.severity) == ("socket-ifname-matches-nothing", "error")
    assert f.fix.startswith("`export NCCL_SOCKET_IFNAME=wire0`")
    for name in ("lo (127.0.0.1, ::1)", "wire0 (10.200.0.2)", "decoy0 (10.201.0.2)", "eth1 (down, no address)",
                 "decoy0p (link-local IPv6 only)"):
        assert name in f.detail
    assert "Bootstrap : no socket interface found" in f.detail


def test_nccl_ifname_matching_only_a_down_interface_is_an_error_too():
    [f] = socket_ifnames(rdzv(NCCL_SOCKET_IFNAME="eth"))
    assert f.id == "socket-ifname-matches-nothing" and "eth1 is down or without an IP address" in f.detail


@pytest.mark.parametrize("value", ["wire", "=wire0", "^docker", "^decoy,lo", "wire0,decoy0"])
def test_nccl_ifname_selecting_the_route_interface_is_quiet(value):
    assert socket_ifnames(rdzv(NCCL_SOCKET_IFNAME=value)) == []


def test_nccl_ifname_selecting_only_other_interfaces_warns():
    [f] = socket_ifnames(rdzv(NCCL_SOCKET_IFNAME="^wire,lo"))
    assert (f.id, f.severity) == ("socket-ifname-not-route", "warn")
    assert "decoy0" in f.title and f.fix.startswith("`export NCCL_SOCKET_IFNAME=wire0`")


def test_gloo_ifname_is_exact_names():
    [f] = socket_ifnames(rdzv(GLOO_SOCKET_IFNAME="decoy0"))
    assert (f.id, f.severity) == ("socket-ifname-not-route", "warn") and "GLOO_SOCKET_IFNAME=wire0" in f.fix
    [f] = socket_ifnames(rdzv(GLOO_SOCKET_IFNAME="wire0,eth9"))
    assert f.id == "socket-ifname-matches-nothing" and "Unable to find address for: eth9" in f.detail
    [f] = socket_ifnames(rdzv(GLOO_SOCKET_IFNAME="^lo"))
    assert f.id == "socket-ifname-matches-nothing" and "not NCCL's `^` and `=` forms" in f.detail
    assert socket_ifnames(rdzv(GLOO_SOCKET_IFNAME="wire0")) == []
    assert socket_ifnames(rdzv(GLOO_SOCKET_IFNAME="wire")) != []  # no prefixes in gloo


def test_both_variables_are_judged_and_unset_or_empty_is_quiet():
    made = socket_ifnames(rdzv(NCCL_SOCKET_IFNAME="eth9", GLOO_SOCKET_IFNAME="decoy0"))
    assert ids(made) == [("socket-ifname-matches-nothing", "error"), ("socket-ifname-not-route", "warn")]
    assert socket_ifnames(rdzv(NCCL_SOCKET_IFNAME="", GLOO_SOCKET_IFNAME=" ")) == []  # both ignore these
    assert socket_ifnames(rdzv(NCCL_SOCKET_IFNAME="^")) == []
    assert socket_ifnames(rdzv(TP_SOCKET_IFNAME="eth9")) == []  # collected, not judged


def test_a_stray_space_is_shown_since_it_breaks_the_name():
    [f] = socket_ifnames(rdzv(GLOO_SOCKET_IFNAME="wire0, decoy0"))
    assert f.id == "socket-ifname-matches-nothing" and "GLOO_SOCKET_IFNAME='wire0, decoy0'" in f.title
    assert "spaces in it are part of the names" in f.detail and "Unable to find address for:  decoy0" in f.detail


def test_without_a_route_the_fix_lists_the_candidates():
    net = rdzv("unreachable", "No route to host", NCCL_SOCKET_IFNAME="eth9")
    net.route = RouteFacts(reason="RTNETLINK answers: No route to host")
    [f] = socket_ifnames(net)
    assert "unset NCCL_SOCKET_IFNAME" in f.fix and f.fix.endswith("one of wire0, decoy0")


def test_a_loopback_master_never_asks_for_lo():
    net = rdzv(GLOO_SOCKET_IFNAME="wire0")
    net.master_addr = net.address = "127.0.0.1"
    net.route = RouteFacts("127.0.0.1", "lo", "127.0.0.1", local=True, method="local address")
    assert socket_ifnames(net) == []


def test_judge_runs_the_network_rules_only_with_network_facts():
    plain = judge(RigFacts())
    assert not [f for f in plain if f.area == "network"]
    both = judge(RigFacts(), rdzv("timeout", "no answer within 3 s", NCCL_SOCKET_IFNAME="eth9"))
    assert ids(f for f in both if f.area == "network") == [
        ("rendezvous-port-timeout", "error"), ("socket-ifname-matches-nothing", "error")]
    assert ids(plain) == ids(f for f in both if f.area != "network")


def test_unknown_facts_are_values_not_crashes():
    net = replace(rdzv(), port=PortProbe("10.200.0.1", 29500, "timeout"), route=RouteFacts(), interfaces=[])
    net.socket_ifname["NCCL_SOCKET_IFNAME"] = "eth9"
    made = judge(RigFacts(), net)
    assert "doctor-rule-failed" not in [f.id for f in made]
    assert ids(f for f in made if f.area == "network") == [
        ("rendezvous-port-timeout", "error"), ("socket-ifname-matches-nothing", "error")]
    assert replace(rdzv(), port=None) and rendezvous_port(replace(rdzv(), port=None)) == []


# --- the command line -----------------------------------------------------------------------------------


@pytest.mark.parametrize("args, flag", [
    (["--master-addr", ""], "--master-addr"),
    (["--master-addr", "10.200.0.1", "--master-port", "0"], "--master-port"),
    (["--master-addr", "10.200.0.1", "--master-port", "65536"], "--master-port"),
    (["--master-addr", "node0:29500"], "--master-addr"),
    (["--master-port", "29500"], "--master-port"),
])
def test_bad_master_flags_exit_2_naming_the_flag(run_cli, args, flag):
    r = run_cli("doctor", "--fast", *args, timeout=60)
    assert r.returncode == 2 and flag in r.stderr and r.stdout == ""


def test_json_carries_the_network_facts(run_cli):
    r = run_cli("doctor", "--fast", "--json", "--master-addr", "127.0.0.1", "--master-port", "9", timeout=60)
    doc = json.loads(r.stdout)
    assert set(doc) == {"facts", "findings", "network"}
    assert doc["network"]["route"]["interface"] == "lo" and doc["network"]["port"]["status"] == "refused"
    assert "rendezvous-port-refused" in [f["id"] for f in doc["findings"]]
    assert r.returncode == 1


# --- for real, between two network namespaces ----------------------------------------------------------

needs_netns = pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
PORT = 29400  # the default of `doctor --master-port` (gpurig's rendezvous across machines)
LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8); print('listening', flush=True); time.sleep(120)\n")


def doctor_on(hosts, host: int, *args: str, env: dict | None = None, port: int | None = PORT):
    """`gpurig doctor --fast --json --master-addr 10.200.0.1` run in host 1; (exit code, document)."""
    clean = {k: v for k, v in os.environ.items() if k not in SOCKET_IFNAME_VARS}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), clean.get("PYTHONPATH")]))
    clean["COLUMNS"] = "300"  # terminal output on one line per finding
    clean.update(env or {})
    ports = ["--master-port", str(port)] if port is not None else []
    r = hosts.run(host, [sys.executable, "-m", "gpurig", "doctor", "--fast", "--master-addr", hosts.addrs[0],
                         *ports, *args], env=clean, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, (json.loads(r.stdout) if "--json" in args else r.stdout)


def listen_on_host0(hosts, port: int = PORT) -> None:
    p = hosts.popen(0, [sys.executable, "-c", LISTEN, hosts.addrs[0], str(port)], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 30)
    assert ready and p.stdout.readline().strip() == "listening"


def network_findings(doc) -> dict[str, dict]:
    return {f["id"]: f for f in doc["findings"] if f["area"] == "network"}


def exit_code_follows(code, doc) -> bool:
    return code == (1 if any(f["severity"] == "error" for f in doc["findings"]) else 0)


@needs_netns
def test_netns_listener_on_host0_is_ok():
    with two_hosts() as hosts:
        listen_on_host0(hosts)
        code, doc = doctor_on(hosts, 1, "--json", port=None)  # 29400 is the default
        found = network_findings(doc)
        assert list(found) == ["rendezvous-port-open"] and "wire0" in found["rendezvous-port-open"]["title"]
        net = doc["network"]
        assert (net["route"]["interface"], net["route"]["source"]) == ("wire0", "10.200.0.2")
        assert {i["name"] for i in net["interfaces"]} >= {"lo", "wire0", "decoy0"}
        assert exit_code_follows(code, doc)


@needs_netns
def test_netns_nothing_listening_is_refused():
    with two_hosts() as hosts:
        code, doc = doctor_on(hosts, 1, "--json")
        f = network_findings(doc)["rendezvous-port-refused"]
        assert f["severity"] == "error" and "Start node 0 first" in f["fix"] and code == 1
        assert doc["network"]["port"]["elapsed_s"] < 1
        # The same run on the terminal: the finding, its detail and its fix under "Network".
        code, text = doctor_on(hosts, 1)
        assert code == 1 and "\nNetwork\n" in text and "nothing listens there" in text and "fix: Start node 0" in text
        # On host 0 itself (the master, before torchrun starts there) it is only a note.
        code, doc = doctor_on(hosts, 0, "--json")
        f = network_findings(doc)["rendezvous-port-refused"]
        assert f["severity"] == "info" and doc["network"]["route"] == {
            "destination": "10.200.0.1", "interface": "wire0", "source": "10.200.0.1", "gateway": None,
            "local": True, "method": "local address", "reason": None}


@needs_netns
@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is not installed (apt-get install iptables)")
def test_netns_firewall_dropping_the_port_times_out_naming_a_firewall():
    with two_hosts() as hosts:
        listen_on_host0(hosts)
        rule = hosts.run(0, ["iptables", "-I", "INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP"])
        assert rule.returncode == 0, rule.stderr
        code, doc = doctor_on(hosts, 1, "--json")
        f = network_findings(doc)["rendezvous-port-timeout"]
        assert f["severity"] == "error" and code == 1
        assert "firewall" in f["title"] and f"ufw allow {PORT}/tcp" in f["fix"] and "iptables -I INPUT" in f["fix"]
        assert 2.5 < doc["network"]["port"]["elapsed_s"] < 5  # bounded by the 3 s probe


@needs_netns
def test_netns_no_route_to_the_master():
    with two_hosts() as hosts:
        assert hosts.run(1, ["ip", "route", "add", "unreachable", hosts.addrs[0]]).returncode == 0
        code, doc = doctor_on(hosts, 1, "--json")
        f = network_findings(doc)["rendezvous-no-route"]
        assert f["severity"] == "error" and code == 1 and "No route to host" in f["detail"]


@needs_netns
def test_netns_nccl_ifname_naming_nothing_gets_the_route_interface_as_fix():
    with two_hosts() as hosts:
        listen_on_host0(hosts)
        code, doc = doctor_on(hosts, 1, "--json", env={"NCCL_SOCKET_IFNAME": "eth9"})
        found = network_findings(doc)
        f = found["socket-ifname-matches-nothing"]
        assert f["severity"] == "error" and code == 1
        assert "`export NCCL_SOCKET_IFNAME=wire0`" in f["fix"]
        assert "wire0 (10.200.0.2)" in f["detail"] and "decoy0 (10.201.0.2)" in f["detail"]
        assert "rendezvous-port-open" in found
        assert doc["network"]["socket_ifname"]["NCCL_SOCKET_IFNAME"] == "eth9"


@needs_netns
def test_netns_gloo_ifname_on_the_decoy_warns_it_is_not_the_route():
    with two_hosts() as hosts:
        listen_on_host0(hosts)
        code, doc = doctor_on(hosts, 1, "--json", env={"GLOO_SOCKET_IFNAME": "decoy0"})
        f = network_findings(doc)["socket-ifname-not-route"]
        assert f["severity"] == "warn" and "decoy0" in f["title"] and "wire0" in f["title"]
        assert "`export GLOO_SOCKET_IFNAME=wire0`" in f["fix"]
        assert exit_code_follows(code, doc)


@needs_netns
def test_netns_route_interface_from_each_host():
    """The function the multi-node launcher uses to pick GLOO_/NCCL_SOCKET_IFNAME."""
    code = ("import json, sys; from gpurig.probe.network import route_interface as r\n"
            "print(json.dumps([vars(r(a)) for a in sys.argv[1:]]))")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with two_hosts() as hosts:
        out = hosts.run(1, [sys.executable, "-c", code, "10.200.0.1", "10.201.0.1", "127.0.0.1"], env=env)
        to_master, to_decoy, to_lo = json.loads(out.stdout)
        assert (to_master["interface"], to_master["source"], to_master["local"]) == ("wire0", "10.200.0.2", False)
        assert to_decoy["interface"] == "decoy0" and to_lo["interface"] == "lo"
        out = hosts.run(0, [sys.executable, "-c", code, "10.200.0.1"], env=env)
        [own] = json.loads(out.stdout)
        assert (own["interface"], own["local"]) == ("wire0", True)  # the master's own address: not lo
