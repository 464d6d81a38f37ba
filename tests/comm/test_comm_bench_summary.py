"""bench comm's summary of a real 2×H200 run: nccl-tests arithmetic, link efficiency and findings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from comm_facts import NCCL_FIXTURES

from gpurig.comm.bench import ring_capability, summarise
from gpurig.diagnose.links import link_capability
from gpurig.launch.plan import DeviceChoice
from gpurig.launch.runner import RunResult
from gpurig.probe.facts import RigFacts

RIG = Path(__file__).resolve().parents[1] / "fixtures" / "rigs" / "h200x2.json"
RUN = NCCL_FIXTURES / "h200x2_bench_run"


@pytest.fixture
def h200_facts() -> RigFacts:
    return RigFacts.from_dict(json.loads(RIG.read_text()))


def _summary(tmp_path, facts, edit=None):
    for f in RUN.iterdir():
        shutil.copy(f, tmp_path / f.name)
    if edit:
        data = json.loads((tmp_path / "result-rank0.json").read_text())
        edit(data)
        (tmp_path / "result-rank0.json").write_text(json.dumps(data))
    config = json.loads((tmp_path / "bench-config.json").read_text())
    choice = DeviceChoice(device="cuda", nproc=2, reason="2 visible GPUs")
    return summarise(tmp_path, choice, RunResult(returncode=0, seconds=14.0), config, facts, 120.0,
                     {"NCCL_NVLS_ENABLE": "0"})


def test_the_recorded_h200_rig_has_an_nvlink_capability_even_without_per_link_speeds(h200_facts):
    import copy

    blind = copy.deepcopy(h200_facts)
    for g in blind.gpus:
        for link in g.nvlinks:
            link.speed_gbps = None  # as older NVML fields answer on this machine
    cap = link_capability(blind, 0, 1)
    assert cap.kind == "nvlink" and cap.link == "NV18"
    assert cap.gbps == pytest.approx(18 * 25.0)  # no per-link speed: the nominal NVLink4 rate
    assert ring_capability(blind, 2).gbps == cap.gbps


def test_the_recorded_h200_rig_uses_the_measured_per_link_speed(h200_facts):
    cap = link_capability(h200_facts, 0, 1)
    assert cap.kind == "nvlink" and cap.link == "NV18"
    assert cap.gbps == pytest.approx(18 * 26.562)  # NVML's per-link speed, as `nvidia-smi nvlink -s` shows


def test_summary_of_the_real_run(tmp_path, h200_facts):
    out = _summary(tmp_path, h200_facts)
    assert out["ok"] and out["nccl"]["version"] == "2.28.9"
    assert out["nccl"]["settings"] == {"NCCL_NVLS_ENABLE": "0"}
    assert out["capability"]["kind"] == "nvlink"
    ranks = [json.loads((RUN / f"result-rank{r}.json").read_text())["bench"]["points"] for r in range(2)]
    gib = next(p for p in out["results"] if p["op"] == "allreduce" and p["bytes"] == 1 << 30)
    mean = (ranks[0][10]["seconds"] + ranks[1][10]["seconds"]) / 2  # nccl-tests averages the ranks
    assert gib["time_us"] == pytest.approx(mean * 1e6)
    assert gib["busbw_gbps"] == pytest.approx((1 << 30) / mean / 1e9)  # factor 2(n-1)/n = 1 at n = 2
    assert 0.5 < gib["efficiency"] < 0.9
    assert all(p["graph"] == (p["bytes"] <= 64 << 20) for p in out["results"])
    pairs = {r["pair"]: r for r in out["p2p"]["pairs"]}
    assert set(pairs) == {"0->1", "1->0"}
    assert 0.5 < pairs["0->1"]["one_way_efficiency"] < 1.0
    assert out["findings"] == []


def test_a_slow_pair_becomes_a_finding(tmp_path, h200_facts):
    def slow(data):
        data["bench"]["p2p"]["pairs"]["1->0"]["one_way_gbps"] = 40.0

    out = _summary(tmp_path, h200_facts, slow)
    (finding,) = out["findings"]
    assert finding["id"] == "p2p-link-slow" and finding["severity"] == "warn"
    assert finding["title"].startswith("GPU 1 → GPU 0 copies at 40 GB/s, 8% of its 18 × 26.562 GB/s NVLink")
