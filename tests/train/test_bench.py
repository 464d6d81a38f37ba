"""`gpurig bench train` planning (pure): process counts, workloads, bad input."""

from __future__ import annotations

import pytest

from gpurig.commands.bench_train import clock_cell
from gpurig.errors import BadInput
from gpurig.train.bench import (
    clock_ratios,
    counts_up_to,
    describe_workload,
    run_bench_train,
    scaling_findings,
    workload_config,
)


def test_counts_double_up_to_n_and_include_n():
    assert counts_up_to(1) == [1]
    assert counts_up_to(2) == [1, 2]
    assert counts_up_to(6) == [1, 2, 4, 6]
    assert counts_up_to(8) == [1, 2, 4, 8]


def test_long_workloads_compile_and_short_ones_do_not():
    assert workload_config("resnet50", "cuda", short=False).train.compile == "on"
    # under FSDP the workload runs as `gpurig train` would: eager, unless compile is asked for
    fsdp = workload_config("resnet50", "cuda", short=False, overrides=["train.strategy=fsdp"])
    assert fsdp.train.compile == "auto" and describe_workload("resnet50", fsdp).endswith(", FSDP, eager")
    fsdp_on = workload_config("resnet50", "cuda", short=False, overrides=["train.strategy=fsdp", "train.compile=on"])
    assert describe_workload("resnet50", fsdp_on).endswith(", FSDP, compiled")
    quick = workload_config("resnet50", "cuda", short=True)
    assert quick.train.compile == "off" and quick.train.steps == 50
    assert workload_config("resnet50-cifar", "cuda", short=False).train.compile == "auto"  # launch-bound: eager
    cpu = workload_config("cpu-cnn", "cpu", short=True, overrides=["data.batch_size=8"])
    assert cpu.model.name == "cnn" and cpu.data.batch_size == 8 and not cpu.checkpoint.enabled


def test_the_workload_line_says_whether_it_ran_compiled():
    assert describe_workload("gpt", workload_config("gpt", "cuda", short=False)).endswith(", compiled")
    eager = workload_config("gpt", "cuda", short=False, overrides=["train.compile=off"])
    assert describe_workload("gpt", eager).endswith(", eager (compile off)")
    assert "compile" not in describe_workload("resnet50-cifar", workload_config("resnet50-cifar", "cuda", short=False))


def test_the_workload_line_gives_the_batch_and_size_that_ran():
    line = describe_workload("resnet50", workload_config("resnet50", "cuda", short=False,
                                                         overrides=["data.batch_size=512", "data.image_size=160"]))
    assert "160x160" in line and "batch 512 per GPU" in line
    assert "16 x 1024 per GPU" in describe_workload("gpt", workload_config("gpt", "cuda", short=False))


def _clock(slow_mhz, gpu, capped=1.0, fast_mhz=None):
    return {"slowest_sm_clock_mhz": slow_mhz, "slowest_gpu": gpu, "fastest_sm_clock_mhz": fast_mhz or slow_mhz,
            "slowest_power_capped_fraction": capped, "power_limit_w": 700.0}


def _rows(eff, one_mhz, two_mhz, capped=1.0):
    rows = [{"nproc": 1, "scaling_efficiency": 1.0, "gpu_clock": _clock(one_mhz, 0, capped)},
            {"nproc": 2, "scaling_efficiency": eff, "gpu_clock": _clock(two_mhz, 1, capped, fast_mhz=1888)}]
    clock_ratios(rows)
    return rows


def test_lost_scaling_from_a_slower_power_capped_gpu_is_named_with_its_clocks():
    # the 2x H200 run: GPU 1 held 1,800 MHz in DDP, GPU 0 alone 1,894 MHz, both at the 700 W limit
    rows = _rows(0.957, 1894, 1800)
    assert rows[1]["clock_ratio"] == pytest.approx(1800 / 1894)
    (f,) = scaling_findings(rows, "cuda")
    assert f["id"] == "scaling-clock-paced" and f["severity"] == "info" and f["nproc"] == 2
    assert "1,800 MHz" in f["detail"] and "1,894 MHz" in f["detail"] and "GPU 1" in f["detail"]
    assert "700 W power limit 100%" in f["detail"] and "5.0%" in f["detail"]  # 1 - 1800/1894
    assert "same power" in f["detail"]  # why a power-capped chip is slower
    assert "Exposed communication" not in f["detail"]  # not measured in these rows
    rows[1]["step_time"] = {"comm_exposed_fraction": 0.018}
    (f,) = scaling_findings(rows, "cuda")
    assert "Exposed communication, calibrated apart, takes 1.8% of the step" in f["detail"]
    assert clock_cell(rows[1]["gpu_clock"]) == "1,800 MHz, power cap 100%"


