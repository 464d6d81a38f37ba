"""Bottleneck verdicts on training summaries (the keys `gpurig train` writes) and monitor samples."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpurig.diagnose.verdicts import sample_verdicts, training_verdicts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "monitor"
GIB = 2**30


def balanced() -> dict:
    """Two H200s, ResNet-50 bf16 batch 256: data wait 1%, exposed communication 4%, ranks even."""
    return {
        "world_size": 2, "device": "cuda",
        "step_time": {"mean_s": 0.0394, "data_wait_fraction": 0.01, "compute_fraction": 0.93,
                      "comm_exposed_fraction": 0.04},
        "per_rank": [
            {"rank": 0, "step_time_s": 0.0394, "data_wait_s": 0.0004, "compute_s": 0.0366, "comm_exposed_s": 0.0016},
            {"rank": 1, "step_time_s": 0.0394, "data_wait_s": 0.0004, "compute_s": 0.0367, "comm_exposed_s": 0.0015},
        ],
        "peak_memory_bytes": 100 * GIB, "memory_total_bytes": 140 * GIB,
        "batch_size_per_device": 256, "samples_per_s_per_device": 6502.0,
        "transport": {"0-1": "P2P/CUMEM"}, "links": {"0-1": "NV18"},
    }


def ids(findings) -> list[str]:
    return [f.id for f in findings]


def test_balanced_run_gets_an_ok_verdict_and_nothing_else():
    findings = training_verdicts(balanced())
    assert ids(findings) == ["training-balanced"]
    assert findings[0].severity == "ok"
    assert "compute 93%" in findings[0].title


def test_input_bound_is_the_headline_with_its_share_and_fix():
    s = balanced()
    s["step_time"].update(data_wait_fraction=0.41, compute_fraction=0.55)
    s["per_rank"][0]["data_wait_s"] = 0.0160
    s["per_rank"][1]["data_wait_s"] = 0.0175
    findings = training_verdicts(s)
    head = findings[0]
    assert head.id == "input-bound" and head.severity == "warn"
    assert head.title.startswith("input-bound: data wait is 41% of step time; raise workers or move the data to the GPU")
    assert "--set data.workers=" in head.fix and "--set data.decode=gpu" in head.fix  # GPU decode offered on CUDA
    s["device"] = "cpu"
    assert "data.decode" not in training_verdicts(s)[0].fix
    assert head.evidence["worst_rank"] == 1


def test_communication_bound_without_a_transport_problem():
    s = balanced()
    s["step_time"].update(comm_exposed_fraction=0.35, compute_fraction=0.6)
    head = training_verdicts(s)[0]
    assert head.id == "communication-bound"
    assert "transport" not in head.title
    assert "--set train.ddp_bucket_mb=100" in head.fix and "--set data.batch_size=512" in head.fix
    assert "gradient_as_bucket_view" not in head.fix  # gpurig's trainer does that already


def test_communication_bound_because_of_shm_instead_of_p2p_over_nvlink():
    s = balanced()
    s["step_time"].update(comm_exposed_fraction=0.35, compute_fraction=0.6)
    s["transport"] = {"0-1": "SHM"}
    head = training_verdicts(s)[0]
    assert head.id == "communication-bound" and "transport is why" in head.title
    assert "NV18" in head.detail and "SHM instead of P2P" in head.detail
    assert "NCCL_P2P_DISABLE" in head.fix


def test_communication_bound_over_pcie():
    s = balanced()
    s["step_time"].update(comm_exposed_fraction=0.30, compute_fraction=0.65)
    s["transport"] = {"0-1": "P2P"}
    s["links"] = {"0-1": "PHB"}
    head = training_verdicts(s)[0]
    assert "PCIe (PHB), not NVLink" in head.detail
    assert "PCIe is the limit" in head.fix and "--set train.grad_accum=4" in head.fix


def test_straggler_rank_that_computes_slower():
    s = balanced()
    s["per_rank"][1].update(compute_s=0.0366 * 1.4)
    s["per_rank"][0].update(comm_exposed_s=0.016)  # rank 0 waits for rank 1 in the all-reduce
    s["step_time"]["mean_s"] = 0.053
    findings = training_verdicts(s)
    assert findings[0].id == "straggler-rank"
    assert "rank 1" in findings[0].title and "computes slower" in findings[0].title
    assert findings[0].evidence["rank"] == 1


def test_straggler_rank_that_waits_for_data():
    s = balanced()
    s["per_rank"].append({"rank": 2, "step_time_s": 0.0394, "data_wait_s": 0.012, "compute_s": 0.0366,
                          "comm_exposed_s": 0.0})
    findings = training_verdicts(s)
    assert "straggler-rank" in ids(findings)
    f = next(f for f in findings if f.id == "straggler-rank")
    assert "rank 2" in f.title and "waits longer for data" in f.title


def test_small_differences_between_ranks_are_not_a_straggler():
    s = balanced()
    s["per_rank"][1]["compute_s"] = 0.0366 * 1.05
    assert "straggler-rank" not in ids(training_verdicts(s))


def test_launch_bound_small_steps_suggests_batch_graphs_compile():
    s = balanced()
    s["step_time"]["mean_s"] = 0.023
    s["batch_size_per_device"] = 32
    s["peak_memory_bytes"] = 100 * GIB
    findings = training_verdicts(s)
    assert findings[0].id == "launch-bound"
    assert "--set data.batch_size=128" in findings[0].fix and "CUDA graphs" in findings[0].fix
    assert "--set train.compile=on" in findings[0].fix


def test_launch_bound_is_dropped_when_samples_show_busy_gpus():
    s = balanced()
    s["step_time"]["mean_s"] = 0.012
    busy = [{"time": float(t), "gpus": [{"index": i, "utilization_pct": 98.0} for i in range(2)]} for t in range(5)]
    idle_ish = [{"time": float(t), "gpus": [{"index": i, "utilization_pct": 45.0} for i in range(2)]} for t in range(5)]
    assert "launch-bound" not in ids(training_verdicts(s, busy))
    f = next(f for f in training_verdicts(s, idle_ish) if f.id == "launch-bound")
    assert f.evidence["mean_gpu_utilization_pct"] == pytest.approx(45.0)


def test_launch_bound_never_on_cpu():
    s = balanced()
    s.update(device="cpu", memory_total_bytes=None)
    s["step_time"]["mean_s"] = 0.005
    assert "launch-bound" not in ids(training_verdicts(s))


def test_long_steps_on_idle_gpus_are_host_bound():
    # FSDP eager, ResNet-50 on 2 H200s (2026-11-30): 94 ms steps, 1,980 MHz, 448 W of 700 W
    s = balanced()
    s.update(strategy="fsdp", gpu_clock={"slowest_sm_clock_mhz": 1980.0, "sm_clock_max_mhz": 1980, "power_w": 448.0,
                                         "power_limit_w": 700.0})
    s["step_time"].update(mean_s=0.094, compute_fraction=0.99, comm_exposed_fraction=0.005)
    head = training_verdicts(s)[0]
    assert head.id == "host-bound" and head.severity == "warn" and "448 W of 700 W" in head.title
    assert "train.strategy=ddp" in head.fix and "torch.profiler" in head.fix
    s["strategy"] = "ddp"
    assert "train.compile=on" in training_verdicts(s)[0].fix
    s["gpu_clock"]["power_w"] = 690.0  # at the limit: the GPU is the limit, the run is balanced
    assert ids(training_verdicts(s)) == ["training-balanced"]
    s["gpu_clock"].update(power_w=448.0, slowest_sm_clock_mhz=1800.0)  # a lowered clock is not idling
    assert "host-bound" not in ids(training_verdicts(s))
    s["gpu_clock"]["slowest_sm_clock_mhz"] = 1980.0
    s["device"] = "cpu"
    assert "host-bound" not in ids(training_verdicts(s))


def test_memory_headroom_suggests_a_larger_batch():
    s = balanced()
    s["peak_memory_bytes"] = 21 * GIB
    findings = training_verdicts(s)
    assert ids(findings)[0] == "training-balanced"  # advice, not a bottleneck: the run is still balanced
    f = next(f for f in findings if f.id == "memory-headroom")
    assert f.severity == "info" and "21.0 GiB of 140.0 GiB (15%)" in f.title
    assert "--set data.batch_size=1024" in f.fix  # 21 GiB x 4 = 84 GiB <= 80% of 140; x 8 would not fit


def test_thermal_and_power_throttling_from_samples():
    rec = [{"time": float(t), "gpus": [
        {"index": 0, "utilization_pct": 99.0, "throttle_reasons": ["sw_power_cap"], "temperature_c": 70.0,
         "sm_clock_mhz": 1700, "sm_clock_max_mhz": 1980, "power_limit_w": 700.0},
        {"index": 1, "utilization_pct": 99.0, "throttle_reasons": ["hw_thermal"] if t % 2 else [],
         "temperature_c": 91.0, "sm_clock_mhz": 1400, "sm_clock_max_mhz": 1980},
    ]} for t in range(10)]
    findings = training_verdicts(balanced(), rec)
    thermal = next(f for f in findings if f.id == "throttling-thermal")
    assert thermal.severity == "warn" and "GPU 1" in thermal.title and "91 °C" in thermal.title
    power = next(f for f in findings if f.id == "throttling-power")
    assert power.severity == "info" and "GPU 0" in power.title  # running at the power cap is normal
    assert findings[0].id == "throttling-thermal"  # a warn outranks the ok verdict: no "balanced" headline
    assert "training-balanced" not in ids(findings)


def test_missing_values_give_no_verdict_on_them():
    assert training_verdicts({}) == []
    assert training_verdicts({"world_size": 2, "device": "cuda", "step_time": None, "per_rank": None,
                              "peak_memory_bytes": None, "memory_total_bytes": None}) == []
    s = balanced()
    s["memory_total_bytes"] = None  # e.g. the CPU
    s["per_rank"] = [{"rank": 0, "compute_s": None}, {"rank": 1}]
    s["step_time"]["data_wait_fraction"] = None
    found = ids(training_verdicts(s))
    assert found == ["training-balanced"]
    assert "memory-headroom" not in found and "straggler-rank" not in found


def test_worst_bottleneck_leads():
    s = balanced()
    s["step_time"].update(data_wait_fraction=0.25, comm_exposed_fraction=0.45, compute_fraction=0.3)
    assert ids(training_verdicts(s))[:2] == ["communication-bound", "input-bound"]


# ------------------------------------------------------------------ samples


def _samples(*gpus_per_sample):
    return [{"time": float(t), "gpus": [dict(g, index=i) for i, g in enumerate(gpus)]}
            for t, gpus in enumerate(gpus_per_sample)]


def test_idle_gpu_among_busy_ones():
    rec = _samples(*[[{"utilization_pct": 97.0}, {"utilization_pct": 0.0}]] * 4)
    findings = sample_verdicts(rec)
    assert findings[0].id == "gpu-idle" and findings[0].evidence["idle"] == [1]
    assert "GPU 1 idle while GPU 0 work" in findings[0].title


def test_one_gpu_at_lower_clocks():
    rec = _samples(*[[{"utilization_pct": 97.0, "sm_clock_mhz": 1980}, {"utilization_pct": 96.0, "sm_clock_mhz": 1500},
                      {"utilization_pct": 97.0, "sm_clock_mhz": 1970}]] * 3)
    findings = sample_verdicts(rec)
    assert ids(findings) == ["gpu-slow-clocks"] and findings[0].evidence["gpu"] == 1


def test_one_gpu_less_busy():
    rec = _samples(*[[{"utilization_pct": 95.0}, {"utilization_pct": 55.0}]] * 3)
    assert ids(sample_verdicts(rec)) == ["gpu-imbalance"]


def test_low_utilisation_everywhere():
    rec = _samples(*[[{"utilization_pct": 52.0}, {"utilization_pct": 48.0}]] * 3)
    assert ids(sample_verdicts(rec)) == ["low-utilization"]


def test_busy_balanced_gpus_give_nothing_and_idle_machine_says_so():
    assert sample_verdicts(_samples(*[[{"utilization_pct": 95.0}, {"utilization_pct": 94.0}]] * 3)) == []
    idle = sample_verdicts(_samples([{"utilization_pct": 0.0}, {"utilization_pct": 3.0}]))
    assert ids(idle) == ["gpus-idle"] and idle[0].severity == "info"


def test_samples_with_missing_values_or_errors_give_no_verdict():
    assert sample_verdicts([]) == []
    assert sample_verdicts(_samples([{"utilization_pct": None}, {}])) == []
    rec = _samples(*[[{"utilization_pct": 97.0}, {"error": "GPU is lost", "utilization_pct": 0.0}]] * 3)
    assert "gpu-idle" not in ids(sample_verdicts(rec))


def test_idle_time_before_and_after_a_job_is_not_judged():
    warmup = [[{"utilization_pct": 0.0, "throttle_reasons": ["gpu_idle"]}] * 2] * 5
    work = [[{"utilization_pct": 96.0, "throttle_reasons": []}] * 2] * 5
    assert sample_verdicts(_samples(*warmup, *work, *warmup)) == []


def test_input_does_not_change():
    s = balanced()
    before = copy.deepcopy(s)
    training_verdicts(s, _samples([{"utilization_pct": 97.0}]))
    assert s == before


# ------------------------------------------------------------------ real recordings


def _recording(name):
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{name} has not been recorded yet")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_real_cpu_summary_from_gpurig_train():
    # `run_training(preset("demo"), device="cpu", nproc=2)` on a shared 2-core machine: rank 1
    # computed 23% slower than rank 0 (the two processes competed for the cores).
    summary = json.loads((FIXTURES / "summary_cpu_demo_2rank.json").read_text())
    findings = training_verdicts(summary)
    assert ids(findings) == ["straggler-rank"]
    assert "rank 1" in findings[0].title
    assert "OMP_NUM_THREADS" in findings[0].fix  # the CPU fix, not the GPU one


def test_real_2gpu_ddp_recording_is_balanced():
    # `gpurig monitor --record` on 2x H200 while a 2-process DDP job ran (idle before and after).
    rec = _recording("h200x2_training.jsonl")
    busy = [s for s in rec if all((g.get("utilization_pct") or 0) >= 50 for g in s["gpus"])]
    assert len(busy) >= 10
    found = ids(sample_verdicts(rec))
    assert "gpu-idle" not in found and "gpu-imbalance" not in found and "gpu-slow-clocks" not in found


def test_real_one_gpu_recording_finds_the_idle_gpu():
    # The same machine with a matmul loop on GPU 0 only.
    rec = _recording("h200x2_one_gpu.jsonl")
    findings = sample_verdicts(rec)
    idle = next(f for f in findings if f.id == "gpu-idle")
    assert idle.evidence["idle"] == [1] and idle.evidence["working"] == [0]


def test_real_collective_hang_recording_names_the_stuck_gpu():
    # The same DDP job stopped on a per-rank time limit: rank 1 entered one more all-reduce than
    # rank 0, so GPU 1 spun at "100%" and 125 W while GPU 0 sat idle.
    rec = _recording("h200x2_collective_hang.jsonl")
    findings = sample_verdicts(rec)
    head = findings[0]
    assert head.id == "gpu-spinning" and head.evidence["gpu"] == 1
    assert head.evidence["other_gpus_idle"] is True and head.evidence["seconds"] > 60
    assert "looks stuck" in head.title and "no NVLink traffic" in head.title
    assert head.evidence["pids"] and str(head.evidence["pids"][0]) in head.fix
    # the idle GPU is the victim, not the problem: no idle/imbalance/low-utilisation noise
    assert not {"gpu-idle", "gpu-imbalance", "low-utilization"} & set(ids(findings))
    # the live view judges the last 10 samples: the hang shows there too
    assert ids(sample_verdicts(rec[-10:])) == ["gpu-spinning"]


def test_real_training_recording_has_no_stuck_gpu():
    assert "gpu-spinning" not in ids(sample_verdicts(_recording("h200x2_training.jsonl")))


def test_a_busy_low_power_gpu_moving_data_is_not_stuck():
    # an all-reduce benchmark: the kernel is busy, power moderate, NVLink full of traffic
    rec = _samples(*[[{"utilization_pct": 100.0, "power_w": 150.0, "power_limit_w": 700.0,
                       "nvlink_tx_bytes_per_s": 300e9}] * 2] * 12)
    assert "gpu-spinning" not in ids(sample_verdicts(rec))


def test_a_short_low_power_stretch_is_not_a_hang():
    stuck = {"utilization_pct": 100.0, "power_w": 120.0, "power_limit_w": 700.0}
    working = {"utilization_pct": 100.0, "power_w": 650.0, "power_limit_w": 700.0}
    rec = _samples(*[[working, working]] * 5, *[[stuck, working]] * 4, *[[working, working]] * 5)
    assert "gpu-spinning" not in ids(sample_verdicts(rec))
    rec = _samples(*[[working, working]] * 5, *[[stuck, working]] * 6)
    assert ids(sample_verdicts(rec))[0] == "gpu-spinning"
