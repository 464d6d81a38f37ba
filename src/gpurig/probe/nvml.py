"""GPU facts from NVML (the library behind `nvidia-smi`), read without initialising CUDA.

Every NVML call goes through one helper that turns "not supported on this GPU/driver" into None,
so a missing metric never takes the doctor down (nvitop's habit). The `nvml` module is a parameter
(default: `pynvml` from nvidia-ml-py) so tests can drive the logic with a fake NVML.

Each field names the `nvidia-smi` query that shows the same number, for checking by hand.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpurig.probe.facts import DriverFacts, GpuFacts, GpuPairFacts, GpuProcessFacts, NvLinkFacts
from gpurig.probe.pci import normalize_bus_id

# NVML constants, copied here so the logic does not depend on the binding's spelling of them
# (nvidia-ml-py 13 defines NVML_P2P_CAPS_INDEX_READ as the tuple `(0,)`, for one).
_CLOCK_SM, _CLOCK_MEM = 1, 2
_TEMPERATURE_GPU = 0
_MEMORY_ERROR_CORRECTED, _MEMORY_ERROR_UNCORRECTED = 0, 1
_VOLATILE_ECC, _AGGREGATE_ECC = 0, 1
_RETIREMENT_CAUSES = (0, 1)  # multiple single-bit errors, double-bit error
_P2P_CAPS_INDEX_READ = 0
_P2P_STATUS_OK = 0
_NVLINK_MAX_LINKS = 18  # used when the binding does not say (NVML 12 says 18, NVML 13 says 36)
_AFFINITY_SCOPE_NODE = 0
# nvmlNvLinkErrorCounter_t: NVML_NVLINK_ERROR_DL_REPLAY, _RECOVERY, _CRC_FLIT, _CRC_DATA.
NVLINK_ERROR_COUNTERS = (("replay_errors", 0), ("recovery_errors", 1), ("crc_flit_errors", 2), ("crc_data_errors", 3))
_ERROR_LIB_RM_VERSION_MISMATCH = 18
_ERROR_GPU_IS_LOST = 15

# NVML topology level -> the code `nvidia-smi topo -m` prints for it.
TOPOLOGY_CODES = {
    0: "PIX",  # NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    10: "PIX",  # NVML_TOPOLOGY_SINGLE: at most one PCIe switch between them
    20: "PXB",  # NVML_TOPOLOGY_MULTIPLE: several PCIe switches, no host bridge
    30: "PHB",  # NVML_TOPOLOGY_HOSTBRIDGE: through a CPU's PCIe host bridge
    40: "NODE",  # NVML_TOPOLOGY_NODE: between host bridges of one NUMA node
    50: "SYS",  # NVML_TOPOLOGY_SYSTEM: across the CPU interconnect (QPI/UPI/xGMI)
}

# Clock event ("throttle") reason bits -> short names, as `nvidia-smi -q -d PERFORMANCE` names them.
# The one table: the doctor, the monitor and the training clocks all read it.
THROTTLE_REASONS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clock_setting"),
)
# Reasons that mean "the GPU is running slower than it could", as opposed to idle or a user setting.
THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake", "hw_slowdown"})

_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
_REMOTE_TYPES = {0: "gpu", 1: "cpu", 2: "switch"}  # NVML_NVLINK_DEVICE_TYPE_GPU / IBMNPU / SWITCH

# NVLink speed fields, MB/s per direction. NVML_FI_DEV_NVLINK_GET_SPEED takes the link as scopeId and
# answers on current drivers (26562 on H100/H200); older drivers only know the per-link fields for
# links 0-11 and a common value.
_NVLINK_GET_SPEED = 164
_NVLINK_SPEED_FIELDS = [84, 85, 86, 87, 88, 89, 132, 133, 134, 135, 136, 137]
_NVLINK_SPEED_COMMON = 90

# Plain words for the NVML errors a user meets at init, keyed by NVML return code.
_INIT_ERRORS = {
    _ERROR_LIB_RM_VERSION_MISMATCH: "Driver/library version mismatch",
    9: "Driver not loaded",
    12: "NVML library (libnvidia-ml.so.1) not found",
    17: "The operating system blocked the request",
    4: "Insufficient permissions",
}


def throttle_reason_names(mask: int | None) -> list[str] | None:
    """Active clock event reasons as short names; bits this table does not know, as hex.

    >>> throttle_reason_names(0x21)
    ['gpu_idle', 'sw_thermal']
    >>> throttle_reason_names(0x4 | 0x10000)
    ['sw_power_cap', '0x10000']
    """
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in THROTTLE_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


def cpu_list_from_mask(words: list[int], word_bits: int = 64) -> str | None:
    """Turn NVML's CPU affinity bitmask (word 0 = CPUs 0-63) into a cpulist, "0-15,32-47".

    >>> cpu_list_from_mask([0x0000ffff0000ffff])
    '0-15,32-47'
    """
    cpus = [w * word_bits + b for w, word in enumerate(words) for b in range(word_bits) if (int(word) >> b) & 1]
    if not cpus:
        return None
    ranges, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        ranges.append(f"{start}-{prev}" if prev > start else str(start))
        if c is not None:
            start = prev = c
    return ",".join(ranges)


def cuda_version_string(value: int | None) -> str | None:
    """NVML's integer CUDA version (13000) as "13.0"."""
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value).strip() or None


