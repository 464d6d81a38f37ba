"""Pure logic of verify and bench comm: busbw arithmetic, sizes, fault syntax, hang diagnosis, links."""

from __future__ import annotations

import json

import pytest
from comm_facts import two_gpu_facts

from gpurig.comm.inject import InjectError, find, parse_faults
from gpurig.comm.metrics import (
    algbw_gbps,
    bus_factor,
    busbw_gbps,
    element_count,
    human_bytes,
    normalise_op,
    parse_bytes,
    size_sweep,
)
from gpurig.comm.progress import diagnose_hang
from gpurig.comm.verify import merge_check
from gpurig.diagnose.links import link_capability


def test_bus_factors_are_the_nccl_tests_ones():
    assert bus_factor("allreduce", 2) == 1.0
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 8) == pytest.approx(0.875)
    assert bus_factor("reducescatter", 4) == pytest.approx(0.75)
    assert bus_factor("alltoall", 2) == 0.5
    assert bus_factor("broadcast", 8) == 1.0
    with pytest.raises(ValueError):
        bus_factor("gather", 2)


def test_busbw_from_a_perf_anchor_row():
    # 2×H200, 1 GiB all-reduce at 327.0 GB/s busbw takes 1 GiB / 327e9 s; with n = 2, busbw == algbw.
    seconds = (1 << 30) / 327.0e9
    assert algbw_gbps(1 << 30, seconds) == pytest.approx(327.0)
    assert busbw_gbps("allreduce", 1 << 30, seconds, 2) == pytest.approx(327.0)
    # the same time on 8 ranks counts 1.75× on the bus
    assert busbw_gbps("allreduce", 1 << 30, seconds, 8) == pytest.approx(327.0 * 1.75)
    assert busbw_gbps("allgather", 1 << 30, seconds, 8) == pytest.approx(327.0 * 0.875)


def test_sizes_parse_and_sweep():
    assert parse_bytes("1KiB") == 1024
    assert parse_bytes("64M") == 64_000_000
    assert parse_bytes("1GiB", "--max-bytes") == 1 << 30
    assert parse_bytes("4096") == 4096
    with pytest.raises(ValueError, match="--max-bytes 'lots'"):
        parse_bytes("lots", "--max-bytes")
    with pytest.raises(ValueError, match="at least 1 byte"):
        parse_bytes("0")
    assert size_sweep(1 << 10, 1 << 30) == [1 << (10 + 2 * i) for i in range(11)]
    assert size_sweep(1000, 5000) == [1000, 4000, 5000]
    with pytest.raises(ValueError, match="larger than --max-bytes"):
        size_sweep(10, 5)
    assert human_bytes(1 << 20) == "1 MiB" and human_bytes(1536) == "1.5 KiB" and human_bytes(7) == "7 B"


def test_element_counts_split_evenly_for_scattering_ops():
    assert element_count("allreduce", 1001, 4, 3) == 250
    assert element_count("allgather", 4000, 4, 3) == 999  # 1000 rounded down to a multiple of 3
    assert element_count("alltoall", 4, 4, 8) == 8  # never below one element per rank
    assert normalise_op("all_reduce") == "allreduce" and normalise_op("a2a") == "alltoall" and normalise_op("x") is None


def test_fault_syntax():
    faults = parse_faults("perturb:rank=1,op=all_gather; skip-collective:rank=0 ;ddp-grad:rank=1")
    assert [(f.kind, f.rank, f.op) for f in faults] == [("perturb", 1, "all_gather"), ("skip-collective", 0, None), ("ddp-grad", 1, None)]
    assert find(faults, "perturb", 1, "all_reduce_sum") is None
    assert find(faults, "perturb", 1, "all_gather") is faults[0]
    assert find(faults, "skip-collective", 0, "broadcast") is faults[1]
    assert parse_faults(None) == [] and parse_faults("  ") == []
    with pytest.raises(InjectError, match="unknown fault 'explode'"):
        parse_faults("explode:rank=1")
    with pytest.raises(InjectError, match="needs rank=N"):
        parse_faults("perturb:op=all_gather")
    with pytest.raises(InjectError, match="must be an integer"):
        parse_faults("perturb:rank=one")


def _entry(seq, op, check="collectives", what=""):
    return {"seq": seq, "op": op, "check": check, "what": what}


def test_hang_names_the_op_and_the_rank_that_never_arrived():
    progress = {
        0: [_entry(1, "all_reduce_sum"), _entry(2, "broadcast", what="float32 × 3")],
        1: [_entry(1, "all_reduce_sum")],
        2: [_entry(1, "all_reduce_sum"), _entry(2, "broadcast", what="float32 × 3")],
    }
    hangs = [dict(_entry(2, "broadcast", what="float32 × 3"), waited_s=10.2, rank=0)]
    hang = diagnose_hang(progress, hangs, 3)
    assert hang["op"] == "broadcast" and hang["check"] == "collectives" and hang["seq"] == 2
    assert hang["missing"] == [1] and hang["arrived"] == [0, 2]
    assert "rank(s) 1 never arrived" in hang["message"]
    assert "rank 1 last entered all_reduce_sum #1" in hang["message"]
    assert "within 10.2 s" in hang["message"]


