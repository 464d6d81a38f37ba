"""Two machines over a real network: one torchrun agent in each of two network namespaces.

The hosts (tests/netns.py) reach each other only over `wire0` (10.200.0.1 and 10.200.0.2) and each
has a decoy interface leading nowhere; their host name resolves to neither address. What a user
relies on: `gpurig train`, `verify` and `bench comm --nnodes 2` run across them with no more than
`--master-addr`, on the interface of the route to the master (or the one `--iface` names), node 0
printing the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from netns import netns_unavailable, two_hosts

REASON = netns_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("netns"), pytest.mark.skipif(REASON is not None, reason=REASON or "")]
ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
MASTER = "10.200.0.1"


def on_both(hosts, make_args, timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Run `python -m gpurig <make_args(node)>` on host 0 and host 1 at once; both results."""
    procs = [hosts.popen(node, [sys.executable, "-m", "gpurig", *make_args(node)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV) for node in (0, 1)]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def nodes_args(node: int, port: int) -> list[str]:
    return ["--device", "cpu", "--nproc", "1", "--nnodes", "2", "--node-rank", str(node), "--master-addr", MASTER,
            "--master-port", str(port)]


def test_each_node_takes_the_interface_on_the_route_to_the_master():
    code = ("import json; from gpurig.launch.nodes import interface_env; n = interface_env('10.200.0.1'); "
            "print(json.dumps([n.env, n.local_addr, n.is_host]))")
    with two_hosts() as hosts:
        answers = [json.loads(hosts.run(node, [sys.executable, "-c", code], env=ENV).stdout) for node in (0, 1)]
    wire = {"GLOO_SOCKET_IFNAME": "wire0", "NCCL_SOCKET_IFNAME": "=wire0"}
    assert answers[0] == [wire, "10.200.0.1", True]  # the master holds the address: it hosts the store
    assert answers[1] == [wire, "10.200.0.2", False]


def test_train_across_two_hosts_runs_to_one_summary_on_node_0(tmp_path):
    with two_hosts() as hosts:
        runs = on_both(hosts, lambda node: ["train", *nodes_args(node, 29431), "--out", str(tmp_path / f"node{node}"),
                                            "--set", "train.steps=30", "--set", "eval.enabled=false"])
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "network interface wire0 (this machine's 10.200.0.1): GLOO_SOCKET_IFNAME=wire0" in runs[0].stdout
    assert "network interface wire0 (the route to 10.200.0.1): GLOO_SOCKET_IFNAME=wire0" in runs[1].stdout
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 30 and not summary["stopped"]
    assert not (tmp_path / "node1" / "summary.json").exists()
    assert "node 1 of 2 finished" in runs[1].stdout
    assert "hostname of the client socket" not in runs[0].stdout + runs[1].stdout  # c10d's DNS noise is not shown


def test_verify_across_two_hosts_on_the_interface_asked_for():
    with two_hosts() as hosts:
        runs = on_both(hosts, lambda node: ["verify", *nodes_args(node, 29432), "--iface", "wire0", "--timeout", "30",
                                            *(["--json"] if node == 0 else [])])
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads(runs[0].stdout)
    assert doc["passed"] and doc["nproc"] == 2
    assert {c["name"]: c["status"] for c in doc["checks"]} == {"collectives": "pass", "p2p": "n/a", "ddp": "pass",
                                                                "transport": "n/a"}
    assert doc["node"]["node"] == 0 and doc["node"]["nnodes"] == 2 and doc["node"]["ranks"] == [0]
    assert doc["node"]["network"].startswith("network interface wire0 (--iface)")
    assert runs[1].stdout.startswith("node 1 of 2 (rank 1 of 2): finished; the full result is printed on node 0")


def test_bench_comm_across_two_hosts_measures_every_rank_on_node_0():
    with two_hosts() as hosts:
        runs = on_both(hosts, lambda node: ["bench", "comm", *nodes_args(node, 29433), "--ops", "allreduce,allgather",
                                            "--max-bytes", "16KiB", *(["--json"] if node == 0 else [])])
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(runs[0].stdout)
    assert data["ok"] and data["nproc"] == 2 and data["node"]["nnodes"] == 2
    assert data["p2p"] is None and "network" in data["capability"]["how"]
    assert {p["op"] for p in data["results"]} == {"allreduce", "allgather"}
    assert all(p["busbw_gbps"] > 0 for p in data["results"])  # two ranks: bus bandwidth counts
    assert "measured" in runs[1].stdout


def test_an_interface_that_is_not_there_is_refused_before_anything_starts():
    with two_hosts() as hosts:
        run = hosts.run(1, [sys.executable, "-m", "gpurig", "verify", *nodes_args(1, 29434), "--iface", "eth9"], env=ENV)
    assert run.returncode == 2
    assert "--iface eth9: no interface of that name on this host" in run.stderr and "wire0" in run.stderr
