"""The GPU clock watch of a training run: what it records, and that missing NVML is a value."""

from __future__ import annotations

import time

import pytest

from gpurig.diagnose.verdicts import training_verdicts
from gpurig.monitor.sampler import GpuReading, MonitorUnavailable
from gpurig.monitor.samples import GpuSample
from gpurig.train.clocks import ClockWatch, across_ranks, nvml_index_of


class Board:
    """A fake NVML backend: GPU `index` reads the clocks and reasons given, in turn."""

    def __init__(self, clocks, reasons, fail_open=False):
        self.clocks, self.reasons, self.fail_open = clocks, reasons, fail_open
        self.reads, self.opened, self.closed = 0, False, False

    def open(self):
        if self.fail_open:
            raise MonitorUnavailable("NVML could not start: no NVIDIA driver is loaded here")
        self.opened = True

    def close(self):
        self.closed = True

    def read(self, index):
        i = min(self.reads, len(self.clocks) - 1)
        self.reads += 1
        return GpuReading(gpu=GpuSample(index=index, sm_clock_mhz=self.clocks[i], sm_clock_max_mhz=1980,
                                        power_w=690.0, power_limit_w=700.0, temperature_c=45.0,
                                        throttle_reasons=self.reasons[i]))


def test_the_watch_records_mean_clock_power_and_how_often_the_power_limit_held_it():
    board = Board(clocks=[1800, 1820, 1840, 1860], reasons=[["sw_power_cap"], ["sw_power_cap"], [], []])
    watch = ClockWatch(index=1, every=0.001, backend=board).start()
    deadline = time.monotonic() + 5
    while board.reads < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    s = watch.stop()
    assert board.closed and watch.error is None
    assert s["samples"] >= 4 and s["gpu_index"] == 1
    assert s["sm_clock_min_mhz"] == 1800 and 1800 < s["sm_clock_mhz"] <= 1860
    assert s["sm_clock_max_mhz"] == 1980 and s["power_w"] == 690.0 and s["power_limit_w"] == 700.0
    assert 0 < s["power_capped_fraction"] <= 0.5 and s["thermal_fraction"] == 0.0
    assert 0 < s["seconds"] < 5  # how long it watched: the span its readings stand for


def test_the_watch_records_how_often_nvlink_was_awake_and_the_slowest_rank_carries_it():
    class Linked(Board):
        def read(self, index):
            r = super().read(index)
            r.gpu.nvlink_low_power = self.reads <= 1  # asleep at the first reading, then woken for good
            r.gpu.nvlink_low_power_threshold_ms = 50.0
            return r

    board = Linked(clocks=[1850] * 4, reasons=[["sw_power_cap"]] * 4)
    watch = ClockWatch(index=0, every=0.001, backend=board).start()
    deadline = time.monotonic() + 5
    while board.reads < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    s = watch.stop()
    assert 0.5 <= s["nvlink_awake_fraction"] < 1.0 and s["nvlink_low_power_threshold_ms"] == 50.0
    other = dict(s, sm_clock_mhz=1900.0, nvlink_awake_fraction=1.0)
    both = across_ranks([{"rank": 0, "gpu_clock": s}, {"rank": 1, "gpu_clock": other}])
    assert both["nvlink_awake_fraction"] == s["nvlink_awake_fraction"]  # the least awake rank
    assert both["nvlink_low_power_threshold_ms"] == 50.0
    no_links = Board(clocks=[1850], reasons=[[]])
    watch = ClockWatch(index=0, every=0.001, backend=no_links).start()
    time.sleep(0.02)
    assert watch.stop()["nvlink_awake_fraction"] is None  # no NVLink: unknown, not "asleep"


def test_without_nvml_the_watch_gives_none_and_says_why():
    watch = ClockWatch(index=0, backend=Board([1], [[]], fail_open=True)).start()
    assert watch.stop() is None
    assert "no NVIDIA driver" in watch.error


