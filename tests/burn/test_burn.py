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