def test_hang_without_watchdog_records_uses_the_furthest_op():
    progress = {0: [_entry(1, "all_gather"), _entry(2, "ddp_backward", check="ddp")], 1: []}
    hang = diagnose_hang(progress, [], 2, timeout=30)
    assert hang["check"] == "ddp" and hang["missing"] == [1]
    assert "entered no collective at all" in hang["message"]
    assert diagnose_hang({0: [], 1: []}, [], 2) is None


def test_a_stall_with_every_rank_inside_is_called_so():
    progress = {0: [_entry(1, "all_reduce_sum")], 1: [_entry(1, "all_reduce_sum")]}
    hang = diagnose_hang(progress, [dict(_entry(1, "all_reduce_sum"), waited_s=5)], 2)
    assert hang["missing"] == [] and "stalled inside the communication library" in hang["message"]


def test_merge_names_each_failing_rank():
    ranks = {
        0: {"checks": [{"name": "ddp", "status": "pass", "detail": "ok", "seconds": 1.0}]},
        1: {"checks": [{"name": "ddp", "status": "fail", "detail": "replica differs", "seconds": 1.5}]},
    }
    merged = merge_check("ddp", ranks, 2)
    assert not merged.passed and merged.status == "fail"
    assert merged.detail == "rank 1: replica differs" and merged.seconds == 1.5
    assert merge_check("p2p", ranks, 2) is None
    one_missing = merge_check("ddp", {0: ranks[0]}, 2)
    assert one_missing.status == "fail" and "rank(s) 1 never reported" in one_missing.detail


def test_link_capability_from_nvlink_facts_and_pcie():
    cap = link_capability(two_gpu_facts("NV18"), 0, 1)
    assert cap.kind == "nvlink" and cap.gbps == pytest.approx(18 * 26.562)
    assert "18 × 26.562 GB/s NVLink" in cap.how
    pcie = link_capability(two_gpu_facts("PHB", pcie_gen=4), 1, 0)
    assert pcie.kind == "pcie" and pcie.link == "PHB"
    assert "PCIe Gen4 x16" in pcie.how
    assert pcie.gbps is None or 25 < pcie.gbps < 40  # from the link-speed table when it is installed
    # As NVML reported it on the real 2×H200 VM: no per-link speed, remote end a "switch" at ffff...
    h200 = link_capability(two_gpu_facts("NV18", speed=None, remote="ffffffff:ff:ff.0"), 0, 1)
    assert h200.kind == "nvlink" and h200.gbps == pytest.approx(18 * 25.0)
    assert "nominal for compute capability 9.0" in h200.how
    unknown = link_capability(None, 0, 1)
    assert unknown.gbps is None and unknown.kind is None


def test_a_stalled_copy_of_one_rank_is_named_before_the_ranks_waiting_for_it():
    progress = {0: [_entry(1, "barrier", check="p2p")], 1: [_entry(1, "barrier", check="p2p")]}
    hangs = [
        {"seq": 1, "check": "p2p", "op": "barrier", "what": "after copies from GPU 0", "waited_s": 61.0, "rank": 1},
        {"seq": None, "check": "p2p", "op": "peer_copy", "what": "GPU 0 → GPU 1, 1,048,576 bytes", "waited_s": 60.2,
         "rank": 0, "local": True},
    ]
    hang = diagnose_hang(progress, hangs, 2)
    assert hang["op"] == "peer_copy" and hang["stalled_rank"] == 0
    assert hang["message"] == ("peer_copy (GPU 0 → GPU 1, 1,048,576 bytes) on rank 0 in check 'p2p' did not finish "
                               "within 60.2 s; the other ranks waited for it")


def test_the_watchdog_records_a_stalled_local_step_and_ends_the_process(tmp_path):
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import json, time
        from gpurig.comm.progress import Progress
        def on_hang(record):
            open({str(tmp_path / 'hang.json')!r}, 'w').write(json.dumps(record))
        p = Progress({str(tmp_path)!r}, rank=3, timeout=0.5, on_hang=on_hang, poll=0.05)
        with p.op("collectives", "all_reduce_sum", "float32 × 3"):
            pass
        with p.local("p2p", "peer_copy", "GPU 3 → GPU 0"):
            time.sleep(30)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 124, proc.stderr
    record = json.loads((tmp_path / "hang.json").read_text())
    assert record["op"] == "peer_copy" and record["local"] is True and record["waited_s"] >= 0.5
    lines = (tmp_path / "progress-rank3.jsonl").read_text().splitlines()
    assert [json.loads(x)["op"] for x in lines] == ["all_reduce_sum"]  # local steps take no number


def test_a_rank_on_another_op_with_the_same_number_has_not_arrived():
    progress = {0: [_entry(1, "all_gather"), _entry(2, "all_to_all")],
                1: [_entry(1, "all_gather"), _entry(2, "agree_to_continue")]}
    hang = diagnose_hang(progress, [dict(_entry(2, "all_to_all"), waited_s=8.0, rank=0)], 2)
    assert hang["missing"] == [1] and hang["arrived"] == [0]
    assert "rank 1 last entered agree_to_continue #2" in hang["message"]
