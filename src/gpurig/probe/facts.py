"""The `RigFacts` snapshot: plain, JSON-serialisable facts about one machine.

`probe/` fills it; `diagnose/` judges it. Anything the machine does not tell is `None`,
never an exception. A snapshot saved with `gpurig doctor --save-facts f.json` loads back with
`RigFacts.from_dict(json.load(...))` and is judged exactly like the live machine.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


class FactsError(ValueError):
    """A facts document that cannot be read as a `RigFacts` snapshot."""


@dataclass
class NvLinkFacts:
    """One NVLink of a GPU (`nvidia-smi nvlink --status`)."""

    link: int
    active: bool | None = None
    speed_gbps: float | None = None  # GB/s per direction, as `nvidia-smi nvlink -s` reports it
    remote_pci_bus_id: str | None = None
    remote_device_type: str | None = None  # "gpu", "switch", "cpu"
    # Error counters since the driver loaded (`nvidia-smi nvlink -e`); a rise means the link retried.
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None


@dataclass
class GpuProcessFacts:
    """A process holding memory on a GPU (`nvidia-smi --query-compute-apps`)."""

    pid: int
    name: str | None = None
    used_memory_mib: float | None = None


@dataclass
class GpuFacts:
    """One GPU as NVML (or `nvidia-smi`) describes it."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    compute_capability: str | None = None  # "9.0"
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlinks: list[NvLinkFacts] = field(default_factory=list)
    ecc_enabled: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_volatile_corrected: int | None = None  # ecc.errors.corrected.volatile.total
    ecc_aggregate_corrected: int | None = None
    retired_pages: int | None = None  # pre-Ampere: pages retired for double-bit errors
    retired_pages_pending: bool | None = None
    remapped_rows_uncorrectable: int | None = None  # Ampere and later
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    serial: str | None = None  # the board's serial number (nvidia-smi --query-gpu=serial), for an RMA
    pcie_replay_count: int | None = None  # PCIe packets the link had to resend (`nvidia-smi -q -d PCIE`, "Replays")
    persistence_mode: bool | None = None
    compute_mode: str | None = None  # "Default", "Exclusive_Process", "Prohibited"
    mig_enabled: bool | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_mhz: int | None = None
    throttle_reasons: list[str] | None = None  # active reasons, e.g. ["sw_thermal", "hw_power_brake"]
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None  # the board's own limit (power.default_limit); a lower power_limit_w was set by someone
    temperature_c: float | None = None
    utilization_pct: float | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None  # "0-15,32-47"
    processes: list[GpuProcessFacts] = field(default_factory=list)


@dataclass
class GpuPairFacts:
    """How two GPUs are connected (`nvidia-smi topo -m` and `topo -p2p r`)."""

    gpu_a: int
    gpu_b: int
    link: str | None = None  # "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"
    nvlink_count: int | None = None
    p2p_read: bool | None = None  # peer-to-peer read supported between the pair


@dataclass
class PciDeviceFacts:
    """An NVIDIA device on the PCI bus, seen without the driver (`lspci -d 10de:`)."""

    slot: str
    device_id: str | None = None
    kind: str | None = None  # "gpu", "nvswitch", "audio", "other"
    driver: str | None = None  # kernel driver bound to it, None when unbound


@dataclass
class DriverFacts:
    """The NVIDIA driver as the machine reports it."""

    source: str | None = None  # "nvml", "nvidia-smi" or None when neither answered
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, "13.0"
    nvml_version: str | None = None
    kernel_module_loaded: bool | None = None
    kernel_module_version: str | None = None  # from /proc/driver/nvidia/version
    error: str | None = None  # why NVML and nvidia-smi failed, as they said it


@dataclass
class TorchFacts:
    """PyTorch as seen from a child process."""

    installed: bool = False
    version: str | None = None
    cuda_build: str | None = None  # torch.version.cuda, None for a CPU-only build
    cudnn_version: str | None = None
    nccl_version: str | None = None
    arch_list: list[str] | None = None  # torch.cuda.get_arch_list()
    cuda_available: bool | None = None
    device_count: int | None = None
    error: str | None = None  # the import or probe failure, if any
    cuda_warning: str | None = None  # what torch warned while starting CUDA ("The NVIDIA driver ... is too old")


