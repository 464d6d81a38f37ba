"""`gpurig check`: every step on the CPU end to end, and the early stop when the doctor finds an error."""

import json
import re
from pathlib import Path

import pytest

from gpurig.suite import runner as check_mod


@pytest.mark.slow
def test_check_on_the_cpu_end_to_end(run_cli, tmp_path):
    report = tmp_path / "rig.html"
    r = run_cli("check", "--device", "cpu", "--json", "--out", str(tmp_path / "run"), "--report", str(report),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert [s["name"] for s in doc["steps"]] == ["doctor", "verify", "bench comm", "bench train"]
    assert all(s["status"] == "passed" for s in doc["steps"]), doc["steps"]
    assert doc["passed"] is True and doc["device"] == "cpu"
    import socket

    assert doc["host"] == socket.gethostname()  # which machine the report is about
    assert doc["verify"]["passed"] and {c["name"] for c in doc["verify"]["checks"]} >= {"collectives", "ddp"}
    assert doc["bench_comm"]["results"] and doc["bench_train"]["results"]
    # the same content is on disk, next to the logs
    assert json.loads((tmp_path / "run" / "check.json").read_text())["steps"] == doc["steps"]
    # the report shows what the JSON says: every finding, every check, the measured figures
    html = report.read_text()
    for f in doc["doctor"]["findings"]:
        assert f["id"] in html
    for c in doc["verify"]["checks"]:
        assert c["name"] in html
    point = doc["bench_comm"]["results"][-1]
    assert f"{point['busbw_gbps']:.2f}" in html
    assert re.search(r"<img[^>]+src=\"data:image/png;base64,|<svg", html), "the report carries its plots inline"
    # No external asset: nothing is loaded from elsewhere (a URL in a fix's text is only text).
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", html), \
        "no external assets"


def _fake_step(name, status, reason="", data=None):
    def step(ctx):
        return check_mod.StepResult(name, status, reason=reason, data=data)

    return step


def test_doctor_error_stops_the_other_steps_with_the_reason(monkeypatch, tmp_path):
    ran = []

    def should_not_run(ctx):
        ran.append("ran")
        raise AssertionError("a step ran after the doctor found an error")

    monkeypatch.setattr(check_mod, "STEPS", [
        ("doctor", _fake_step("doctor", "failed", "NVIDIA device present but the driver is not loaded",
                              {"facts": {}, "findings": []})),
        ("verify", should_not_run), ("bench comm", should_not_run), ("bench train", should_not_run),
    ])
    ctx = check_mod.CheckContext(device="cpu", nproc="2", out_dir=tmp_path, quick=True, echo=print)
    doc = check_mod.run_check(ctx)
    assert not ran
    assert doc["passed"] is False
    assert [s["status"] for s in doc["steps"]] == ["failed", "skipped", "skipped", "skipped"]
    assert "driver is not loaded" in doc["steps"][1]["reason"] and "gpurig doctor" in doc["steps"][1]["reason"]


def test_a_crashing_step_is_a_failed_step_not_a_dead_check(monkeypatch, tmp_path):
    def boom(ctx):
        raise RuntimeError("worker exploded")

    monkeypatch.setattr(check_mod, "STEPS", [
        ("doctor", _fake_step("doctor", "passed", "fine", {"facts": {}, "findings": []})),
        ("verify", boom),
        ("bench comm", _fake_step("bench comm", "passed", "ok", {"results": []})),
        ("bench train", _fake_step("bench train", "passed", "ok", {"results": []})),
    ])
    ctx = check_mod.CheckContext(device="cpu", nproc="2", out_dir=tmp_path, quick=True, echo=print)
    doc = check_mod.run_check(ctx)
    verify = doc["steps"][1]
    assert verify["status"] == "failed" and "worker exploded" in verify["reason"]
    assert doc["steps"][2]["status"] == "passed"  # later steps still run
    assert "RuntimeError" in Path(tmp_path / "verify-error.txt").read_text()


def test_bad_options_exit_2(run_cli, tmp_path):
    r = run_cli("check", "--device", "tpu")
    assert r.returncode == 2 and "--device" in r.stderr
    r = run_cli("check", "--nproc", "zero")
    assert r.returncode == 2 and "--nproc" in r.stderr
    r = run_cli("check", "--report", str(tmp_path / "missing" / "r.html"))
    assert r.returncode == 2 and "--report" in r.stderr


def test_verdicts_are_told_what_verify_saw_of_the_transport():
    summary = {
        "world_size": 2, "device": "cuda",
        "step_time": {"mean_s": 0.2, "data_wait_fraction": 0.02, "compute_fraction": 0.5, "comm_exposed_fraction": 0.48},
        "per_rank": [], "peak_memory_bytes": None, "memory_total_bytes": None,
    }
    verify = {"transport": {"verdict": [
        {"pair": "0->1", "src_gpu": 0, "dst_gpu": 1, "link": "NV18", "main": "SHM", "verdict": "fail"},
        {"pair": "1->0", "src_gpu": 1, "dst_gpu": 0, "link": "NV18", "main": "SHM", "verdict": "fail"},
    ]}}
    verdicts = check_mod._verdicts(summary, verify, None)
    assert verdicts and "communication-bound" in verdicts[0]["title"]
    assert "SHM" in verdicts[0]["detail"] and "NV18" in verdicts[0]["detail"]
    assert summary["verdicts"] == verdicts  # the report's training section shows the same verdicts


def test_unwritable_out_and_report_exit_2_before_any_step(run_cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("check", "--out", str(blocker / "run"))
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("check", "--out", str(tmp_path / "run"), "--report", str(blocker / "r.html"))
    assert r.returncode == 2 and "--report" in r.stderr
    assert "doctor" not in r.stdout  # nothing ran


def test_an_interrupted_step_stops_the_whole_check_and_the_report_says_where(monkeypatch, tmp_path):
    ran = []

    def stopped(ctx):
        raise KeyboardInterrupt  # what the runner passes up once the workers are stopped

    def should_not_run(ctx):
        ran.append("ran")
        raise AssertionError("a step ran after Ctrl-C")

    monkeypatch.setattr(check_mod, "STEPS", [
        ("doctor", _fake_step("doctor", "passed", "fine", {"facts": {}, "findings": []})),
        ("verify", stopped), ("bench comm", should_not_run), ("bench train", should_not_run),
    ])
    ctx = check_mod.CheckContext(device="cpu", nproc="2", out_dir=tmp_path, quick=True, echo=print)
    doc = check_mod.run_check(ctx)
    assert not ran
    assert doc["interrupted"] == "verify" and doc["signal"] == "SIGINT" and doc["passed"] is False
    assert [s["status"] for s in doc["steps"]] == ["passed", "interrupted", "skipped", "skipped"]
    assert "Ctrl-C" in doc["steps"][1]["reason"] and "interrupted during verify" in doc["steps"][2]["reason"]
    from gpurig.report.html import render_report

    html = render_report(doc)
    assert "interrupted during verify" in html and "some steps failed" not in html


@pytest.mark.slow
def test_ctrl_c_during_verify_stops_everything_at_once(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT, assert_no_process_left, signal_after

    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "gpurig", "check", "--device", "cpu", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    # the verify workers are up 3 s after its line: then a terminal's Ctrl-C to the foreground group
    text = signal_after(proc, "▶ verify", lambda: os.killpg(proc.pid, signal.SIGINT), limit=240, settle=3)
    rest = text[text.index("▶ verify"):]
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text and "bench comm (" in text  # later steps are listed as skipped, not run
    assert "interrupted during verify" in rest
    doc = json.loads((out / "check.json").read_text())
    assert doc["interrupted"] == "verify"
    assert [s["status"] for s in doc["steps"]][1:] == ["interrupted", "skipped", "skipped"]
    assert "interrupted during verify" in (out / "report.html").read_text()
    assert not (out / "bench-comm").exists()
    assert_no_process_left(str(out))


def test_an_earlier_checks_results_are_never_replaced_without_force(run_cli, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "check.json").write_text('{"earlier": true}')
    report = tmp_path / "rig.html"
    report.write_text("<p>earlier</p>")
    r = run_cli("check", "--device", "cpu", "--out", str(out))
    assert r.returncode == 2 and f"--out {out}" in r.stderr and "--force" in r.stderr
    r = run_cli("check", "--device", "cpu", "--out", str(tmp_path / "new"), "--report", str(report))
    assert r.returncode == 2 and f"--report {report}" in r.stderr and "--force" in r.stderr
    assert (out / "check.json").read_text() == '{"earlier": true}' and report.read_text() == "<p>earlier</p>"
    assert not (tmp_path / "new").exists()  # refused before anything was made
