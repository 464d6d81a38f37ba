"""`gpurig burn` on the real GPUs: a short healthy run passes with every part measured, and the two
injected faults (one flipped bit in one product, one corrupted memory word) are caught on the GPU."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _burn(run_cli, tmp_path, name, *extra, env=None):
    proc = run_cli("burn", "--duration", "20s", "--out", str(tmp_path / name), "--json", *extra, env=env, timeout=400)
    assert proc.stdout.strip().startswith("{"), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def test_a_short_gpu_burn_measures_every_part_and_passes(run_cli, tmp_path):
    proc, doc = _burn(run_cli, tmp_path, "ok")
    assert doc["device"] == "cuda"
    assert proc.returncode == 0, [f["title"] for g in doc["gpus_judged"] for f in g["findings"]]
    for rank in doc["ranks"]:
        assert set(rank["compute"]) == {"bf16", "fp16", "tf32", "fp32"}
        assert all(c["mismatches"] == 0 and c["iterations"] > 0 for c in rank["compute"].values())
        mem = rank["memory"]
        assert mem["compiled"] is True and mem["errors"] == []
        assert mem["bytes_tested"] >= 0.9 * mem["free_bytes"]
        t = rank["transfers"]
        assert t["h2d_gbps"] > 0 and t["d2h_pageable_gbps"] > 0 and t["d2d_gbps"] > 0
        assert t["host_link"]["gbps"] and "findings" in t
    g = doc["gpus_judged"][0]
    assert g["uuid"] and doc["health_before"] and g["load"]["busy_samples"] > 0
    kept = json.loads((tmp_path / "ok" / "burn.json").read_text())  # the samples are in the run's file
    assert kept["nvml_samples"] and kept["passed"] == doc["passed"]


def test_a_flipped_bit_and_a_bad_word_are_caught_on_the_gpu(run_cli, tmp_path):
    proc, doc = _burn(run_cli, tmp_path, "fault", "--gpus", "0",
                      env={"GPURIG_BURN_FAULT": "flip:rank=0:dtype=bf16:iter=5,mem:rank=0"})
    assert proc.returncode == 1
    ids = [f["id"] for f in doc["gpus_judged"][0]["findings"]]
    assert "burn-silent-data-corruption" in ids and "burn-memory-error" in ids
    sdc = next(f for f in doc["gpus_judged"][0]["findings"] if f["id"] == "burn-silent-data-corruption")
    assert sdc["evidence"]["dtype"] == "bf16" and sdc["evidence"]["iterations"] == [5]
    mem = next(f for f in doc["gpus_judged"][0]["findings"] if f["id"] == "burn-memory-error")
    assert mem["evidence"]["offset_bytes"] == 12345 * 4 and mem["evidence"]["pattern"] == "address"
