"""The NCCL INFO log parser and the transport judgement.

The h200_*.log fixtures are real NCCL 2.28.9 logs of a 2-GPU all-reduce on the 2×H200 NV18 machine
(default; NCCL_CUMEM_ENABLE=0; NCCL_P2P_DISABLE=1; P2P and SHM disabled). The others are written in
NCCL's formats for what that machine cannot show (InfiniBand, NVLS, pre-2.12 bus-id device fields).
"""

from __future__ import annotations

from comm_facts import two_gpu_facts

from gpurig.comm.nccl_log import classify, judge_transport, parse_nccl_log


def test_classify_keeps_the_transport_and_drops_the_variant():
    assert classify("P2P/CUMEM/read") == "P2P/CUMEM"
    assert classify("P2P/IPC") == "P2P/IPC"
    assert classify("SHM/direct/direct") == "SHM"
    assert classify("NET/IB/0/GDRDMA") == "NET/IB"
    assert classify("NET/Socket/0") == "NET/Socket"
    assert classify("P2P/direct") == "P2P/direct"


def test_h200_nvlink_p2p_cumem_passes(nccl_log):
    report = parse_nccl_log(nccl_log("h200_default_p2p_cumem.log"))
    assert report.nccl_version == "2.28.9+cuda13.0"
    assert set(report.pairs) == {"0->1", "1->0"}
    assert report.pairs["0->1"].transports == {"P2P/CUMEM": 24}
    assert report.pairs["1->0"].transports == {"P2P/CUMEM": 24}
    assert report.nvls_channels == 0
    assert report.rank_devices[1] == {"nvml": 1, "bus_id": "70"}
    verdict = judge_transport(report, two_gpu_facts())
    assert verdict["status"] == "pass"
    assert "P2P/CUMEM for 2 rank pair(s)" in verdict["detail"] and "NV18" in verdict["detail"]
    assert verdict["findings"] == []


def test_h200_with_cumem_off_uses_p2p_ipc(nccl_log):
    report = parse_nccl_log(nccl_log("h200_cumem_off_p2p_ipc.log"))
    assert report.pairs["0->1"].transports == {"P2P/IPC": 24}
    assert judge_transport(report, two_gpu_facts())["status"] == "pass"


def test_shm_between_nvlinked_gpus_fails_with_a_fix(nccl_log):
    report = parse_nccl_log(nccl_log("h200_p2p_disabled_shm.log"))
    assert report.pairs["0->1"].transports == {"SHM": 4}
    verdict = judge_transport(report, two_gpu_facts("NV18"), env={"NCCL_P2P_DISABLE": "1"})
    assert verdict["status"] == "fail"
    assert "rank 0 (GPU 0) → rank 1 (GPU 1) uses SHM on 4 connection(s)" in verdict["detail"]
    assert "NV18" in verdict["detail"] and "NCCL_P2P_DISABLE=1" in verdict["detail"]
    (finding,) = verdict["findings"]
    assert finding["id"] == "nccl-nvlink-not-used" and finding["severity"] == "error"
    assert "NCCL_P2P_DISABLE" in finding["fix"] and "--ipc=host" in finding["fix"]


def test_shm_between_pcie_gpus_is_what_the_hardware_allows(nccl_log):
    verdict = judge_transport(parse_nccl_log(nccl_log("h200_p2p_disabled_shm.log")), two_gpu_facts("SYS"))
    assert verdict["status"] == "pass"
    assert "SHM" in verdict["detail"]


def test_without_facts_the_transport_is_reported_not_judged(nccl_log):
    verdict = judge_transport(parse_nccl_log(nccl_log("h200_p2p_disabled_shm.log")), None)
    assert verdict["status"] == "pass"
    assert "topology unknown" in verdict["detail"]


def test_network_transports_and_send_receive_sides_count_once(nccl_log):
    sock = parse_nccl_log(nccl_log("h200_p2p_shm_disabled_net_socket.log"))
    # each channel is logged by the sender ([send]) and by the receiver ([receive]): 2, not 4
    assert sock.pairs["0->1"].transports == {"NET/Socket": 2}
    assert sock.pairs["1->0"].main == "NET/Socket"
    verdict = judge_transport(sock, two_gpu_facts("NV18"))
    assert verdict["status"] == "fail" and "NET/Socket" in verdict["detail"]
    report = parse_nccl_log(nccl_log("two_nodes_ib_ipc.log"))
    assert report.pairs["0->1"].transports == {"P2P/IPC": 2}
    assert report.pairs["1->2"].transports == {"NET/IB": 2}


def test_nvls_is_recognised(nccl_log):
    report = parse_nccl_log(nccl_log("nvswitch_nvls.log"))
    assert report.nvls_available is True
    assert report.nvls_channels == 16
    assert report.nvls_connected is True
    assert len(report.pairs) == 8


def test_old_nccl_bus_ids_are_matched_to_gpus_through_the_facts(nccl_log):
    report = parse_nccl_log(nccl_log("old_busid_p2p_ipc.log"))
    assert report.pairs["0->1"].src_device == "1b000"
    verdict = judge_transport(report, two_gpu_facts())
    row = next(r for r in verdict["pairs"] if r["pair"] == "0->1")
    assert (row["src_gpu"], row["dst_gpu"], row["link"]) == (0, 1, "NV18")
    assert verdict["status"] == "pass"


def test_a_log_without_channel_lines_is_not_a_pass():
    verdict = judge_transport(parse_nccl_log("host:1:2 [0] NCCL INFO Bootstrap : Using eth0\n"), two_gpu_facts())
    assert verdict["status"] == "n/a"
    assert "could not be read" in verdict["detail"]


def test_across_machines_only_this_machines_pairs_are_held_against_its_links(nccl_log, tmp_path):
    """Ranks 0 and 1 on node-a (NVLink), rank 2 on node-b: the pair 1->2 crosses the network by
    nature. Without knowing which ranks are local, its NET/IB would be read as NVLink lost between
    this machine's GPUs 1 and 0; with node-a's ranks, only 0<->1 is judged, and it passes."""
    from gpurig.comm.verify import transport_check

    (tmp_path / "nccl-node-a-900.log").write_text(nccl_log("two_nodes_ib_ipc.log"))
    facts = two_gpu_facts("NV18")
    blind, _, _ = transport_check("cuda", 3, tmp_path, facts, {})
    assert blind.status == "fail"  # what a multi-node verify would say without the fix
    local, transport, findings = transport_check("cuda", 3, tmp_path, facts, {}, local_ranks=[0, 1])
    assert local.status == "pass" and findings == [] and set(transport["pairs"]) == {"0->1"}
    alone, _, _ = transport_check("cuda", 3, tmp_path, facts, {}, local_ranks=[2])
    assert alone.status == "n/a" and "reached over the network" in alone.detail
