"""The NCCL INFO log parser and the transport judgement, on log lines in NCCL's own formats."""

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


def test_h200_nvlink_p2p_cumem_counts_each_channel_once_and_passes(nccl_log):
    report = parse_nccl_log(nccl_log("h200_nv18_p2p_cumem.log"))
    assert report.nccl_version == "2.28.9+cuda13.0"
    assert set(report.pairs) == {"0->1", "1->0"}
    # 24 ring channels plus 2 send/recv connections (connIndex 1) from rank 0 to rank 1
    assert report.pairs["0->1"].transports == {"P2P/CUMEM": 26}
    assert report.pairs["1->0"].transports == {"P2P/CUMEM": 24}
    assert report.nvls_channels == 0 and report.nvls_available is False
    assert report.rank_devices[1] == {"nvml": 1, "bus_id": "43000"}
    verdict = judge_transport(report, two_gpu_facts())
    assert verdict["status"] == "pass"
    assert "P2P/CUMEM" in verdict["detail"] and "NV18" in verdict["detail"]
    assert verdict["findings"] == []


def test_shm_between_nvlinked_gpus_fails_with_a_fix(nccl_log):
    report = parse_nccl_log(nccl_log("pcie_shm.log"))
    assert report.pairs["0->1"].transports == {"SHM": 4}
    verdict = judge_transport(report, two_gpu_facts("NV18"), env={"NCCL_P2P_DISABLE": "1"})
    assert verdict["status"] == "fail"
    assert "SHM on 4 connection(s)" in verdict["detail"]
    assert "NV18" in verdict["detail"] and "NCCL_P2P_DISABLE=1" in verdict["detail"]
    (finding,) = verdict["findings"]
    assert finding["id"] == "nccl-nvlink-not-used" and finding["severity"] == "error"
    assert "NCCL_P2P_DISABLE" in finding["fix"] and "--ipc=host" in finding["fix"]


def test_shm_between_pcie_gpus_is_what_the_hardware_allows(nccl_log):
    verdict = judge_transport(parse_nccl_log(nccl_log("pcie_shm.log")), two_gpu_facts("SYS"))
    assert verdict["status"] == "pass"
    assert "SHM" in verdict["detail"]


def test_without_facts_the_transport_is_reported_not_judged(nccl_log):
    verdict = judge_transport(parse_nccl_log(nccl_log("pcie_shm.log")), None)
    assert verdict["status"] == "pass"
    assert "topology unknown" in verdict["detail"]


def test_network_transports_and_send_receive_sides_count_once(nccl_log):
    report = parse_nccl_log(nccl_log("two_nodes_ib_ipc.log"))
    assert report.pairs["0->1"].transports == {"P2P/IPC": 2}
    # rank 1 -> 2 is logged by the sender and by the receiver on the other node: 2 channels, not 4
    assert report.pairs["1->2"].transports == {"NET/IB": 2}
    sock = parse_nccl_log(nccl_log("socket.log"))
    assert sock.pairs["0->1"].transports == {"NET/Socket": 2}
    assert sock.pairs["1->0"].main == "NET/Socket"
    verdict = judge_transport(sock, two_gpu_facts("NV18"))
    assert verdict["status"] == "fail" and "NET/Socket" in verdict["detail"]


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
