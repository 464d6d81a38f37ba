"""The parent's verdict for a GPU run, from a run folder as the workers and NCCL leave it.

No GPU needed: the folder holds per-rank results and an NCCL log in NCCL's own format.
"""

from __future__ import annotations

import json
import shutil

from comm_facts import NCCL_FIXTURES, two_gpu_facts

from gpurig.comm.verify import collect_verify
from gpurig.launch.plan import DeviceChoice
from gpurig.launch.runner import RunResult

CHECKS = ("collectives", "p2p", "ddp")


def _run_dir(tmp_path, log: str, ddp_status: str = "pass"):
    for rank in range(2):
        checks = [
            {"name": "collectives", "status": "pass", "detail": "108 cases exact", "seconds": 3.0},
            {"name": "p2p", "status": "pass", "detail": "exact", "seconds": 1.0,
             "speeds_gbps": {f"{rank}->{1 - rank}": 390.0}},
            {"name": "ddp", "status": ddp_status, "detail": "ok" if ddp_status == "pass" else "replica differs", "seconds": 2.0},
        ]
        data = {"rank": rank, "world_size": 2, "checks": checks, "hang": None, "nccl_version": "2.28.9", "finished": True}
        (tmp_path / f"result-rank{rank}.json").write_text(json.dumps(data))
    shutil.copy(NCCL_FIXTURES / log, tmp_path / "nccl-gpu-node-18211.log")
    return tmp_path


def _collect(run_dir, facts, env=None, returncode=0):
    choice = DeviceChoice(device="cuda", nproc=2, reason="2 visible GPUs")
    run = RunResult(returncode=returncode, seconds=20.0)
    return collect_verify(run_dir, choice, run, facts, 60.0, CHECKS, env or {})


def test_gpu_run_with_p2p_over_nvlink_passes(tmp_path):
    result = _collect(_run_dir(tmp_path, "h200_default_p2p_cumem.log"), two_gpu_facts())
    assert result.passed
    checks = {c.name: c for c in result.checks}
    assert checks["transport"].status == "pass" and "P2P/CUMEM" in checks["transport"].detail
    assert "GPU 0→1 390 GB/s" in checks["p2p"].detail and "GPU 1→0 390 GB/s" in checks["p2p"].detail
    assert result.transport["pairs"]["0->1"]["main"] == "P2P/CUMEM"
    assert result.transport["nccl_version"] == "2.28.9+cuda13.0"
    assert result.findings == []


def test_gpu_run_falling_back_to_shm_on_nvlink_fails_the_transport_check(tmp_path):
    result = _collect(_run_dir(tmp_path, "h200_p2p_disabled_shm.log"), two_gpu_facts(), env={"NCCL_P2P_DISABLE": "1"})
    assert not result.passed
    transport = next(c for c in result.checks if c.name == "transport")
    assert transport.status == "fail" and not transport.passed
    assert "SHM" in transport.detail and "NV18" in transport.detail and "Fix:" in transport.detail
    assert result.findings[0]["id"] == "nccl-nvlink-not-used"


def test_a_failing_rank_and_a_crashed_launcher_are_both_reported(tmp_path):
    result = _collect(_run_dir(tmp_path, "h200_default_p2p_cumem.log", ddp_status="fail"), two_gpu_facts(), returncode=1)
    checks = {c.name: c for c in result.checks}
    assert checks["ddp"].detail == "rank 0: replica differs; rank 1: replica differs"
    assert checks["workers"].status == "fail" and "exited with status 1" in checks["workers"].detail
    assert not result.passed