@dataclass
class TensorFlowFacts:
    """TensorFlow as seen from a child process."""

    installed: bool = False
    version: str | None = None
    cuda_build: str | None = None
    cudnn_build: str | None = None
    built_with_cuda: bool | None = None
    gpus: list[str] | None = None
    error: str | None = None


@dataclass
class FrameworkFacts:
    torch: TorchFacts = field(default_factory=TorchFacts)
    tensorflow: TensorFlowFacts = field(default_factory=TensorFlowFacts)
    probed: bool = False  # False when framework probing was skipped (--fast)
    from_cache: str | None = None  # when the answers were probed, if they come from the probe cache


@dataclass
class SystemFacts:
    os: str | None = None
    kernel: str | None = None
    python: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    ram_total_gib: float | None = None
    shm_total_bytes: int | None = None
    shm_free_bytes: int | None = None
    memlock_limit_bytes: int | None = None  # None: unknown; -1: unlimited
    container: str | None = None  # "docker", "kubernetes", "podman", "container" or None on bare metal
    iommu: str | None = None  # "on", "passthrough", "off"
    nvswitch_count: int | None = None
    fabric_manager_running: bool | None = None
    numa_nodes: int | None = None
    cpus_usable: int | None = None  # CPUs this process may use: affinity mask capped by the cgroup CPU quota
    memory_limit_gib: float | None = None  # the cgroup memory limit (a container's --memory); None: unlimited


@dataclass
class RigFacts:
    """Everything the doctor judges, as one snapshot."""

    schema_version: int = SCHEMA_VERSION
    collected_at: str | None = None
    gpurig_version: str | None = None
    driver: DriverFacts = field(default_factory=DriverFacts)
    gpus: list[GpuFacts] = field(default_factory=list)
    pairs: list[GpuPairFacts] = field(default_factory=list)
    pci_devices: list[PciDeviceFacts] | None = None
    frameworks: FrameworkFacts = field(default_factory=FrameworkFacts)
    system: SystemFacts = field(default_factory=SystemFacts)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what a probe could not read, and why

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RigFacts:
        if not isinstance(data, dict):
            raise FactsError(f"expected a JSON object at the top level, got {_json_kind(data)}")
        if "facts" in data and "findings" in data:  # the output of `gpurig doctor --json`
            data = data["facts"]
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise FactsError(f"schema_version {version!r} is not supported (this gpurig reads {SCHEMA_VERSION})")
        return _build(cls, data, "facts")

    def holds_facts(self) -> bool:
        """True when the snapshot tells something about the machine: a GPU, a driver, a system fact
        or a device on the PCI bus. Every probe run fills the system section at least (the OS, the
        Python, the cores), so only a file that is not a snapshot (`{}`, a stray JSON object) holds
        none, and judging it would describe a machine with nothing on it."""
        return bool(self.gpus or self.pci_devices or self.driver != DriverFacts()
                    or self.system != SystemFacts())

    def pair(self, a: int, b: int) -> GpuPairFacts | None:
        for p in self.pairs:
            if {p.gpu_a, p.gpu_b} == {a, b}:
                return p
        return None


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words: "a list", "a number", "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return {"list": "a list", "str": "a string", "dict": "an object"}.get(type(value).__name__, type(value).__name__)


def _build(cls: type, data: Any, where: str) -> Any:
    """Build dataclass `cls` from a dict, checking types, naming the path of any bad value."""
    if not isinstance(data, dict):
        raise FactsError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise FactsError(f"{where}: unknown key(s) {', '.join(unknown)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise FactsError(f"{where}: {exc}") from None


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise FactsError(f"{where}: must not be null")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except FactsError as exc:
                errors.append(str(exc))
        raise FactsError(errors[0] if errors else f"{where}: bad value {value!r}")
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise FactsError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise FactsError(f"{where}: expected an object, got {type(value).__name__}")
        return {str(k): _convert(typing.get_args(tp)[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FactsError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FactsError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise FactsError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise FactsError(f"{where}: expected a string, got {value!r}")
        return value
    raise FactsError(f"{where}: cannot read type {tp!r}")
