"""--nnodes / --node-rank are checked once, in one wording, by every command that takes them,
before any process starts."""

from __future__ import annotations

import pytest

from gpurig.errors import BadInput
from gpurig.launch.plan import check_nodes


def test_check_nodes_names_the_flag():
    check_nodes(2, 1)
    with pytest.raises(BadInput, match=r"^--node-rank: 2 is outside 0\.\.1 \(--nnodes 2\)$"):
        check_nodes(2, 2)
    with pytest.raises(BadInput, match=r"^--node-rank: -1 is outside"):
        check_nodes(2, -1)
    with pytest.raises(BadInput, match=r"^--nnodes: must be at least 1, got 0$"):
        check_nodes(0, 0)


@pytest.mark.parametrize("argv", [
    ["train", "--device", "cpu"],
    ["train", "--framework", "tf"],
    ["launch", "--device", "cpu"],
])
def test_every_command_says_a_bad_node_rank_the_same_way(run_cli, tmp_path, argv):
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    extra = [str(script)] if argv[0] == "launch" else ["--out", str(tmp_path / "run")]
    proc = run_cli(*argv, "--nnodes", "2", "--node-rank", "5", "--master-addr", "127.0.0.1", *extra, timeout=120)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "--node-rank: 5 is outside 0..1 (--nnodes 2)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, message", [
    (["verify", "--nnodes", "2"], "--nnodes 2 needs --master-addr HOST"),
    (["bench", "comm", "--nnodes", "2", "--node-rank", "1"], "--nnodes 2 needs --master-addr HOST"),
    (["verify", "--iface", "eth0"], "--iface chooses the network between machines"),
    (["verify", "--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "70000"],
     "--master-port must be between 1 and 65535, got 70000"),
    (["bench", "comm", "--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1"],
     "--node-rank: 2 is outside 0..1 (--nnodes 2)"),
    (["verify", "--nnodes", "2", "--master-addr", " "], "--master-addr: give a host name or an address"),
    (["train", "--device", "cpu", "--iface", "eth0"], "--iface chooses the network between machines"),
    (["bench", "comm", "--master-addr", "10.0.0.1"], "--master-addr/--master-port say where the machines"),
])
def test_verify_and_bench_comm_check_their_node_flags_before_starting(run_cli, argv, message):
    proc = run_cli(*argv, timeout=120)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_the_plan_across_machines_tells_torchrun_where_this_node_is(monkeypatch):
    from gpurig.launch import nodes as nodes_mod
    from gpurig.launch.plan import Nodes, plan_torchrun

    monkeypatch.setattr(nodes_mod, "interface_env", lambda addr, iface=None, environ=None: nodes_mod.Network(
        {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "=eth1"}, "network interface eth1: test", False, "10.0.0.2"))
    monkeypatch.setattr("gpurig.launch.plan.interface_env", nodes_mod.interface_env)
    plan = plan_torchrun(["-m", "x"], 2, "cpu", nodes=Nodes(2, 1, "10.0.0.1").check(), rdzv_id="gpurig-verify")
    assert "--nnodes=2" in plan.argv and "--rdzv-endpoint=10.0.0.1:29400" in plan.argv
    assert "--local-addr=10.0.0.2" in plan.argv and "--rdzv-conf=is_host=false" in plan.argv
    assert "--rdzv-id=gpurig-verify" in plan.argv
    assert plan.env["GLOO_SOCKET_IFNAME"] == "eth1" and plan.env["NCCL_SOCKET_IFNAME"] == "=eth1"
    assert plan.network == "network interface eth1: test"


def test_a_loopback_master_changes_nothing():
    from gpurig.launch.nodes import interface_env

    net = interface_env("127.0.0.1")
    assert net.env == {} and net.is_host is None and net.local_addr is None


def _fake_network(monkeypatch, route, names=("lo", "eth0", "ib0")):
    from gpurig.probe import network

    ifaces = [network.InterfaceFacts(name=n, ipv4=[f"10.0.{i}.2/24"]) for i, n in enumerate(names)]
    monkeypatch.setattr(network, "route_interface", lambda addr, *a, **k: route)
    monkeypatch.setattr(network, "interfaces", lambda: ifaces)


def test_the_interface_on_the_route_fills_only_the_variables_the_user_left_unset(monkeypatch):
    from gpurig.launch.nodes import interface_env
    from gpurig.probe.network import RouteFacts

    _fake_network(monkeypatch, RouteFacts(destination="10.0.1.1", interface="eth0", source="10.0.1.2", local=False))
    net = interface_env("10.0.1.1", environ={})
    assert net.env == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"}
    assert (net.local_addr, net.is_host) == ("10.0.1.2", False)
    mine = interface_env("10.0.1.1", environ={"NCCL_SOCKET_IFNAME": "ib"})
    assert mine.env == {"GLOO_SOCKET_IFNAME": "eth0"} and "yours kept: NCCL_SOCKET_IFNAME=ib" in mine.note
    both = interface_env("10.0.1.1", environ={"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": "ib0"})
    assert both.env == {} and both.local_addr == "10.0.1.2"


def test_iface_names_the_interface_and_its_address_is_given_to_torchrun(monkeypatch):
    from gpurig.errors import BadInput
    from gpurig.launch.nodes import interface_env
    from gpurig.probe.network import RouteFacts

    _fake_network(monkeypatch, RouteFacts(destination="10.0.1.1", interface="eth0", source="10.0.1.2", local=False))
    net = interface_env("10.0.1.1", iface="ib0", environ={"GLOO_SOCKET_IFNAME": "eth0"})
    assert net.env == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "=ib0"} and net.local_addr == "10.0.2.2"
    with pytest.raises(BadInput, match=r"--iface eth9: no interface of that name on this host \(it has lo, eth0, ib0\)"):
        interface_env("10.0.1.1", iface="eth9", environ={})


def test_a_route_that_cannot_be_told_leaves_the_choice_to_gloo_and_nccl_and_says_so(monkeypatch):
    from gpurig.launch.nodes import interface_env
    from gpurig.probe.network import RouteFacts

    _fake_network(monkeypatch, RouteFacts(reason="cannot resolve node0: no address for this name"))
    net = interface_env("node0", environ={})
    assert net.env == {} and net.is_host is None and net.local_addr is None
    assert "cannot resolve node0" in net.note and "--iface NAME" in net.note