def test_a_gpu_that_stops_answering_keeps_what_was_read():
    class Flaky(Board):
        def read(self, index):
            if self.reads >= 2:
                raise RuntimeError("GPU is lost")
            return super().read(index)

    watch = ClockWatch(index=0, every=0.001, backend=Flaky([1700, 1750], [[], []])).start()
    time.sleep(0.2)
    s = watch.stop()
    assert s["samples"] == 2 and s["sm_clock_mhz"] == 1725 and "GPU is lost" in watch.error


@pytest.mark.parametrize(("uuid", "visible", "want"), [
    ("GPU-bbbb", "1", 1),  # by UUID, whatever CUDA_VISIBLE_DEVICES did
    ("bbbb", None, 1),  # torch gives the UUID without NVML's prefix
    (None, None, 0),  # no UUID, GPUs not renumbered: the same index
    (None, "1", None),  # renumbered and no UUID: unknown, no guess
    ("cccc", "0", None),
])
def test_the_watch_finds_the_nvml_gpu_of_this_process(uuid, visible, want):
    assert nvml_index_of(uuid, ["GPU-aaaa", "GPU-bbbb"], visible, 0) == want


def _rank(rank, mhz, capped):
    return {"rank": rank, "gpu_clock": {"sm_clock_mhz": mhz, "gpu_index": rank, "power_capped_fraction": capped,
                                        "power_limit_w": 700.0, "sm_clock_max_mhz": 1980}}


def test_a_run_names_its_slowest_gpu_and_the_verdict_says_it_paced_the_run():
    summary = {"world_size": 2, "device": "cuda", "step_time": {},
               "per_rank": [_rank(0, 1888, 1.0), _rank(1, 1800, 1.0)]}
    summary["gpu_clock"] = c = across_ranks(summary["per_rank"])
    assert (c["slowest_rank"], c["slowest_sm_clock_mhz"], c["fastest_rank"], c["fastest_sm_clock_mhz"]) == (1, 1800, 0, 1888)
    paced = [f for f in training_verdicts(summary) if f.id == "clock-paced"]
    assert len(paced) == 1 and paced[0].severity == "info"
    assert "1,800 MHz" in paced[0].title and "power limit" in paced[0].title
    assert "700 W" in paced[0].detail and "4.7%" in paced[0].detail  # 1 - 1800/1888


def test_no_pacing_verdict_for_matched_clocks_one_gpu_or_no_clocks():
    matched = {"world_size": 2, "per_rank": [_rank(0, 1888, 1.0), _rank(1, 1870, 1.0)]}
    matched["gpu_clock"] = across_ranks(matched["per_rank"])
    assert not [f for f in training_verdicts(matched) if f.id == "clock-paced"]
    assert across_ranks([{"rank": 0, "gpu_clock": None}, None]) is None
    assert not [f for f in training_verdicts({"world_size": 2, "gpu_clock": None}) if f.id == "clock-paced"]


def test_the_watch_finds_its_own_gpu_by_torchs_uuid(monkeypatch):
    import types

    import torch

    class Named(Board):
        def uuids(self):
            return ["GPU-aaaa", "GPU-bbbb"]

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # CUDA's device 0 is NVML's GPU 1
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: types.SimpleNamespace(uuid="bbbb"))
    watch = ClockWatch(every=0.001, backend=Named([1850], [[]])).start()
    time.sleep(0.05)
    s = watch.stop()
    assert watch.error is None and s["gpu_index"] == 1


def test_the_train_summary_prints_the_clocks_that_paced_the_run():
    from rich.console import Console

    from gpurig.commands.train import render_summary

    summary = {"world_size": 2, "steps": 100, "seconds": 9.0, "device_name": "NVIDIA H200",
               "per_rank": [_rank(0, 1888, 1.0), _rank(1, 1800, 1.0)]}
    summary["gpu_clock"] = across_ranks(summary["per_rank"])
    console = Console(record=True, width=200)
    render_summary(console, summary)
    text = console.export_text()
    assert ("GPU clocks: slowest 1,800 MHz (GPU 1), fastest 1,888 MHz (GPU 0), of 1,980 MHz max; "
            "at the power limit (700 W) 100% of the time") in text
    console = Console(record=True, width=200)
    render_summary(console, {"world_size": 2, "steps": 1, "seconds": 1.0, "gpu_clock": None})
    assert "clock" not in console.export_text()
