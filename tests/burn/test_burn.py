"""`gpurig burn` on two CPU processes: a healthy run passes with no finding; a flipped bit in one
product and a corrupted memory word are each caught and named; bad flags exit 2. The verdict rules
(stragglers, a GPU that differs from its siblings, clocks at the power limit, ECC) on documents."""

from __future__ import annotations

import json

import pytest

from gpurig.diagnose.burn import judge_burn

pytestmark = pytest.mark.slow


def _burn(run_cli, tmp_path, *extra, env=None):
    proc = run_cli("burn", "--device", "cpu", "--duration", "6s", "--out", str(tmp_path / "b"), "--json", *extra,
                   env=env, timeout=180)
    return proc, (json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None)


def test_a_healthy_run_passes_with_no_finding(run_cli, tmp_path):
    proc, doc = _burn(run_cli, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert doc["passed"] and [g["verdict"] for g in doc["gpus_judged"]] == ["pass", "pass"]
    assert all(not g["findings"] for g in doc["gpus_judged"])
    for rank in doc["ranks"]:
        assert set(rank["compute"]) == {"fp32", "bf16"} and all(c["mismatches"] == 0 for c in rank["compute"].values())
        assert rank["memory"]["bytes_tested"] >= 32 << 20 and rank["memory"]["errors"] == []
    assert (tmp_path / "b" / "burn.json").is_file()


def test_a_flipped_bit_and_a_bad_memory_word_are_caught_and_named(run_cli, tmp_path):
    proc, doc = _burn(run_cli, tmp_path, env={"GPURIG_BURN_FAULT": "flip:rank=1:dtype=fp32:iter=2,mem:rank=0"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    by = {g["rank"]: g for g in doc["gpus_judged"]}
    assert by[0]["verdict"] == "fail" and by[1]["verdict"] == "fail"
    sdc = [f for f in by[1]["findings"] if f["id"] == "burn-silent-data-corruption"]
    assert sdc and sdc[0]["evidence"]["dtype"] == "fp32" and sdc[0]["evidence"]["iterations"] == [2]
    assert "iteration 2" in sdc[0]["detail"]
    mem = [f for f in by[0]["findings"] if f["id"] == "burn-memory-error"]
    assert mem and mem[0]["evidence"]["offset_bytes"] == 12345 * 4 and "0xc0e4" in mem[0]["title"]
    assert not [f for f in by[0]["findings"] if f["id"] == "burn-silent-data-corruption"]


@pytest.mark.parametrize("args, words", [
    (["--quick", "--long"], "give one"),
    (["--duration", "2s"], "between 5 seconds and 24 hours"),
    (["--duration", "soon"], "is not a duration"),
    (["--gpus", "a,b"], "--gpus: 'a,b' must be GPU indices"),
    (["--gpus", "0"], "does not combine with --device cpu"),
])
def test_bad_flags_exit_2_naming_them(run_cli, tmp_path, args, words):
    proc = run_cli("burn", "--device", "cpu", *args, "--out", str(tmp_path / "b"), timeout=60)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_injected_fault_is_bad_input(run_cli, tmp_path):
    proc = run_cli("burn", "--device", "cpu", "--quick", env={"GPURIG_BURN_FAULT": "melt:rank=0"}, timeout=60)
    assert proc.returncode == 2 and "unknown fault 'melt'" in proc.stderr


def _doc(rates, sums=None, samples=None, before=None, after=None):
    ranks = []
    for i, r in enumerate(rates):
        ranks.append({"done": True, "device_name": "H200", "memory": {"errors": []},
                      "compute": {"bf16": {"tflops": r, "mismatches": 0, "iterations": 10, "size": 8192,
                                           "reference_checksum": (sums or [7] * len(rates))[i]}}})
    return {"device": "cuda", "ranks": ranks, "gpus": None, "nvml_samples": samples or [],
            "health_before": before or {}, "health_after": after or {}}


def test_a_straggler_is_watched_and_a_gpu_that_differs_from_its_siblings_fails(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = judge_burn(_doc([790, 792, 740]))
    assert [g["verdict"] for g in out["gpus_judged"]] == ["pass", "pass", "watch"] and out["passed"]
    assert "below the median" in out["gpus_judged"][2]["findings"][0]["title"]
    out = judge_burn(_doc([790, 790, 790], sums=[7, 7, 8]))
    assert [g["verdict"] for g in out["gpus_judged"]] == ["pass", "pass", "fail"] and not out["passed"]
    assert out["gpus_judged"][2]["findings"][0]["id"] == "burn-differs-from-siblings"


def test_nvml_clocks_at_the_power_limit_and_new_ecc_errors(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    hot = [{"gpus": [{"index": 0, "utilization_pct": 100, "sm_clock_mhz": 1500, "sm_clock_max_mhz": 1980,
                      "throttle_reasons": ["sw_power_cap"], "temperature_c": 70}]}] * 5
    out = judge_burn(_doc([790], samples=hot))
    assert out["gpus_judged"][0]["verdict"] == "watch"
    assert "1,500 MHz of 1,980 at its power limit" in out["gpus_judged"][0]["findings"][0]["title"]
    out = judge_burn(_doc([790], before={0: {"ecc_volatile_uncorrected": 0}}, after={0: {"ecc_volatile_uncorrected": 2}}))
    assert out["gpus_judged"][0]["verdict"] == "fail"
    assert out["gpus_judged"][0]["findings"][0]["id"] == "burn-new-memory-errors"


def test_an_xid_logged_for_the_gpu_during_the_run_fails_it(monkeypatch):
    from gpurig.probe.xid import bus_of, parse_xids

    log = ("[  12.3] NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
           "[1234.5] NVRM: Xid (PCI:0000:06:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n"
           "[1235.0] NVRM: Xid (PCI:0000:07:00): 13, Graphics Exception\n")
    xids = parse_xids(log)
    assert [(x["bus"], x["xid"]) for x in xids] == [("06:00", 79), ("07:00", 13)]
    assert bus_of("00000000:06:00.0") == "06:00" and bus_of(None) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    doc = _doc([790, 790], after={0: {"pci_bus_id": "00000000:06:00.0", "uuid": "GPU-a", "name": "H200"},
                                  1: {"pci_bus_id": "00000000:08:00.0", "uuid": "GPU-b", "name": "H200"}})
    doc["xids"] = xids
    out = judge_burn(doc)
    assert [g["verdict"] for g in out["gpus_judged"]] == ["fail", "pass"]  # GPU 1 is on another bus
    f = out["gpus_judged"][0]["findings"][0]
    assert f["id"] == "burn-xid" and "Xid 79" in f["title"] and "fallen off the bus" in f["title"]


def test_check_with_burn_runs_it_after_the_doctor_and_the_report_shows_it(monkeypatch, tmp_path):
    from gpurig.report.html import render_report
    from gpurig.suite import runner

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    order = []

    def fake(name):
        def step(ctx):
            order.append(name)
            return runner.StepResult(name, "passed", reason="fine",
                                     data={"facts": {}, "findings": []} if name == "doctor" else {})
        return step

    burn_doc = {"device": "cuda", "nproc": 2, "seconds": 31.0, **judge_burn(_doc([790, 700]))}

    def fake_burn(ctx):
        order.append("burn")
        return runner.StepResult("burn", "passed", reason="1 pass, 1 watch of 2", data=burn_doc)

    monkeypatch.setattr(runner, "STEPS", [(n, fake(n)) for n in ("doctor", "verify", "bench comm", "bench train")])
    monkeypatch.setattr(runner, "_step_burn", fake_burn)
    ctx = runner.CheckContext(device="cpu", nproc="2", out_dir=tmp_path, quick=True, echo=print, burn=True)
    doc = runner.run_check(ctx)
    assert order == ["doctor", "burn", "verify", "bench comm", "bench train"] and doc["burn"] is burn_doc
    page = render_report(doc)
    assert 'id="burn-table"' in page and "below the median" in page and "no GPU failed" in page
    assert 'id="burn"' not in render_report({**doc, "burn": None})  # no burn, no section
