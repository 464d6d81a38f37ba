"""Real runs on the CPU: two gloo workers started by torchrun, exactly as users run `gpurig verify`.

Each injected fault (GPURIG_VERIFY_INJECT) must fail its own check and name the rank and what.
"""

from __future__ import annotations

import json

import psutil
import pytest

from gpurig.comm.verify import run_verify

pytestmark = pytest.mark.slow


def _workers_of(run_dir: str) -> list[int]:
    """Any process still running from this run folder (orphans included, not only our children)."""
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "gpurig.comm.workers.worker" in cmd and run_dir in cmd:
            left.append(p.info["pid"])
    return left


def test_healthy_run_passes_every_check_through_the_cli(run_cli, tmp_path):
    proc = run_cli("verify", "--device", "cpu", "--json", "--out", str(tmp_path), "--timeout", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["passed"] is True
    assert doc["device"] == "cpu" and doc["nproc"] == 2 and doc["backend"] == "gloo"
    checks = {c["name"]: c for c in doc["checks"]}
    assert list(checks) == ["collectives", "p2p", "ddp", "transport"]
    assert set(doc["checks"][0]) >= {"name", "passed", "detail", "seconds"}
    assert checks["collectives"]["status"] == "pass" and "exact" in checks["collectives"]["detail"]
    assert checks["p2p"]["status"] == "n/a" and "n/a on CPU" in checks["p2p"]["detail"]
    assert checks["ddp"]["status"] == "pass" and "Join" in checks["ddp"]["detail"]
    assert checks["transport"]["status"] == "n/a" and "not applicable (gloo)" in checks["transport"]["detail"]
    assert isinstance(doc["transport"], dict)
    run_dir = doc["run_dir"]
    assert run_dir.startswith(str(tmp_path))
    assert (tmp_path / run_dir[len(str(tmp_path)) + 1:] / "result-rank1.json").exists()


def test_perturbed_tensor_and_altered_gradient_fail_their_checks_naming_rank_1(monkeypatch, tmp_path):
    monkeypatch.setenv("GPURIG_VERIFY_INJECT", "perturb:rank=1,op=all_gather;ddp-grad:rank=1")
    result = run_verify(device="cpu", nproc=2, out_dir=tmp_path, timeout=60)
    checks = {c.name: c for c in result.checks}
    assert result.passed is False
    coll = checks["collectives"]
    assert coll.status == "fail"
    assert coll.detail.startswith("rank 1: all_gather float32 × 1: 1 of 2 elements wrong")
    assert "rank 0" not in coll.detail  # rank 0 received correct data
    ddp = checks["ddp"]
    assert ddp.status == "fail"
    assert "rank 1's replica differs from one process trained on the whole batch" in ddp.detail
    assert "rank(s) 1 differ bit-wise from rank 0" in ddp.detail
    assert checks["p2p"].status == "n/a" and checks["transport"].status == "n/a"


def test_a_rank_that_never_arrives_is_a_hang_that_names_op_and_rank(run_cli, tmp_path):
    proc = run_cli("verify", "--device", "cpu", "--json", "--out", str(tmp_path), "--timeout", "8",
                   env={"GPURIG_VERIFY_INJECT": "skip-collective:rank=1,op=broadcast"}, timeout=240)
    assert proc.returncode == 1, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["passed"] is False
    checks = {c["name"]: c for c in doc["checks"]}
    detail = checks["collectives"]["detail"]
    assert checks["collectives"]["status"] == "fail"
    assert detail.startswith("hang: broadcast #")
    assert "rank(s) 1 never arrived" in detail and "rank(s) 0 waited in it" in detail
    assert doc["hang"]["missing"] == [1] and doc["hang"]["op"] == "broadcast" and doc["hang"]["check"] == "collectives"
    assert checks["ddp"]["status"] == "not run"
    assert _workers_of(doc["run_dir"]) == []


def test_a_rank_that_raises_is_named_with_its_error_and_the_run_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("GPURIG_VERIFY_INJECT", "raise:rank=1,op=all_to_all")
    result = run_verify(device="cpu", nproc=2, out_dir=tmp_path, timeout=8)
    checks = {c.name: c for c in result.checks}
    detail = checks["collectives"].detail
    # Where rank 0 is stuck depends on timing: in the all_to_all rank 1 never entered, or (on gloo,
    # when that all_to_all fails on the peer's broken pair first) in the agreement after the check.
    assert (detail.startswith("hang: all_to_all #") and "rank(s) 1 never arrived" in detail) or \
        detail.startswith("hang: agree_to_continue #"), detail
    assert "rank 1: RuntimeError: injected fault: rank 1 raised instead of entering all_to_all" in detail
    assert checks["p2p"].status == "not run" and checks["ddp"].status == "not run"
    assert _workers_of(result.run_dir) == []


def test_bench_comm_on_cpu_reports_every_point_with_nccl_tests_arithmetic(run_cli, tmp_path):
    proc = run_cli("bench", "comm", "--device", "cpu", "--ops", "allreduce,allgather", "--max-bytes", "4KiB",
                   "--iters", "3", "--repeats", "2", "--json", env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["ok"] and doc["backend"] == "gloo" and doc["p2p"] is None
    assert [(p["op"], p["bytes"]) for p in doc["results"]] == [
        ("allreduce", 1024), ("allreduce", 4096), ("allgather", 1024), ("allgather", 4096)]
    for p in doc["results"]:
        assert p["time_us"] > 0 and p["graph"] is False and p["efficiency"] is None
        assert p["algbw_gbps"] == pytest.approx(p["bytes"] / (p["time_us"] * 1e-6) / 1e9)
        factor = 1.0 if p["op"] == "allreduce" else 0.5  # 2(n-1)/n and (n-1)/n at n = 2
        assert p["busbw_gbps"] == pytest.approx(p["algbw_gbps"] * factor)
    assert doc["capability"]["how"] == "n/a on CPU (gloo)"
    # without --out the run folder was temporary, and is gone
    assert doc["run_dir"] is None and not list(tmp_path.glob("gpurig-*"))


@pytest.mark.parametrize(
    "args, flag",
    [
        (["verify", "--device", "gpu"], "--device"),
        (["verify", "--device", "cpu", "--nproc", "0"], "--nproc"),
        (["verify", "--device", "cpu", "--nproc", "many"], "--nproc"),
        (["verify", "--timeout", "soon"], "--timeout"),
        (["verify", "--device", "cpu", "--timeout", "0"], "--timeout"),
        (["verify", "--colour"], "--colour"),
        (["bench", "comm", "--device", "cpu", "--ops", "allreduce,gossip"], "--ops"),
        (["bench", "comm", "--device", "cpu", "--min-bytes", "lots"], "--min-bytes"),
        (["bench", "comm", "--device", "cpu", "--min-bytes", "1MiB", "--max-bytes", "1KiB"], "--max-bytes"),
        (["bench", "comm", "--device", "cpu", "--graph", "maybe"], "--graph"),
        (["bench", "comm", "--device", "cpu", "--graph", "on"], "--graph"),
        (["bench", "comm", "--device", "cpu", "--dtype", "complex64"], "--dtype"),
        (["bench", "comm", "--device", "cpu", "--iters", "0"], "--iters"),
    ],
)
def test_bad_usage_exits_2_naming_the_flag(run_cli, args, flag):
    proc = run_cli(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert flag in proc.stderr
    assert proc.stdout == ""


def test_out_naming_a_file_is_bad_usage_and_the_file_is_kept(run_cli, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    proc = run_cli("verify", "--device", "cpu", "--out", str(target))
    assert proc.returncode == 2 and "--out" in proc.stderr and "not a folder" in proc.stderr
    assert target.read_text() == "keep me"


def test_a_malformed_injected_fault_is_bad_input(run_cli):
    proc = run_cli("verify", "--device", "cpu", env={"GPURIG_VERIFY_INJECT": "perturb:rank=one"})
    assert proc.returncode == 2
    assert "GPURIG_VERIFY_INJECT" in proc.stderr and "rank" in proc.stderr


def test_help_teaches_defaults_and_examples(run_cli):
    for args in (["verify", "--help"], ["bench", "comm", "--help"]):
        proc = run_cli(*args)
        assert proc.returncode == 0
        assert "Examples" in proc.stdout and "Exit status" in proc.stdout and "Defaults" in proc.stdout
