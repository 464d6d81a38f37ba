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
    samples = [{"gpus": [_sample(0, 1670), _sample(1, 1665), _sample(2, 1560, power=600.0)]}] * 5
    out = judge_burn(_doc([790, 792, 740], samples=samples))
    assert [g["verdict"] for g in out["gpus_judged"]] == ["pass", "pass", "watch"] and out["passed"]
    assert "below the median" in out["gpus_judged"][2]["findings"][0]["title"]
    assert "it ran at 1,560 MHz and 600 W, its siblings at 1,668 MHz and 690 W" in out["gpus_judged"][2]["findings"][0]["detail"]
    out = judge_burn(_doc([790, 790, 790], sums=[7, 7, 8]))
    assert [g["verdict"] for g in out["gpus_judged"]] == ["pass", "pass", "fail"] and not out["passed"]
    assert out["gpus_judged"][2]["findings"][0]["id"] == "burn-differs-from-siblings"


def _sample(index, clock, reasons=("sw_power_cap",), temp=59.0, power=690.0):
    return {"index": index, "utilization_pct": 100, "sm_clock_mhz": clock, "sm_clock_max_mhz": 1980,
            "throttle_reasons": list(reasons), "temperature_c": temp, "power_w": power, "power_limit_w": 700.0}


def test_clocks_at_the_power_limit_are_held_against_the_siblings_not_the_maximum(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # One healthy H200 under bf16 GEMMs, as measured: about 1,670 of 1,980 MHz at 700 W. Not a finding.
    alone = [{"gpus": [_sample(0, 1670)]}] * 20
    out = judge_burn(_doc([650], samples=alone))
    assert out["gpus_judged"][0]["verdict"] == "pass" and out["gpus_judged"][0]["findings"] == []
    assert out["gpus_judged"][0]["load"]["capped_clock_mhz"] == 1670
    # Three siblings: GPU 2 holds 1,400 MHz at the same power limit while the others hold 1,670.
    three = [{"gpus": [_sample(0, 1670), _sample(1, 1665), _sample(2, 1400)]}] * 20
    out = judge_burn(_doc([650, 650, 650], samples=three))
    assert [g["verdict"] for g in out["gpus_judged"]] == ["pass", "pass", "watch"]
    assert "1,400 MHz at its power limit, 16% below its siblings (1,668 MHz)" in out["gpus_judged"][2]["findings"][0]["title"]
    # The board's hardware slowdown and a temperature throttle are findings on their own.
    slowed = [{"gpus": [_sample(0, 1200, ("hw_slowdown", "sw_thermal"), temp=91.0)]}] * 3
    out = judge_burn(_doc([650], samples=slowed))
    assert [f["id"] for f in out["gpus_judged"][0]["findings"]] == ["burn-hardware-slowdown", "burn-thermal-throttle"]
    assert "91 °C" in out["gpus_judged"][0]["findings"][1]["detail"]


def test_a_power_limit_below_the_default_and_new_ecc_errors(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = judge_burn(_doc([790], after={0: {"power_limit_w": 450.0, "power_default_limit_w": 700.0}}))
    assert out["gpus_judged"][0]["verdict"] == "watch" and out["passed"]
    f = out["gpus_judged"][0]["findings"][0]
    assert f["id"] == "burn-power-capped" and "450 W, below its default 700 W" in f["title"] and "-pl 700" in f["fix"]
    out = judge_burn(_doc([790], before={0: {"ecc_volatile_corrected": 3}}, after={0: {"ecc_volatile_corrected": 40}}))
    assert out["gpus_judged"][0]["verdict"] == "watch"
    assert "37 corrected ECC error(s) during the screen" in out["gpus_judged"][0]["findings"][0]["title"]
    out = judge_burn(_doc([790], before={0: {"ecc_volatile_uncorrected": 0}}, after={0: {"ecc_volatile_uncorrected": 2}}))
    assert out["gpus_judged"][0]["verdict"] == "fail"
    assert out["gpus_judged"][0]["findings"][0]["id"] == "burn-new-memory-errors"


def test_link_counters_that_rose_are_watched_and_steady_ones_are_not(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    before = {0: {"pcie_replay_count": 5, "nvlink_replay_errors": 0}, 1: {"pcie_replay_count": 5}}
    after = {0: {"pcie_replay_count": 9, "nvlink_replay_errors": 2}, 1: {"pcie_replay_count": 5}}
    out = judge_burn(_doc([790, 790], before=before, after=after))
    assert [g["verdict"] for g in out["gpus_judged"]] == ["watch", "pass"] and out["passed"]
    f = out["gpus_judged"][0]["findings"][0]
    assert f["id"] == "burn-link-retries" and "PCIe replays, NVLink replays rose" in f["title"]
    assert "PCIe replays: 5 before, 9 after" in f["detail"]


def test_copies_far_below_the_links_and_the_datasheet_are_watched_on_the_right_gpu(monkeypatch):
    """GPU 1's host link copies at a quarter of PCIe Gen5 x16 and its copy to GPU 0 at a tenth of the
    NVLinks between them; the run used NVML GPUs 2 and 3 (`--gpus 2,3`), which the facts know."""
    from gpurig.burn.run import judge_links
    from gpurig.probe.facts import GpuFacts, NvLinkFacts, RigFacts

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    buses = {2: "00000000:1B:00.0", 3: "00000000:43:00.0"}
    facts = RigFacts(gpus=[GpuFacts(index=i, name="NVIDIA H200", pci_bus_id=buses[i], compute_capability="9.0",
                                    pcie_gen_max=5, pcie_width_max=16, pcie_gen_current=5, pcie_width_current=16,
                                    nvlinks=[NvLinkFacts(link=k, active=True, speed_gbps=26.562,
                                                         remote_pci_bus_id=buses[5 - i]) for k in range(18)])
                           for i in (2, 3)])
    good = {"h2d_gbps": 55.0, "d2h_gbps": 54.0, "bidirectional_gbps": 95.0, "d2d_gbps": 4150.0}
    doc = _doc([790, 790])
    doc["nvml_indices"] = [2, 3]
    doc["ranks"][0]["transfers"] = dict(good)
    doc["ranks"][1]["transfers"] = dict(good, h2d_gbps=15.0)
    doc["ranks"][0]["p2p"] = {"bytes": 1 << 28, "pairs": {
        "0->1": {"src": 0, "dst": 1, "one_way_gbps": 400.0, "bidirectional_gbps": 780.0},
        "1->0": {"src": 1, "dst": 0, "one_way_gbps": 45.0, "bidirectional_gbps": 90.0}}}
    judge_links(doc, facts)
    assert doc["ranks"][0]["transfers"]["host_link"]["how"] == "PCIe Gen5 x16"
    assert [r["capability"] for r in doc["p2p"]["pairs"]] == ["18 × 26.562 GB/s NVLink"] * 2
    out = judge_burn(doc)
    assert [g["index"] for g in out["gpus_judged"]] == [2, 3]
    assert [g["verdict"] for g in out["gpus_judged"]] == ["pass", "watch"] and out["passed"]
    ids = [f["id"] for f in out["gpus_judged"][1]["findings"]]
    assert ids == ["burn-host-link-slow", "burn-p2p-link-slow"]
    assert "GPU 3 → GPU 2 copies at 45 GB/s" in out["gpus_judged"][1]["findings"][1]["title"]


DCGM = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
BURN = DCGM.parent / "burn"


def test_dcgm_documents_of_both_shapes_are_read_per_gpu():
    from gpurig.diagnose.dcgm import dcgm_findings, parse_dcgm_diag

    three = parse_dcgm_diag((DCGM / "diag3_pass.json").read_text())
    assert three["version"] == "3.3.9" and {r["status"] for r in three["results"]} == {"pass"}
    assert sorted({r["gpu"] for r in three["results"]}) == [0, 1]
    four = parse_dcgm_diag((DCGM / "diag4_memory_fail.json").read_text())
    assert four["version"] == "4.2.3"
    assert [(f["severity"], f["test"]) for f in dcgm_findings(four, 1)] == [("fail", "memory")]
    assert "A DBE occurred on GPU 1" in dcgm_findings(four, 1)[0]["detail"]
    # GPU 0: persistence mode is a setting and a warning is a warning: watched, not failed.
    assert [(f["severity"], f["test"]) for f in dcgm_findings(four, 0)] == [("watch", "software"),
                                                                           ("watch", "targeted_stress")]
    with pytest.raises(ValueError, match="no JSON document"):
        parse_dcgm_diag("Error: unable to connect to host engine at localhost.")
    odd = parse_dcgm_diag('{"tests": [{"name": "pcie", "results": [{"entity_id": 0, "status": "Inconclusive"}]}]}')
    assert odd["results"][0]["status"].startswith("unknown") and dcgm_findings(odd, 0)[0]["severity"] == "watch"


def test_dcgm_runs_after_the_screen_and_its_verdict_is_folded_in(tmp_path, monkeypatch):
    """A stand-in `dcgmi` on the PATH prints the 4.x document and exits 226, as dcgmi does on a failure."""
    import sys

    from gpurig.burn.run import run_dcgm

    fake = tmp_path / "bin" / "dcgmi"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint(open({str(DCGM / 'diag4_memory_fail.json')!r}).read())\n"
                    "open(sys.argv[0] + '.args', 'w').write(' '.join(sys.argv[1:]))\nsys.exit(226)\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{__import__('os').environ['PATH']}")
    out = run_dcgm(tmp_path, [0, 1])
    assert out["returncode"] == 226 and "error" not in out and out["version"] == "4.2.3"
    assert (tmp_path / "bin" / "dcgmi.args").read_text() == "diag -r 2 -j -i 0,1"
    assert (tmp_path / "dcgm.txt").is_file()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    doc = _doc([790, 790])
    doc["dcgm"] = out
    judged = judge_burn(doc)
    assert [g["verdict"] for g in judged["gpus_judged"]] == ["watch", "fail"] and not judged["passed"]
    assert judged["gpus_judged"][1]["findings"][0]["id"] == "burn-dcgm"
    # dcgmi that cannot reach its host engine: said, not a failed GPU.
    fake.write_text(f"#!{sys.executable}\nprint('Error: unable to establish a connection to the specified host: "
                    "localhost')\nraise SystemExit(255)\n")
    out = run_dcgm(tmp_path, [0])
    assert "unable to establish a connection" in out["error"] and "exit 255" in out["error"]


def test_dcgm_needs_dcgmi_and_a_gpu(run_cli, tmp_path):
    import os
    import sys

    bare = tmp_path / "bare"  # a PATH with python but no dcgmi
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    proc = run_cli("burn", "--device", "cpu", "--quick", "--dcgm", "--out", str(tmp_path / "b"), timeout=60,
                   env={"PATH": str(bare)})
    assert proc.returncode == 2 and "--dcgm: `dcgmi` is not on the PATH" in proc.stderr
    assert "datacenter-gpu-manager" in proc.stderr and not (tmp_path / "b").exists()
    fake = tmp_path / "bin" / "dcgmi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    proc = run_cli("burn", "--device", "cpu", "--quick", "--dcgm", "--out", str(tmp_path / "b"), timeout=60,
                   env={"PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert proc.returncode == 2 and "--dcgm" in proc.stderr and "needs a GPU" in proc.stderr


def test_a_real_h200_run_passes_and_its_report_plots_clock_power_and_temperature():
    """One H200's default burn (3 minutes): at its 700 W limit it held about 1,670 of 1,980 MHz, as
    every healthy H200 does under bf16 GEMMs: judged again, it passes with no finding."""
    from gpurig.report.html import render_report

    doc = json.loads((BURN / "h200_default.json").read_text())
    out = judge_burn(doc)
    (g,) = out["gpus_judged"]
    assert out["passed"] and g["verdict"] == "pass" and g["findings"] == []
    assert 1600 < g["load"]["capped_clock_mhz"] < 1750 and g["load"]["power_w"] > 500
    assert g["compute"]["bf16"]["vs_plain"] > 0.95 and g["memory"]["vs_copy"] > 0.8
    html = render_report({"burn": {**doc, **out}})
    assert "SM clock, power and temperature" in html and "MHz" in html


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


def test_ctrl_c_stops_the_workers_and_shows_the_partial_result(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-m", "gpurig", "burn", "--device", "cpu", "--duration", "90s", "--out",
                             str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, COLUMNS="200"))
    try:
        deadline = time.monotonic() + 150
        while not (run / "result-rank0.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert (run / "result-rank0.json").is_file(), "the first part never finished"
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "stopped before the end: the partial result" in stdout and "fp32 TFLOP/s" in stdout
    assert "Traceback" not in stdout + stderr
    kept = json.loads((run / "burn.json").read_text())
    assert kept["interrupted"] and kept["ranks"][0]["compute"]["fp32"]["mismatches"] == 0
    # Stopped on purpose: judged on what ran, not failed as a worker that died; but not passed either.
    assert [g["verdict"] for g in kept["gpus_judged"]] == ["incomplete", "incomplete"] and not kept["passed"]
    assert "did not finish" not in stdout and "incomplete" in stdout


def test_xid_events_from_nvml_are_read_where_the_kernel_log_is_closed():
    from types import SimpleNamespace

    from gpurig.probe.xid import XidEvents

    class Nvml:
        """NVML's event API as nvidia-ml-py exposes it: one Xid 79 waiting on GPU 1."""

        def __init__(self):
            self.waiting = [SimpleNamespace(device="h1", eventData=79, eventType=0x8)]
            self.freed = self.shut = False

        def nvmlInit(self): pass
        def nvmlShutdown(self): self.shut = True
        def nvmlEventSetCreate(self): return "set"
        def nvmlEventSetFree(self, s): self.freed = True
        def nvmlDeviceGetCount(self): return 2
        def nvmlDeviceGetHandleByIndex(self, i): return f"h{i}"
        def nvmlDeviceGetIndex(self, h): return int(h[1:])
        def nvmlDeviceGetPciInfo(self, h): return SimpleNamespace(busId=f"00000000:0{int(h[1:]) + 6}:00.0".encode())

        def nvmlDeviceRegisterEvents(self, h, kind, s):
            assert kind == 0x8 and s == "set"

        def nvmlEventSetWait_v2(self, s, timeout_ms):
            if not self.waiting:
                raise RuntimeError("Timeout")
            return self.waiting.pop()

    fake = Nvml()
    events = XidEvents(fake).start()
    assert events.available and events.gpus == [0, 1]
    (x,) = events.poll()
    assert (x["gpu"], x["xid"], x["bus"], x["source"]) == (1, 79, "07:00", "nvml")
    assert events.poll() == []
    events.stop()
    assert fake.freed and fake.shut
    # No NVML at all: nothing available, nothing raised.
    broken = XidEvents(SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(OSError("libnvidia-ml.so.1 not found"))))
    assert not broken.start().available and "libnvidia-ml" in broken.error and broken.poll() == []



def test_counters_unread_before_are_no_evidence_and_string_keys_are_read(monkeypatch):
    """A document read back from JSON has string keys; a counter NVML did not give before the run
    cannot have risen during it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = judge_burn(_doc([790], before={"0": {"pcie_replay_count": None, "ecc_volatile_corrected": None}},
                          after={"0": {"pcie_replay_count": 40, "ecc_volatile_corrected": 12}}))
    assert out["gpus_judged"][0]["verdict"] == "pass"
    out = judge_burn(_doc([790], before={"0": {"ecc_volatile_uncorrected": 0}}, after={"0": {"ecc_volatile_uncorrected": 1}}))
    assert out["gpus_judged"][0]["verdict"] == "fail"


def test_memory_that_could_not_be_tested_is_said_and_a_vanished_error_keeps_its_count(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    doc = _doc([790, 790])
    doc["ranks"][0]["memory"] = {"errors": [], "bytes_tested": 0, "note": "not one block of 16 MiB could be "
                                 "allocated: the memory was not tested"}
    doc["ranks"][1]["memory"] = {"errors": [{"pattern": "random", "pass": 3, "offset_bytes": None, "read": None,
                                             "expected": None, "words_wrong": 1}]}
    out = judge_burn(doc)
    assert [g["verdict"] for g in out["gpus_judged"]] == ["watch", "fail"]
    assert "the memory was not tested" in out["gpus_judged"][0]["findings"][0]["title"]
    assert "could not be found again" in out["gpus_judged"][1]["findings"][0]["detail"]


def test_blocks_16_gib_apart_hold_different_patterns():
    """32-bit words wrap every 16 GiB: the address and random patterns still differ between blocks
    that far apart, so an alias between them would show."""
    import torch

    from gpurig.burn.patterns import PatternKernels

    words = 1 << 28  # 1 GiB blocks of 32-bit words
    for pattern in ("address", "random"):
        rows = PatternKernels.params(pattern, 0, 33, words)
        assert not torch.equal(rows[0], rows[16]) and not torch.equal(rows[16], rows[32])
    k = PatternKernels(False)
    buf = torch.empty(1 << 12, dtype=torch.int32)
    row = PatternKernels.params("random", 1, 1, 1 << 12)[0]
    k.fill(buf, row, "random")
    assert k.locate(buf, row, "random") is None  # nothing wrong: nothing to report, no exception


def test_dcgm_results_about_other_entities_do_not_fail_gpus():
    from gpurig.diagnose.dcgm import dcgm_findings, parse_dcgm_diag

    doc = ('{"tests": [{"name": "cpu_eud", "results": [{"entity_group": "CPU", "entity_id": 0, "status": "fail", '
           '"warnings": [{"warning": "CPU 0 failed"}]}]}, {"name": "memory", "results": [{"entity_group": "GPU", '
           '"entity_id": 1, "status": "pass"}]}]}')
    parsed = parse_dcgm_diag(doc)
    assert [(r["test"], r["gpu"]) for r in parsed["results"]] == [("memory", 1)]
    assert dcgm_findings(parsed, 0) == [] and dcgm_findings(parsed, 1) == []


def test_a_progress_line_two_ranks_ran_together_is_skipped_not_a_traceback():
    from gpurig.burn.run import progress_line

    shown = []
    progress_line('gpurig-burn: {"rank": 0, "part": "compute"}', shown.append)
    progress_line('gpurig-burn: {"rank": 0, "part": "compute"}{"rank": 1, "part": "comp', shown.append)
    progress_line('gpurig-burn: [1, 2]', shown.append)
    progress_line("some other line", shown.append)
    assert shown == [{"rank": 0, "part": "compute"}]
