"""The sampler: reads every GPU through a backend and turns raw counters into `Sample`s.

`NvmlBackend` reads NVML (the library behind `nvidia-smi`) and nothing else: it never initialises
CUDA, so watching a training job cannot disturb it. `FakeBackend` produces scripted readings so
tests and the cost bench run without a GPU.

    with Sampler() as sampler:       # raises MonitorUnavailable when there is no GPU or no NVML
        sample = sampler.sample()
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpurig.monitor.samples import GpuSample, ProcessSample, Sample, throttle_names
from gpurig.probe.nvml import guarded

COUNTERS = ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")


class MonitorUnavailable(Exception):
    """There is nothing to watch: no NVML library, no driver, or no GPU. The message says which."""


@dataclass
class GpuReading:
    """What a backend read from one GPU: instantaneous values, plus cumulative byte counters.

    The sampler turns the counters into rates by comparing two readings, so a backend only reports
    what the hardware counts. `counter_time_s` is when the counters were read (any monotonic clock).
    """

    gpu: GpuSample
    counters: dict[str, float] = field(default_factory=dict)  # COUNTERS -> bytes since some origin
    counter_time_s: float | None = None


class Backend(Protocol):
    def open(self) -> None:
        """Start; raise MonitorUnavailable with a one-line reason when there is nothing to read."""

    def close(self) -> None: ...

    def gpu_count(self) -> int: ...

    def read(self, index: int) -> GpuReading: ...


class Sampler:
    """Reads all GPUs once per `sample()` call; keeps only the previous counters (bounded memory)."""

    def __init__(self, backend: Backend | None = None, clock: Callable[[], float] = time.time) -> None:
        self.backend: Backend = backend if backend is not None else NvmlBackend()
        self.clock = clock
        self._previous: dict[int, GpuReading] = {}
        self._open = False

    def open(self) -> None:
        self.backend.open()
        self._open = True

    def close(self) -> None:
        if self._open:
            self.backend.close()
            self._open = False
        self._previous.clear()

    def __enter__(self) -> Sampler:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sample(self) -> Sample:
        if not self._open:
            self.open()
        now = self.clock()
        gpus = []
        for index in range(self.backend.gpu_count()):
            try:
                reading = self.backend.read(index)
            except Exception as exc:  # a GPU that vanished mid-run must not take the view down
                gpus.append(GpuSample(index=index, error=f"{type(exc).__name__}: {exc}"))
                self._previous.pop(index, None)
                continue
            self._fill_rates(index, reading)
            gpus.append(reading.gpu)
        return Sample(time=now, gpus=gpus)

    def _fill_rates(self, index: int, reading: GpuReading) -> None:
        """Rates from the difference of two counter readings; None on the first reading or a reset."""
        before = self._previous.get(index)
        self._previous[index] = reading
        if before is None or before.counter_time_s is None or reading.counter_time_s is None:
            return
        elapsed = reading.counter_time_s - before.counter_time_s
        if elapsed <= 0:
            return
        for name in COUNTERS:
            attr = f"{name}_bytes_per_s"
            if getattr(reading.gpu, attr) is not None:  # the backend measured the rate itself
                continue
            a, b = before.counters.get(name), reading.counters.get(name)
            if a is None or b is None or b < a:  # missing, or the counter wrapped / was reset
                continue
            setattr(reading.gpu, attr, (b - a) / elapsed)


# --------------------------------------------------------------------------------------------
# NVML


_UINT_MAX = 0xFFFFFFFF
_FI_NVLINK_TX, _FI_NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}, KiB counters
_FI_PCIE_TX, _FI_PCIE_RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES, byte counters
_FI_NVLINK_POWER_STATE = 167  # NVML_FI_DEV_NVLINK_GET_POWER_STATE: 1 while the links are in low power
_FI_NVLINK_POWER_THRESHOLD, _FI_NVLINK_POWER_THRESHOLD_UNITS = 168, 224  # the idle time before low power
_THRESHOLD_UNIT_MS = {0: 0.1, 1: 0.05}  # NVML_NVLINK_LOW_POWER_THRESHOLD_UNIT_100US, _50US


class NvmlBackend:
    """Reads GPUs through NVML (pynvml). Each call that a GPU does not support gives None.

    Values that change rarely are read less often, since every NVML query costs CPU (on GPUs whose
    driver runs in firmware, a round trip to it): the power limit every POWER_LIMIT_EVERY samples,
    the process list every PROCESSES_EVERY samples; the other values every sample.
    """

    POWER_LIMIT_EVERY = 30
    PROCESSES_EVERY = 5

    def __init__(self, time_calls: bool = False) -> None:
        # time_calls: add each NVML function's CPU seconds to `call_cpu_s` (for bench/monitor_cost.py)
        self.call_cpu_s: dict[str, float] | None = {} if time_calls else None
        self._reads: list[int] = []
        self._cached: list[dict[str, Any]] = []
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._static: list[dict[str, Any]] = []
        self._nvlink_scopes: list[list[int] | None] = []  # per GPU: scope ids to ask for NVLink counters
        self._pcie_fields: list[bool] = []  # per GPU: PCIe byte counters available as field values
        self.notes: list[str] = []  # how each metric was read, for --json and the docs

    def open(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise MonitorUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise MonitorUnavailable(f"NVML could not start ({exc}): no NVIDIA driver is loaded here") from None
        except OSError as exc:
            raise MonitorUnavailable(f"NVML could not be loaded ({exc})") from None
        self._nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            self.close()
            raise MonitorUnavailable("NVML runs but sees no GPU")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._static = [self._read_static(h) for h in self._handles]
        self._nvlink_scopes = [None] * count
        self._pcie_fields = [True] * count
        self._reads = [0] * count
        self._cached = [{} for _ in range(count)]
        for i, h in enumerate(self._handles):
            self._nvlink_scopes[i] = self._choose_nvlink_scopes(h)
            if self._nvlink_scopes[i]:
                self._static[i]["nvlink_low_power_threshold_ms"] = self._nvlink_threshold_ms(h)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None
        self._handles = []

    def gpu_count(self) -> int:
        return len(self._handles)

    def uuids(self) -> list[str | None]:
        """Each GPU's UUID in NVML's order ("GPU-..."), None where NVML does not give it."""
        return [s.get("uuid") for s in self._static]

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML query; an unsupported or failing query is None (a missing metric is a value)."""
        start = time.process_time() if self.call_cpu_s is not None else 0.0
        try:
            return guarded(self._nvml, fn, *args)  # the probe's one rule: unsupported is None
        finally:
            if self.call_cpu_s is not None:
                name = getattr(fn, "__name__", "?")
                self.call_cpu_s[name] = self.call_cpu_s.get(name, 0.0) + time.process_time() - start

    def _read_static(self, h: Any) -> dict[str, Any]:
        n = self._nvml
        name = self._call(n.nvmlDeviceGetName, h)
        uuid = self._call(n.nvmlDeviceGetUUID, h)
        return {
            "name": name.decode() if isinstance(name, bytes) else name,
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "sm_clock_max_mhz": self._call(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
        }

    def _choose_nvlink_scopes(self, h: Any) -> list[int] | None:
        """NVLink counters: one aggregate query (scope UINT_MAX) where the driver accepts it,
        else one query per active link; None when the GPU has no active NVLink."""
        n = self._nvml
        active = [link for link in range(n.NVML_NVLINK_MAX_LINKS)
                  if self._call(n.nvmlDeviceGetNvLinkState, h, link) == n.NVML_FEATURE_ENABLED]
        if not active:
            return None
        values = self._call(n.nvmlDeviceGetFieldValues, h, [(_FI_NVLINK_TX, _UINT_MAX)])
        if values is not None and values[0].nvmlReturn == n.NVML_SUCCESS:
            self.notes.append("nvlink: aggregate counters (scope UINT_MAX)")
            return [_UINT_MAX]
        self.notes.append(f"nvlink: per-link counters on {len(active)} link(s)")
        return active

    def _nvlink_threshold_ms(self, h: Any) -> float | None:
        """How long the links stay idle before they drop to low power (ms); None where not given."""
        n = self._nvml
        values = self._call(n.nvmlDeviceGetFieldValues, h,
                            [(_FI_NVLINK_POWER_THRESHOLD, 0), (_FI_NVLINK_POWER_THRESHOLD_UNITS, 0)])
        if not values or len(values) < 2 or any(v.nvmlReturn != n.NVML_SUCCESS for v in values):
            return None
        unit = _THRESHOLD_UNIT_MS.get(int(values[1].value.uiVal))
        return None if unit is None else int(values[0].value.uiVal) * unit

    def read(self, index: int) -> GpuReading:
        n = self._nvml
        h = self._handles[index]
        static = self._static[index]
        gpu = GpuSample(index=index, name=static["name"], uuid=static["uuid"],
                        sm_clock_max_mhz=static["sm_clock_max_mhz"],
                        nvlink_low_power_threshold_ms=static.get("nvlink_low_power_threshold_ms"))
        util = self._call(n.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            gpu.utilization_pct = float(util.gpu)
            gpu.memory_utilization_pct = float(util.memory)
        mem = self._call(n.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            gpu.memory_used_bytes, gpu.memory_total_bytes = int(mem.used), int(mem.total)
        power = self._call(n.nvmlDeviceGetPowerUsage, h)  # milliwatts
        gpu.power_w = power / 1000.0 if power is not None else None
        tick, cache = self._reads[index], self._cached[index]
        self._reads[index] += 1
        if tick % self.POWER_LIMIT_EVERY == 0:
            limit = self._call(n.nvmlDeviceGetEnforcedPowerLimit, h)
            cache["power_limit_w"] = limit / 1000.0 if limit is not None else None
        gpu.power_limit_w = cache.get("power_limit_w")
        temp = self._call(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        gpu.temperature_c = float(temp) if temp is not None else None
        gpu.sm_clock_mhz = self._call(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)
        reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = self._call(reasons_fn, h)
        gpu.throttle_reasons = throttle_names(int(mask)) if mask is not None else None
        if tick % self.PROCESSES_EVERY == 0:
            cache["processes"] = self._processes(h)
        gpu.processes = list(cache.get("processes") or [])
        counters, counter_time = self._counters(index, h, gpu)
        return GpuReading(gpu=gpu, counters=counters, counter_time_s=counter_time)

    def _counters(self, index: int, h: Any, gpu: GpuSample) -> tuple[dict[str, float], float]:
        """Cumulative PCIe and NVLink byte counters, and NVLink's power state, read in one NVML call."""
        n = self._nvml
        request: list[tuple[str, int, int]] = []
        if self._pcie_fields[index]:
            request += [("pcie_tx", _FI_PCIE_TX, 0), ("pcie_rx", _FI_PCIE_RX, 0)]
        for scope in self._nvlink_scopes[index] or []:
            request += [("nvlink_tx", _FI_NVLINK_TX, scope), ("nvlink_rx", _FI_NVLINK_RX, scope)]
        if self._nvlink_scopes[index]:
            request.append(("nvlink_power_state", _FI_NVLINK_POWER_STATE, 0))
        counters: dict[str, float] = {}
        stamp = time.monotonic()
        if request:
            values = self._call(n.nvmlDeviceGetFieldValues, h, [(fid, scope) for _, fid, scope in request])
            for (name, _fid, _scope), v in zip(request, values or [], strict=False):
                if v.nvmlReturn != n.NVML_SUCCESS:
                    continue
                if name == "nvlink_power_state":
                    gpu.nvlink_low_power = int(v.value.uiVal) == 1
                    continue
                amount = float(v.value.ullVal) * (1024.0 if name.startswith("nvlink") else 1.0)
                counters[name] = counters.get(name, 0.0) + amount
        if self._pcie_fields[index] and "pcie_tx" not in counters:
            # Older drivers lack the PCIe byte counters; fall back to the sampled rate (NVML measures
            # it over a 20 ms window, so this call waits, but it costs no CPU).
            self._pcie_fields[index] = False
            self.notes.append(f"pcie: GPU {index} uses nvmlDeviceGetPcieThroughput")
        if not self._pcie_fields[index]:
            tx = self._call(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES)  # KB/s
            rx = self._call(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES)
            gpu.pcie_tx_bytes_per_s = tx * 1024.0 if tx is not None else None
            gpu.pcie_rx_bytes_per_s = rx * 1024.0 if rx is not None else None
        return counters, stamp

    def _processes(self, h: Any) -> list[ProcessSample]:
        procs = self._call(self._nvml.nvmlDeviceGetComputeRunningProcesses, h) or []
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessSample(pid=int(p.pid), name=_process_name(int(p.pid)),
                                     used_memory_bytes=int(used) if used is not None else None))
        return out


def _process_name(pid: int) -> str | None:
    """The command name of a process; None when it lives in another PID namespace (containers)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# Fake


class FakeBackend:
    """Scripted GPUs for tests and the cost bench.

    `profile(tick, index)` returns the fields of a `GpuSample` for that GPU at that tick (plus,
    optionally, "nvlink_bytes_per_s" / "pcie_bytes_per_s": the rate at which the fake counters
    grow). `unavailable` makes `open()` fail with that reason, as a machine without NVML does.
    """

    def __init__(self, gpus: int = 2, profile: Callable[[int, int], dict[str, Any]] | None = None,
                 unavailable: str | None = None, tick_s: float = 1.0) -> None:
        self.gpus = gpus
        self.profile = profile or _busy_profile
        self.unavailable = unavailable
        self.tick_s = tick_s
        self.ticks = [0] * gpus
        self._counters = [dict.fromkeys(COUNTERS, 0.0) for _ in range(gpus)]
        self.opened = False

    def open(self) -> None:
        if self.unavailable:
            raise MonitorUnavailable(self.unavailable)
        self.opened = True

    def close(self) -> None:
        self.opened = False

    def gpu_count(self) -> int:
        return self.gpus

    def read(self, index: int) -> GpuReading:
        tick = self.ticks[index]
        self.ticks[index] += 1
        values = dict(self.profile(tick, index))
        nvlink = values.pop("nvlink_bytes_per_s", 0.0)
        pcie = values.pop("pcie_bytes_per_s", 0.0)
        counters = self._counters[index]
        if tick > 0:
            counters["nvlink_tx"] += nvlink * self.tick_s
            counters["nvlink_rx"] += nvlink * self.tick_s
            counters["pcie_tx"] += pcie * self.tick_s
            counters["pcie_rx"] += pcie * self.tick_s
        procs = [ProcessSample(**p) for p in values.pop("processes", [])]
        gpu = GpuSample(index=index, processes=procs, **values)
        return GpuReading(gpu=gpu, counters=dict(counters), counter_time_s=tick * self.tick_s)


def _busy_profile(tick: int, index: int) -> dict[str, Any]:
    """Two H200-like GPUs in a data-parallel step loop: busy, near the power limit, exchanging gradients."""
    wobble = 5.0 * math.sin(tick / 3.0 + index)
    return {
        "name": "Fake H200", "uuid": f"GPU-fake-{index}",
        "utilization_pct": 92.0 + wobble, "memory_utilization_pct": 40.0,
        "memory_used_bytes": 60 * 2**30, "memory_total_bytes": 141 * 2**30,
        "power_w": 640.0 + 10 * wobble, "power_limit_w": 700.0, "temperature_c": 55.0 + index,
        "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "throttle_reasons": [],
        "nvlink_bytes_per_s": 80e9, "pcie_bytes_per_s": 1e9,
        "processes": [{"pid": 1000 + index, "name": "python", "used_memory_bytes": 60 * 2**30}],
    }
