"""The terminal rendering of verify and bench comm, including the GPU-only parts, from plain data."""

from __future__ import annotations

from rich.console import Console

from gpurig.comm.results import CheckResult, VerifyResult
from gpurig.commands.bench_comm import render as render_bench
from gpurig.commands.verify import render as render_verify


def _console() -> Console:
    return Console(record=True, width=160, color_system=None)


def test_verify_table_shows_each_check_status_and_the_fix():
    result = VerifyResult(
        passed=False, device="cuda", nproc=2, backend="nccl", seconds=21.5, run_dir="runs/verify-x",
        checks=[
            CheckResult("collectives", True, "108 cases exact", 4.2, "pass"),
            CheckResult("p2p", True, "copies exact", 1.1, "pass"),
            CheckResult("ddp", False, "not run: the run stopped in check 'p2p'", None, "not run"),
            CheckResult("transport", False, "rank 0 (GPU 0) → rank 1 (GPU 1) uses SHM on 4 connection(s)", 0.01, "fail"),
        ],
        findings=[{"title": "NCCL sends over shared memory or the network between GPUs joined by NVLink",
                   "fix": "Unset NCCL_P2P_DISABLE"}],
    )
    console = _console()
    render_verify(console, result)
    text = console.export_text()
    assert "2 × cuda (nccl)" in text
    for word in ("collectives", "pass", "not run", "FAIL", "uses SHM on 4 connection(s)", "fix: Unset NCCL_P2P_DISABLE",
                 "verification failed in 21.5 s"):
        assert word in text


def test_bench_render_shows_points_p2p_matrix_efficiency_and_findings():
    data = {
        "ok": True, "error": None, "device": "cuda", "nproc": 2, "backend": "nccl", "dtype": "float32",
        "iters": 20, "warmup": 5, "repeats": 5, "run_dir": "runs/bench-x",
        "nccl": {"version": "2.28.9", "settings": {"NCCL_NVLS_ENABLE": "0"}},
        "capability": {"kind": "nvlink", "gbps": 478.1, "how": "18 × 26.562 GB/s NVLink", "link": "NV18"},
        "results": [
            {"op": "allreduce", "bytes": 1 << 20, "size": "1 MiB", "time_us": 16.0, "algbw_gbps": 65.5,
             "busbw_gbps": 65.5, "efficiency": 0.137, "graph": True},
            {"op": "allreduce", "bytes": 1 << 30, "size": "1 GiB", "time_us": 3280.0, "algbw_gbps": 327.4,
             "busbw_gbps": 327.4, "efficiency": 0.69, "graph": False},
        ],
        "p2p": {"bytes": 256 << 20, "pairs": [
            {"pair": "0->1", "one_way_gbps": 150.0, "bidirectional_gbps": 290.0, "capability": "18 × 26.562 GB/s NVLink",
             "one_way_efficiency": 0.31},
        ]},
        "findings": [{"title": "GPU 0 → GPU 1 copies at 150 GB/s, 31% of its 18 × 26.562 GB/s NVLink",
                      "fix": "Run `gpurig doctor`"}],
    }
    console = _console()
    render_bench(console, data)
    text = console.export_text()
    assert "NCCL 2.28.9; settings: NCCL_NVLS_ENABLE=0" in text
    assert "18 × 26.562 GB/s NVLink = 478 GB/s per direction" in text
    assert "1 GiB" in text and "327.400" in text and "69%" in text and "yes" in text
    assert "0 → 1" in text and "150.0" in text and "290.0" in text and "31%" in text
    assert "copies at 150 GB/s" in text
