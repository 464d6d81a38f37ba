"""One monitor sample: what every GPU was doing at one moment, as plain JSON-serialisable data.

A sample is what `gpurig monitor --json` prints under "sample" and what `--record FILE` appends,
one JSON object per line. Anything NVML does not give on this GPU is `None`, never an error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpurig.probe.nvml import throttle_reason_names

SAMPLE_SCHEMA = 1

def throttle_names(mask: int) -> list[str]:
    """Names of the reason bits set in an NVML clock-event mask (the probe's one table; unknown bits as hex)."""
    return throttle_reason_names(mask) or []


@dataclass
class ProcessSample:
    """A process holding memory on a GPU (`nvidia-smi --query-compute-apps=pid,used_memory`)."""

    pid: int
    name: str | None = None
    used_memory_bytes: int | None = None


@dataclass
class GpuSample:
    """One GPU at one moment. Each field names the `nvidia-smi --query-gpu` key that gives the same number."""

    index: int
    name: str | None = None
    uuid: str | None = None
    utilization_pct: float | None = None  # utilization.gpu: share of time a kernel was running
    memory_utilization_pct: float | None = None  # utilization.memory: share of time memory was read/written
    memory_used_bytes: int | None = None  # memory.used
    memory_total_bytes: int | None = None  # memory.total
    power_w: float | None = None  # power.draw
    power_limit_w: float | None = None  # enforced.power.limit
    temperature_c: float | None = None  # temperature.gpu
    sm_clock_mhz: int | None = None  # clocks.sm
    sm_clock_max_mhz: int | None = None  # clocks.max.sm
    throttle_reasons: list[str] | None = None  # clocks_event_reasons.*: active ones, by name
    pcie_tx_bytes_per_s: float | None = None  # PCIe bytes sent by the GPU per second
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None  # NVLink data bytes sent per second, all links together
    nvlink_rx_bytes_per_s: float | None = None
    # NVLink's power state (NVML's NVLINK_GET_POWER_STATE; nvidia-smi nvlink -gLowPwrInfo): the links
    # drop to a low-power state after an idle period, and wake for traffic. None without NVLink.
    nvlink_low_power: bool | None = None
    nvlink_low_power_threshold_ms: float | None = None  # the idle period after which they drop to it
    processes: list[ProcessSample] = field(default_factory=list)
    error: str | None = None  # why this GPU could not be read at all (e.g. it fell off the bus)

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


@dataclass
class Sample:
    """All GPUs at one moment. `time` is seconds since the epoch (UTC)."""

    time: float
    gpus: list[GpuSample] = field(default_factory=list)
    schema: int = SAMPLE_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Build a sample from its JSON form; raises ValueError naming the bad key."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        if "time" not in data or not isinstance(data["time"], (int, float)):
            raise ValueError("key 'time' is missing or not a number")
        gpus_raw = data.get("gpus")
        if not isinstance(gpus_raw, list):
            raise ValueError("key 'gpus' is missing or not a list")
        known = set(GpuSample.__dataclass_fields__)
        gpus = []
        for i, g in enumerate(gpus_raw):
            if not isinstance(g, dict) or not isinstance(g.get("index"), int):
                raise ValueError(f"gpus[{i}]: expected an object with an integer 'index'")
            kwargs = {k: v for k, v in g.items() if k in known and k != "processes"}
            procs = [ProcessSample(**{k: v for k, v in p.items() if k in ProcessSample.__dataclass_fields__})
                     for p in g.get("processes") or [] if isinstance(p, dict) and "pid" in p]
            gpus.append(GpuSample(**kwargs, processes=procs))
        return cls(time=float(data["time"]), gpus=gpus, schema=int(data.get("schema", SAMPLE_SCHEMA)))
