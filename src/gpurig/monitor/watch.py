"""The monitor's loop: samples on a fixed cadence, one snapshot with traffic rates, and waiting
for a GPU to appear. What to do with each sample (record it, judge it, draw it) is the caller's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

# Samples kept for the live verdicts: enough to smooth NVML's jumpy utilisation, small enough that
# a view left open for days holds constant memory.
VERDICT_WINDOW = 10


def snapshot(sampler: Any, interval: float, sleep: Callable[[float], None]) -> dict[str, Any]:
    """One sample with traffic rates: NVLink and PCIe counters need two readings to give a rate."""
    sampler.sample()
    sleep(min(interval, 0.5))
    return sampler.sample().to_dict()


def wait_for_gpu(sampler: Any, interval: float, sleep: Callable[[float], None]) -> bool:
    """Poll until NVML answers with a GPU; False when interrupted (Ctrl-C is a normal way out)."""
    from gpurig.monitor.sampler import MonitorUnavailable

    try:
        while True:
            sleep(max(interval, 2.0))
            try:
                sampler.open()
                return True
            except MonitorUnavailable:
                continue
    except KeyboardInterrupt:
        return False


def samples_every(sampler: Any, interval: float, count: int = 0,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """Sample every `interval` seconds on a fixed cadence (not drifting by the time sampling takes),
    `count` samples or, with 0, until the caller stops (Ctrl-C reaches the caller)."""
    taken = 0
    next_at = time.monotonic()
    while count == 0 or taken < count:
        yield sampler.sample().to_dict()
        taken += 1
        if count and taken >= count:
            return
        next_at += interval
        delay = next_at - time.monotonic()
        if delay < 0:  # fell behind (a slow NVML call): skip ahead rather than burst
            next_at = time.monotonic()
            delay = 0
        sleep(delay)
