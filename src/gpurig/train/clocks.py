"""What clock each GPU ran at while training: the SM clock, power and clock-event reasons of a rank's
own GPU, read through NVML in a background thread during the timed steps.

Why it matters: a compute-bound step on a data-centre GPU often runs at the GPU's power limit
(ResNet-50 compiled in bf16 on an H200: 690 W of 700 W), where the driver lowers the SM clock until
the power fits. Chips differ, so two GPUs at the same limit run at different clocks (1,894 and
1,860 MHz measured on two H200s of one machine). In data-parallel training the ranks wait for each
other every step, so the slowest GPU's clock sets the pace, and a 2-GPU run can lose a few percent
against one GPU that no communication setting wins back. The summary records each rank's clocks so
that `gpurig bench train` and the verdicts can name the clock instead of blaming the all-reduce.

Reading NVML costs the training process nothing on the GPU and little on the CPU (a few queries
four times a second, in a thread that sleeps in between). Without NVML (a CPU run, no driver, no
nvidia-ml-py) the summary is None: missing is a value.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from gpurig.probe.nvml import POWER_REASONS, THERMAL_REASONS

EVERY_S = 0.25

def nvml_index_of(uuid: str | None, nvml_uuids: list[str | None], visible: str | None, torch_index: int) -> int | None:
    """The NVML index of the GPU that CUDA calls `torch_index`: by UUID where both sides give one,
    else by index when CUDA_VISIBLE_DEVICES does not renumber the GPUs; None when unknown."""
    if uuid:
        want = str(uuid).lower().removeprefix("gpu-")
        for i, u in enumerate(nvml_uuids):
            if u and u.lower().removeprefix("gpu-") == want:
                return i
    if visible is None and 0 <= torch_index < len(nvml_uuids):
        return torch_index
    return None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Mean SM clock and power over the samples, and how often the GPU was held back by its power
    limit or by heat (share of samples with such a clock-event reason active)."""
    clocks = [r["sm_clock_mhz"] for r in rows if r.get("sm_clock_mhz") is not None]
    if not clocks:
        return None
    power = [r["power_w"] for r in rows if r.get("power_w") is not None]
    with_reasons = [r for r in rows if r.get("reasons") is not None]

    def share(names: frozenset[str]) -> float | None:
        if not with_reasons:
            return None
        return sum(1 for r in with_reasons if names & set(r["reasons"])) / len(with_reasons)

    links = [r["nvlink_low_power"] for r in rows if r.get("nvlink_low_power") is not None]
    last = rows[-1]
    return {
        "samples": len(clocks),
        "sm_clock_mhz": sum(clocks) / len(clocks),
        "sm_clock_min_mhz": min(clocks),
        "sm_clock_max_mhz": last.get("sm_clock_max_mhz"),
        "power_w": sum(power) / len(power) if power else None,
        "power_limit_w": next((r["power_limit_w"] for r in reversed(rows) if r.get("power_limit_w")), None),
        "power_capped_fraction": share(POWER_REASONS),
        "thermal_fraction": share(THERMAL_REASONS),
        "temperature_c": last.get("temperature_c"),
        "gpu_index": last.get("gpu_index"),
        # share of readings with the NVLinks out of their low-power state (None: no NVLink, or not
        # reported); links woken by traffic more often than their idle threshold never sleep
        "nvlink_awake_fraction": sum(1 for v in links if not v) / len(links) if links else None,
        "nvlink_low_power_threshold_ms": last.get("nvlink_low_power_threshold_ms"),
    }


