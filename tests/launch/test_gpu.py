"""`gpurig launch` on real GPUs: a DDP run that succeeds, and an NCCL hang whose flight recorder
dumps name the rank that never arrived. Skipped without CUDA; the hang needs 2 GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import cuda_gpu_count

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.gpu


def _launch(run_cli, tmp_path, script, *flags):
    out = run_cli("launch", "--no-preflight", "--json", *flags, str(SCRIPTS / script), cwd=tmp_path, timeout=300)
    return out, json.loads(out.stdout)


def test_ddp_on_every_gpu_succeeds(run_cli, tmp_path):
    out, doc = _launch(run_cli, tmp_path, "ddp_ok.py")
    assert out.returncode == 0, out.stderr[-3000:]
    assert doc["plan"]["device"] == "cuda" and doc["plan"]["backend"] == "nccl"
    assert doc["plan"]["nproc_per_node"] == cuda_gpu_count()
    assert doc["result"]["status"] == "ok"


@pytest.mark.skipif(cuda_gpu_count() < 2, reason="needs 2 GPUs")
def test_nccl_hang_names_the_missing_rank_from_the_flight_recorder(run_cli, tmp_path):
    # NCCL waits up to a minute for the dump's stack traces (the main thread holds the GIL in
    # .item()); 10 s is plenty for two ranks and keeps the test short.
    out, doc = _launch(run_cli, tmp_path, "skip_allreduce_cuda.py", "--nproc-per-node", "2", "--timeout", "15",
                       "--env", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=10000")
    result = doc["result"]
    assert out.returncode != 0
    assert result["status"] == "hang", out.stderr[-4000:]
    assert result["missing_ranks"] == [1] and 0 in result["arrived_ranks"]
    assert result["exit_code"] == out.returncode and out.returncode in (1, 134)  # an exception, or NCCL's abort
    assert result["collective"] in ("all_reduce", "allreduce")
    ids = [m["id"] for m in result["matches"]]
    assert "nccl-watchdog-timeout" in ids
    run_dir = Path(doc["plan"]["run_dir"])
    if not run_dir.is_absolute():  # relative to the directory gpurig ran in
        run_dir = tmp_path / run_dir
    assert list(run_dir.glob("nccl_trace_rank_*")), "no flight recorder dump was written"
    assert result["hang_source"] == "flight-recorder"