@dataclass
class NvmlResult:
    """What NVML told; `driver.error` is set (and the rest empty) when NVML could not start."""

    driver: DriverFacts = field(default_factory=DriverFacts)
    gpus: list[GpuFacts] = field(default_factory=list)
    pairs: list[GpuPairFacts] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ok: bool = False
    hung: bool = False  # NVML did not answer in time (set by the caller that waited)


def guarded(nvml: Any, fn: Any, *args: Any, on_bug: Any = None) -> Any:
    """`fn(*args)`, or None where NVML says the GPU or driver does not support it (nvitop's rule: a
    missing metric is a value, never an exception). Any other exception (a binding bug: ctypes, a
    changed struct) is None too, and is passed to `on_bug(name, exc)` to be noted once."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None
    except Exception as exc:
        if on_bug is not None:
            on_bug(getattr(fn, "__name__", "?"), exc)
        return None


class _Reader:
    """One NVML session: lazy init, guarded queries, shutdown."""

    def __init__(self, nvml: Any, root: str | os.PathLike = "/"):
        self.nvml = nvml
        self.root = root
        self.notes: list[str] = []
        self._noted: set[str] = set()

    def q(self, name: str, *args: Any) -> Any:
        """Call `nvml.<name>(*args)`; None when the call is missing or the GPU/driver does not support it."""
        fn = getattr(self.nvml, name, None)
        if fn is None:  # an older nvidia-ml-py without this function
            return None
        return guarded(self.nvml, fn, *args, on_bug=lambda _fn_name, exc: self._note(name, exc))

    def _note(self, name: str, exc: Exception) -> None:
        if name not in self._noted:
            self._noted.add(name)
            self.notes.append(f"NVML {name} failed unexpectedly: {type(exc).__name__}: {exc}")

    def gpu(self, index: int, handle: Any) -> GpuFacts:
        q = self.q
        g = GpuFacts(index=index)
        g.name = _text(q("nvmlDeviceGetName", handle))  # --query-gpu=name
        g.uuid = _text(q("nvmlDeviceGetUUID", handle))  # uuid
        g.serial = _text(q("nvmlDeviceGetSerial", handle))  # serial (consumer boards: not supported)
        pci = q("nvmlDeviceGetPciInfo", handle)  # pci.bus_id
        g.pci_bus_id = normalize_bus_id(_text(getattr(pci, "busId", None))) if pci is not None else None
        cc = q("nvmlDeviceGetCudaComputeCapability", handle)  # compute_cap
        if cc is not None:
            g.compute_capability = f"{cc[0]}.{cc[1]}"
        # memory.total, memory.used (MiB). Version 2 leaves out what the driver reserves for itself
        # (about 600 MiB on an idle H200), as nvidia-smi does; version 1 counts it as used.
        v2 = getattr(self.nvml, "nvmlMemory_v2", None)
        mem = q("nvmlDeviceGetMemoryInfo", handle, v2) if v2 is not None else None
        if mem is None:
            mem = q("nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            g.memory_total_mib = round(mem.total / 2**20, 1)
            g.memory_used_mib = round(mem.used / 2**20, 1)
        g.pcie_gen_current = q("nvmlDeviceGetCurrPcieLinkGeneration", handle)  # pcie.link.gen.current
        g.pcie_gen_max = q("nvmlDeviceGetMaxPcieLinkGeneration", handle)  # pcie.link.gen.max
        g.pcie_width_current = q("nvmlDeviceGetCurrPcieLinkWidth", handle)  # pcie.link.width.current
        g.pcie_width_max = q("nvmlDeviceGetMaxPcieLinkWidth", handle)  # pcie.link.width.max
        ecc = q("nvmlDeviceGetEccMode", handle)  # ecc.mode.current
        if ecc is not None:
            g.ecc_enabled = bool(ecc[0])
        if g.ecc_enabled:
            # ecc.errors.uncorrected.volatile.total / .aggregate.total
            g.ecc_volatile_uncorrected = q("nvmlDeviceGetTotalEccErrors", handle, _MEMORY_ERROR_UNCORRECTED, _VOLATILE_ECC)
            g.ecc_aggregate_uncorrected = q("nvmlDeviceGetTotalEccErrors", handle, _MEMORY_ERROR_UNCORRECTED,
                                            _AGGREGATE_ECC)
            # ecc.errors.corrected.volatile.total / .aggregate.total
            g.ecc_volatile_corrected = q("nvmlDeviceGetTotalEccErrors", handle, _MEMORY_ERROR_CORRECTED, _VOLATILE_ECC)
            g.ecc_aggregate_corrected = q("nvmlDeviceGetTotalEccErrors", handle, _MEMORY_ERROR_CORRECTED, _AGGREGATE_ECC)
        # Page retirement (before Ampere; Ampere and later remap rows instead and say "not supported").
        retired = [q("nvmlDeviceGetRetiredPages", handle, cause) for cause in _RETIREMENT_CAUSES]
        if any(r is not None for r in retired):
            g.retired_pages = sum(len(r) for r in retired if r is not None)  # retired_pages.sbe + .dbe
            pending = q("nvmlDeviceGetRetiredPagesPendingStatus", handle)  # retired_pages.pending
            g.retired_pages_pending = None if pending is None else bool(pending)
        rows = q("nvmlDeviceGetRemappedRows", handle)  # nvidia-smi -q -d ROW_REMAPPER
        if rows is not None:
            _corr, unc, pending, failed = rows
            g.remapped_rows_uncorrectable = int(unc)
            g.remapped_rows_pending = bool(pending)
            g.remapped_rows_failed = bool(failed)
        g.pcie_replay_count = q("nvmlDeviceGetPcieReplayCounter", handle)  # nvidia-smi -q -d PCIE: Replays
        pm = q("nvmlDeviceGetPersistenceMode", handle)  # persistence_mode
        g.persistence_mode = None if pm is None else bool(pm)
        cm = q("nvmlDeviceGetComputeMode", handle)  # compute_mode
        g.compute_mode = None if cm is None else _COMPUTE_MODES.get(cm, str(cm))
        mig = q("nvmlDeviceGetMigMode", handle)  # mig.mode.current
        g.mig_enabled = None if mig is None else bool(mig[0])
        g.sm_clock_mhz = q("nvmlDeviceGetClockInfo", handle, _CLOCK_SM)  # clocks.sm
        g.sm_clock_max_mhz = q("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_SM)  # clocks.max.sm
        g.memory_clock_mhz = q("nvmlDeviceGetClockInfo", handle, _CLOCK_MEM)  # clocks.mem
        reasons = q("nvmlDeviceGetCurrentClocksEventReasons", handle)  # clocks_event_reasons.active
        if reasons is None:
            reasons = q("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        g.throttle_reasons = throttle_reason_names(reasons)
        power = q("nvmlDeviceGetPowerUsage", handle)  # power.draw (mW from NVML)
        g.power_draw_w = None if power is None else power / 1000.0
        limit = q("nvmlDeviceGetEnforcedPowerLimit", handle)  # power.limit
        if limit is None:
            limit = q("nvmlDeviceGetPowerManagementLimit", handle)
        g.power_limit_w = None if limit is None else limit / 1000.0
        default = q("nvmlDeviceGetPowerManagementDefaultLimit", handle)  # power.default_limit
        g.power_default_limit_w = None if default is None else default / 1000.0
        temp = q("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU)  # temperature.gpu
        g.temperature_c = None if temp is None else float(temp)
        util = q("nvmlDeviceGetUtilizationRates", handle)  # utilization.gpu
        g.utilization_pct = None if util is None else float(util.gpu)
        g.numa_node, g.cpu_affinity = self.affinity(handle, g.pci_bus_id)  # topo -m "NUMA/CPU Affinity"
        g.nvlinks = self.nvlinks(handle)  # nvidia-smi nvlink -s / -R
        g.processes = self.processes(handle)  # --query-compute-apps
        return g

    def affinity(self, handle: Any, bus_id: str | None) -> tuple[int | None, str | None]:
        from gpurig.probe.pci import pci_cpu_list, pci_numa_node

        ncpu = os.cpu_count() or 64
        words = (ncpu + 63) // 64
        cpus = None
        mask = self.q("nvmlDeviceGetCpuAffinity", handle, words)
        if mask is not None:
            cpus = cpu_list_from_mask(list(mask))
        node = None
        nodes = self.q("nvmlDeviceGetMemoryAffinity", handle, 1, _AFFINITY_SCOPE_NODE)
        if nodes is not None:
            node_list = cpu_list_from_mask(list(nodes))
            # One node means a clear answer; a GPU close to every node (one-socket box) has no preference.
            if node_list is not None and node_list.isdigit():
                node = int(node_list)
        if node is None:
            node = pci_numa_node(bus_id, self.root)
        if cpus is None:
            cpus = pci_cpu_list(bus_id, self.root)
        return node, cpus

    def nvlinks(self, handle: Any) -> list[NvLinkFacts]:
        links = []
        max_links = getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS)
        for link in range(int(max_links)):
            state = self.q("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                continue  # this GPU has no such link (or no NVLink at all)
            nl = NvLinkFacts(link=link, active=bool(state))
            if nl.active:
                remote = self.q("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
                if remote is not None:
                    bus = normalize_bus_id(_text(getattr(remote, "busId", None)))
                    # NVSwitches hidden from a VM are reported as FFFFFFFF:FF:FF.0, i.e. "unknown".
                    nl.remote_pci_bus_id = None if bus and bus.startswith("ffffffff:") else bus
                rtype = self.q("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
                nl.remote_device_type = _REMOTE_TYPES.get(rtype) if rtype is not None else None
                for name, counter in NVLINK_ERROR_COUNTERS:  # nvidia-smi nvlink -e
                    setattr(nl, name, self.q("nvmlDeviceGetNvLinkErrorCounter", handle, link, counter))
            links.append(nl)
        if links:
            speeds = self.nvlink_speeds(handle, [nl.link for nl in links if nl.active])
            for nl in links:
                nl.speed_gbps = speeds.get(nl.link)
        return links

    def nvlink_speeds(self, handle: Any, active: list[int]) -> dict[int, float]:
        """Per-link speed in GB/s per direction, as `nvidia-smi nvlink -s` prints it (26.562 on H100)."""
        if not active:
            return {}
        mbps: dict[int, float] = {}
        values = self.q("nvmlDeviceGetFieldValues", handle, [(_NVLINK_GET_SPEED, link) for link in active])
        for link, v in zip(active, values or [], strict=False):
            if getattr(v, "nvmlReturn", 1) == 0 and _field_number(v):
                mbps[link] = _field_number(v)
        missing = [link for link in active if link not in mbps]
        if missing:
            ids = [_NVLINK_SPEED_FIELDS[i] for i in missing if i < len(_NVLINK_SPEED_FIELDS)] + [_NVLINK_SPEED_COMMON]
            by_id = {v.fieldId: _field_number(v) for v in self.q("nvmlDeviceGetFieldValues", handle, ids) or []
                     if getattr(v, "nvmlReturn", 1) == 0}
            for link in missing:
                per_link = by_id.get(_NVLINK_SPEED_FIELDS[link]) if link < len(_NVLINK_SPEED_FIELDS) else None
                if per_link or by_id.get(_NVLINK_SPEED_COMMON):
                    mbps[link] = per_link or by_id[_NVLINK_SPEED_COMMON]
        return {link: round(value / 1000.0, 3) for link, value in mbps.items()}

    def processes(self, handle: Any) -> list[GpuProcessFacts]:
        found: dict[int, GpuProcessFacts] = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self.q(name, handle) or []:
                pid = int(p.pid)
                if pid in found:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                found[pid] = GpuProcessFacts(pid=pid, name=self.process_name(pid),
                                             used_memory_mib=None if used is None else round(used / 2**20, 1))
        return sorted(found.values(), key=lambda p: p.pid)

    def process_name(self, pid: int) -> str | None:
        name = _text(self.q("nvmlSystemGetProcessName", pid))
        if name:
            return name
        try:  # a process in another PID namespace (container) is not named by NVML
            return (Path(self.root) / "proc" / str(pid) / "comm").read_text().strip() or None
        except OSError:
            return None

    def pairs(self, handles: list[Any], gpus: list[GpuFacts]) -> list[GpuPairFacts]:
        bus_to_index = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id}
        def to_switch(nl: NvLinkFacts) -> bool:
            if nl.remote_device_type is not None:
                return nl.remote_device_type == "switch"
            # NVML did not say: a link whose far end is none of our GPUs goes to an NVSwitch.
            return nl.remote_pci_bus_id not in bus_to_index

        switch_links = {g.index: sum(1 for nl in g.nvlinks if nl.active and to_switch(nl)) for g in gpus}
        out = []
        for i, ga in enumerate(gpus):
            for j in range(i + 1, len(gpus)):
                gb, ha, hb = gpus[j], handles[i], handles[j]
                level = self.q("nvmlDeviceGetTopologyCommonAncestor", ha, hb)
                code = TOPOLOGY_CODES.get(level) if level is not None else None
                direct = sum(1 for nl in ga.nvlinks if nl.active and nl.remote_pci_bus_id == gb.pci_bus_id
                             and gb.pci_bus_id is not None)
                via_switch = min(switch_links[ga.index], switch_links[gb.index])
                count = direct or via_switch
                if count:
                    code = f"NV{count}"
                p2p = self.q("nvmlDeviceGetP2PStatus", ha, hb, _P2P_CAPS_INDEX_READ)
                out.append(GpuPairFacts(gpu_a=ga.index, gpu_b=gb.index, link=code,
                                        nvlink_count=count if (code is not None or count) else None,
                                        p2p_read=None if p2p is None else p2p == _P2P_STATUS_OK))
        return out


def _field_number(v: Any) -> float | None:
    kind = getattr(v, "valueType", None)
    val = v.value
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind)
    return float(getattr(val, attr)) if attr else None


def init_error_text(exc: Exception) -> str:
    """NVML's init failure in the words a user searches for, keeping NVML's own text."""
    raw = str(exc)
    words = _INIT_ERRORS.get(getattr(exc, "value", None))
    return f"{words} ({raw})" if words and words.lower() not in raw.lower() else raw


@contextmanager
def session(nvml: Any = None) -> Iterator[_Reader | None]:
    """One short NVML session for a few questions: a `_Reader` (guarded queries), or None where NVML
    cannot start (no nvidia-ml-py, no driver, a mismatch), which callers take as "no GPU"."""
    if nvml is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                import pynvml as nvml
        except ImportError:
            yield None
            return
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError, or OSError from a library that cannot load
        yield None
        return
    try:
        yield _Reader(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def gpu_count(nvml: Any = None) -> int:
    """Physical GPUs NVML reports; 0 when NVML or the driver is missing. Never initialises CUDA."""
    with session(nvml) as r:
        return int(r.q("nvmlDeviceGetCount") or 0) if r is not None else 0


def basic_gpus(nvml: Any = None) -> list[GpuFacts]:
    """Index, name, UUID, compute capability and memory of every GPU (a light read for planning a
    run); [] without NVML."""
    out: list[GpuFacts] = []
    with session(nvml) as r:
        if r is None:
            return out
        for index in range(int(r.q("nvmlDeviceGetCount") or 0)):
            h = r.q("nvmlDeviceGetHandleByIndex", index)
            if h is None:
                continue
            g = GpuFacts(index=index, name=_text(r.q("nvmlDeviceGetName", h)), uuid=_text(r.q("nvmlDeviceGetUUID", h)))
            cc = r.q("nvmlDeviceGetCudaComputeCapability", h)
            g.compute_capability = f"{cc[0]}.{cc[1]}" if cc is not None else None
            mem = r.q("nvmlDeviceGetMemoryInfo", h)
            g.memory_total_mib = round(mem.total / 2**20, 1) if mem is not None else None
            out.append(g)
    return out


def read_nvml(nvml: Any = None, root: str | os.PathLike = "/") -> NvmlResult:
    """Read every GPU, pair and driver fact NVML gives. Never raises."""
    res = NvmlResult()
    if nvml is None:
        try:
            with warnings.catch_warnings():
                # The old `pynvml` wrapper package warns that it is deprecated in favour of nvidia-ml-py,
                # which provides the same module; the warning says nothing about this machine.
                warnings.simplefilter("ignore", FutureWarning)
                import pynvml as nvml  # imported here, so machines without it pay nothing
        except ImportError:
            res.driver.error = "NVML: nvidia-ml-py (pynvml) is not installed"
            return res
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        res.driver.error = f"NVML: {init_error_text(exc)}"
        return res
    except OSError as exc:  # the library exists but cannot be loaded (wrong architecture, broken file)
        res.driver.error = f"NVML: {exc}"
        return res
    reader = _Reader(nvml, root)
    try:
        res.ok = True
        res.driver.source = "nvml"
        res.driver.driver_version = _text(reader.q("nvmlSystemGetDriverVersion"))
        cuda = reader.q("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = reader.q("nvmlSystemGetCudaDriverVersion")
        res.driver.cuda_driver_version = cuda_version_string(cuda)
        res.driver.nvml_version = _text(reader.q("nvmlSystemGetNVMLVersion"))
        count = reader.q("nvmlDeviceGetCount") or 0
        handles, gpus = [], []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                # A GPU that fell off the bus says "GPU is lost" here: that is the diagnosis.
                reader.notes.append(f"GPU {index}: NVML cannot open it: {exc}")
                gpus_lost = GpuFacts(index=index)
                handles.append(None)
                gpus.append(gpus_lost)
                continue
            handles.append(handle)
            gpus.append(reader.gpu(index, handle))
        opened = [(h, g) for h, g in zip(handles, gpus, strict=True) if h is not None]
        res.gpus = gpus
        res.pairs = reader.pairs([h for h, _ in opened], [g for _, g in opened])
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:  # shutting down a session that half-failed; nothing left to report
            pass
        res.notes.extend(reader.notes)
    return res