class ClockWatch:
    """Samples one GPU every `every` seconds between start() and stop(); summary() afterwards.

    `backend` is a gpurig.monitor backend (NVML by default; tests pass a fake); `index` its GPU
    index, or None to find the GPU of torch's current CUDA device."""

    def __init__(self, index: int | None = None, every: float = EVERY_S, backend: Any = None) -> None:
        self.index, self.every, self.backend = index, every, backend
        self.rows: list[dict[str, Any]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self.seconds: float | None = None  # how long it watched, start() to stop()

    def start(self) -> ClockWatch:
        self._t0 = time.perf_counter()
        try:
            if self.backend is None:
                from gpurig.monitor.sampler import NvmlBackend

                self.backend = NvmlBackend()
            self.backend.open()
            if self.index is None:
                self.index = self._current_gpu()
            if self.index is None:
                raise LookupError("cannot tell which NVML GPU is this process's CUDA device")
        except Exception as exc:  # no driver, no nvidia-ml-py, a renumbered GPU: no clocks, training goes on
            self.error = f"{type(exc).__name__}: {exc}"
            self._close()
            return self
        self._thread = threading.Thread(target=self._run, name="gpurig-clock-watch", daemon=True)
        self._thread.start()
        return self

    def _current_gpu(self) -> int | None:
        import torch

        dev = torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
        return nvml_index_of(str(uuid) if uuid else None, self.backend.uuids(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                             dev)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                g = self.backend.read(self.index).gpu
                self.rows.append({"sm_clock_mhz": g.sm_clock_mhz, "sm_clock_max_mhz": g.sm_clock_max_mhz,
                                  "power_w": g.power_w, "power_limit_w": g.power_limit_w,
                                  "reasons": g.throttle_reasons, "temperature_c": g.temperature_c,
                                  "nvlink_low_power": g.nvlink_low_power,
                                  "nvlink_low_power_threshold_ms": g.nvlink_low_power_threshold_ms,
                                  "gpu_index": self.index})
            except Exception as exc:  # a GPU that fell off the bus: stop watching, keep what was read
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.every)

    def stop(self) -> dict[str, Any] | None:
        if self._t0 is not None and self.seconds is None:
            self.seconds = time.perf_counter() - self._t0
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._close()
        return self.summary()

    def _close(self) -> None:
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception:
                pass

    def summary(self) -> dict[str, Any] | None:
        out = summarize(self.rows)
        if out is not None:
            out["seconds"] = self.seconds
        return out


def across_ranks(per_rank: list[Any]) -> dict[str, Any] | None:
    """The slowest and fastest GPU of a run by mean SM clock, from the per-rank summaries; None
    when no rank recorded clocks."""
    rows = [(r.get("rank"), r["gpu_clock"]) for r in per_rank
            if isinstance(r, dict) and isinstance(r.get("gpu_clock"), dict) and r["gpu_clock"].get("sm_clock_mhz")]
    if not rows:
        return None
    slow_rank, slow = min(rows, key=lambda rc: rc[1]["sm_clock_mhz"])
    fast_rank, fast = max(rows, key=lambda rc: rc[1]["sm_clock_mhz"])
    capped = [c["power_capped_fraction"] for _, c in rows if c.get("power_capped_fraction") is not None]
    awake = [c["nvlink_awake_fraction"] for _, c in rows if c.get("nvlink_awake_fraction") is not None]
    return {
        "slowest_rank": slow_rank, "slowest_gpu": slow.get("gpu_index"), "slowest_sm_clock_mhz": slow["sm_clock_mhz"],
        "fastest_rank": fast_rank, "fastest_gpu": fast.get("gpu_index"), "fastest_sm_clock_mhz": fast["sm_clock_mhz"],
        "sm_clock_max_mhz": slow.get("sm_clock_max_mhz"),
        "slowest_power_capped_fraction": slow.get("power_capped_fraction"),
        "power_capped_fraction": max(capped) if capped else None,
        "power_limit_w": slow.get("power_limit_w"),
        "power_w": slow.get("power_w"),
        "nvlink_awake_fraction": min(awake) if awake else None,  # the least any rank's links were awake
        "nvlink_low_power_threshold_ms": slow.get("nvlink_low_power_threshold_ms"),
    }
