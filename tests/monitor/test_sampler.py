"""The sampler on scripted GPUs: values pass through, counters become rates, failures become values."""

from __future__ import annotations

import json

import pytest

from gpurig.monitor.sampler import FakeBackend, MonitorUnavailable, NvmlBackend, Sampler
from gpurig.monitor.samples import GpuSample, Sample, throttle_names


def test_first_sample_has_no_rates_then_counters_become_bytes_per_second():
    sampler = Sampler(FakeBackend(gpus=2, tick_s=0.5), clock=lambda: 100.0)
    first = sampler.sample()
    assert [g.index for g in first.gpus] == [0, 1]
    assert first.gpus[0].nvlink_tx_bytes_per_s is None  # one reading cannot give a rate
    second = sampler.sample()
    # the fake counters grow at 80 GB/s (NVLink) and 1 GB/s (PCIe) on a 0.5 s clock
    assert second.gpus[0].nvlink_tx_bytes_per_s == pytest.approx(80e9)
    assert second.gpus[1].nvlink_rx_bytes_per_s == pytest.approx(80e9)
    assert second.gpus[0].pcie_tx_bytes_per_s == pytest.approx(1e9)
    assert second.gpus[0].utilization_pct is not None and second.gpus[0].power_limit_w == 700.0
    assert second.time == 100.0


def test_counter_reset_gives_no_rate_rather_than_a_negative_one():
    levels = iter([0, 10_000, 5_000])

    class Resetting(FakeBackend):
        def read(self, index):
            reading = super().read(index)
            reading.counters = {"nvlink_tx": float(next(levels))}
            return reading

    sampler = Sampler(Resetting(gpus=1))
    sampler.sample()
    assert sampler.sample().gpus[0].nvlink_tx_bytes_per_s == pytest.approx(10_000)
    assert sampler.sample().gpus[0].nvlink_tx_bytes_per_s is None


def test_a_gpu_that_fails_to_read_is_reported_not_raised():
    class Lost(FakeBackend):
        def read(self, index):
            if index == 1:
                raise RuntimeError("GPU is lost")
            return super().read(index)

    sample = Sampler(Lost(gpus=2)).sample()
    assert sample.gpus[0].error is None
    assert sample.gpus[1].error == "RuntimeError: GPU is lost"


def test_unavailable_backend_raises_with_its_reason():
    sampler = Sampler(FakeBackend(unavailable="NVML could not start"))
    with pytest.raises(MonitorUnavailable, match="NVML could not start"):
        sampler.open()


def test_nvml_backend_without_a_driver_says_why_in_one_line():
    # This machine may or may not have NVML; when it has none, the reason is one readable line.
    try:
        with Sampler(NvmlBackend()) as sampler:
            assert sampler.backend.gpu_count() >= 1
    except MonitorUnavailable as exc:
        assert "\n" not in str(exc) and str(exc)


def test_sample_round_trips_through_json():
    sample = Sampler(FakeBackend(gpus=2)).sample()
    back = Sample.from_dict(json.loads(json.dumps(sample.to_dict())))
    assert back == sample


def test_recordings_load_with_and_without_the_nvlink_power_fields():
    from pathlib import Path

    fixtures = Path(__file__).parents[1] / "fixtures" / "monitor"
    # two idle H200s recorded by `gpurig monitor --record`: links asleep, 50 ms idle threshold
    new = Sample.from_dict(json.loads((fixtures / "h200x2_idle_nvlink.jsonl").read_text().splitlines()[-1]))
    assert [(g.nvlink_low_power, g.nvlink_low_power_threshold_ms) for g in new.gpus] == [(True, 50.0)] * 2
    # a recording from before those fields: unknown, not "awake"
    old = Sample.from_dict(json.loads((fixtures / "h200x2_training.jsonl").read_text().splitlines()[0]))
    assert old.gpus and all(g.nvlink_low_power is None for g in old.gpus)


def test_from_dict_names_the_bad_key():
    with pytest.raises(ValueError, match="'gpus'"):
        Sample.from_dict({"time": 1.0})
    with pytest.raises(ValueError, match=r"gpus\[0\]"):
        Sample.from_dict({"time": 1.0, "gpus": [{"name": "x"}]})


def test_throttle_reason_names():
    assert throttle_names(0x0) == []
    assert throttle_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal"]
    assert throttle_names(0x4 | 0x10000) == ["sw_power_cap", "0x10000"]


def test_memory_fraction_is_none_when_total_is_missing():
    assert GpuSample(index=0, memory_used_bytes=10).memory_used_fraction is None
    assert GpuSample(index=0, memory_used_bytes=10, memory_total_bytes=40).memory_used_fraction == 0.25


@pytest.mark.gpu
def test_nvml_reads_real_gpus():
    with Sampler(NvmlBackend()) as sampler:
        sampler.sample()
        sample = sampler.sample()
    assert sample.gpus, "NVML sees no GPU although CUDA does"
    for g in sample.gpus:
        assert g.error is None
        assert g.name and g.uuid and g.uuid.startswith("GPU-")
        assert g.memory_total_bytes and g.memory_total_bytes > 2**30
        assert g.utilization_pct is not None and 0 <= g.utilization_pct <= 100
        assert g.power_w is not None and g.power_limit_w and g.power_w <= 1.5 * g.power_limit_w
        assert g.sm_clock_mhz is not None and g.throttle_reasons is not None
        # PCIe traffic needs two readings; it is a rate (or None where the GPU does not count it)
        assert g.pcie_tx_bytes_per_s is None or g.pcie_tx_bytes_per_s >= 0
        if g.nvlink_tx_bytes_per_s is not None:  # a GPU with active NVLinks reports their power state
            assert g.nvlink_low_power in (True, False)
            assert g.nvlink_low_power_threshold_ms is None or g.nvlink_low_power_threshold_ms > 0
