"""`gpurig bench train` planning (pure): process counts, workloads, bad input."""

from __future__ import annotations

import pytest

from gpurig.errors import BadInput
from gpurig.train.bench import counts_up_to, describe_workload, run_bench_train, workload_config


def test_counts_double_up_to_n_and_include_n():
    assert counts_up_to(1) == [1]
    assert counts_up_to(2) == [1, 2]
    assert counts_up_to(6) == [1, 2, 4, 6]
    assert counts_up_to(8) == [1, 2, 4, 8]


def test_long_workloads_compile_and_short_ones_do_not():
    assert workload_config("resnet50", "cuda", short=False).train.compile == "on"
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


def test_bad_bench_input_is_named():
    with pytest.raises(BadInput, match="--workload"):
        workload_config("alexnet", "cpu", short=True)
    with pytest.raises(BadInput, match="--baseline"):
        run_bench_train(device="cpu", baseline="lightning")
    with pytest.raises(BadInput, match="too heavy for the CPU"):
        run_bench_train(device="cpu", workload="resnet50")
    with pytest.raises(BadInput, match="--nproc"):
        run_bench_train(device="cpu", nproc=2, counts=[1, 4])