def test_nvlink_that_never_slept_is_named_where_the_power_limit_held_the_clock():
    rows = _rows(0.967, 1863, 1832)
    (f,) = scaling_findings(rows, "cuda")
    assert "NVLink" not in f["detail"]  # the run did not report the links' state
    rows[0]["gpu_clock"].update(nvlink_awake_fraction=0.02, nvlink_low_power_threshold_ms=50.0)
    rows[1]["gpu_clock"].update(nvlink_awake_fraction=1.0, nvlink_low_power_threshold_ms=50.0)
    (f,) = scaling_findings(rows, "cuda")
    assert "NVLink stayed at full power through 100% of the timed steps" in f["detail"]
    assert "only after 50 ms without traffic" in f["detail"] and "asleep 98% of the time" in f["detail"]
    assert "SMs' clock" in f["detail"]
    rows[1]["gpu_clock"]["nvlink_awake_fraction"] = 0.5  # the links slept between steps: not the reason
    (f,) = scaling_findings(rows, "cuda")
    assert "NVLink" not in f["detail"]
    rows[1]["gpu_clock"].update(nvlink_awake_fraction=1.0, slowest_power_capped_fraction=0.0)
    (f,) = scaling_findings(rows, "cuda")  # below the power limit the links' power costs no clock
    assert "NVLink" not in f["detail"]


def test_no_clock_note_when_scaling_is_on_target_or_clocks_match_or_are_unknown():
    assert scaling_findings(_rows(0.985, 1894, 1800), "cuda") == []  # on target
    assert scaling_findings(_rows(0.96, 1894, 1890), "cuda") == []  # same clock: not the reason
    rows = [{"nproc": 1, "scaling_efficiency": 1.0}, {"nproc": 2, "scaling_efficiency": 0.95}]
    clock_ratios(rows)
    assert rows[1]["clock_ratio"] is None and scaling_findings(rows, "cuda") == []
    assert clock_cell(None) == "n/a"
    # not at a power limit: the clock is still named, without blaming the limit
    (f,) = scaling_findings(_rows(0.95, 1980, 1900, capped=0.0), "cuda")
    assert "power limit" not in f["detail"] and "1,900 MHz" in f["detail"]


def test_lost_scaling_with_idle_gpus_is_put_on_the_host():
    # FSDP eager on 2 H200s (2026-11-30): 0.695, both GPUs at 1,980 MHz and about 370 W of 700
    idle = {"slowest_sm_clock_mhz": 1980.0, "sm_clock_max_mhz": 1980, "power_w": 368.8, "power_limit_w": 700.0,
            "slowest_power_capped_fraction": 0.0, "slowest_gpu": 0}
    rows = [{"nproc": 1, "scaling_efficiency": 1.0, "gpu_clock": dict(idle)},
            {"nproc": 2, "scaling_efficiency": 0.695, "gpu_clock": dict(idle),
             "step_time": {"comm_exposed_fraction": 0.006, "data_wait_fraction": 0.003}}]
    clock_ratios(rows)
    (f,) = scaling_findings(rows, "cuda")
    assert "waiting for the host" in f["detail"] and "1,980 MHz" in f["detail"] and "369 W of their 700 W" in f["detail"]
    rows[1]["gpu_clock"]["power_w"] = 690.0  # busy GPUs: not the host, the generic reason stays
    (f,) = scaling_findings(rows, "cuda")
    assert "host" not in f["detail"] and "gpurig monitor" in f["detail"]
    rows[1]["gpu_clock"].pop("power_w")  # no power reading: no claim either way
    (f,) = scaling_findings(rows, "cuda")
    assert "host" not in f["detail"]


def test_bad_bench_input_is_named():
    with pytest.raises(BadInput, match="--workload"):
        workload_config("alexnet", "cpu", short=True)
    with pytest.raises(BadInput, match="--baseline"):
        run_bench_train(device="cpu", baseline="lightning")
    with pytest.raises(BadInput, match="too heavy for the CPU"):
        run_bench_train(device="cpu", workload="resnet50")
    with pytest.raises(BadInput, match="--nproc"):
        run_bench_train(device="cpu", nproc=2, counts=[1, 4])
