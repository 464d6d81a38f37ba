"""Facts about the host around the GPUs: OS, CPUs, memory, /dev/shm, memlock, container, IOMMU, NUMA.

Everything is read from files under `root` (default "/"), so tests feed a fake tree. The few facts
that belong to the running process itself (Python version, RLIMIT_MEMLOCK) are read live.
"""

from __future__ import annotations

import math
import os
import platform
import re
import resource
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpurig.probe.facts import PciDeviceFacts, SystemFacts

FABRIC_MANAGER_PROCESS = "nv-fabricmanager"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _is_live(root: str | os.PathLike) -> bool:
    return os.path.realpath(root) == "/"


def read_os(root: str | os.PathLike = "/") -> str | None:
    """PRETTY_NAME from /etc/os-release ("Ubuntu 22.04.4 LTS")."""
    text = _read(Path(root) / "etc" / "os-release")
    if not text:
        return None
    fields = {}
    for line in text.splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            fields[key.strip()] = value.strip().strip('"').strip("'")
    return fields.get("PRETTY_NAME") or " ".join(x for x in (fields.get("NAME"), fields.get("VERSION_ID")) if x) or None


def read_cpu(root: str | os.PathLike = "/") -> tuple[str | None, int | None]:
    """(model name, logical CPU count) from /proc/cpuinfo."""
    text = _read(Path(root) / "proc" / "cpuinfo")
    model = None
    count = None
    if text:
        count = len(re.findall(r"^processor\s*:", text, re.M)) or None
        m = re.search(r"^(?:model name|Model Name|cpu model|Model)\s*:\s*(.+)$", text, re.M)
        if m:
            model = m.group(1).strip()
    if count is None and _is_live(root):
        count = os.cpu_count()
    return model, count


def _cgroup_dirs(root: Path, controller: str) -> list[Path]:
    """Where this process's cgroup files live: its own cgroup first, then the (namespaced) root."""
    base = root / "sys" / "fs" / "cgroup"
    dirs = []
    for line in (_read(root / "proc" / "self" / "cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        rel = parts[2].strip().lstrip("/")
        if parts[0] == "0" and parts[1] == "":  # cgroup v2: one unified tree
            dirs.append(base / rel)
        elif controller in parts[1].split(","):  # cgroup v1: a tree per controller, e.g. "cpu,cpuacct"
            dirs.append(base / parts[1] / rel)
            dirs.append(base / controller / rel)
    return dirs + [base, base / controller]


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def read_cgroup_limits(root: str | os.PathLike = "/") -> tuple[float | None, int | None]:
    """(CPU quota in CPUs, memory limit in bytes) of this process's cgroup; None where unlimited.

    A container started with `--cpus 4 --memory 16g` still shows every host CPU in /proc/cpuinfo
    and all host RAM in /proc/meminfo; only the cgroup says what it may really use.
    """
    base = Path(root)
    cpus = None
    for d in _cgroup_dirs(base, "cpu"):
        v2 = (_read(d / "cpu.max") or "").split()  # "400000 100000" or "max 100000"
        if v2:
            quota, period = _int(v2[0]), _int(v2[1] if len(v2) > 1 else "100000")
            if quota and period:
                cpus = quota / period
            break
        quota = _int(_read(d / "cpu.cfs_quota_us"))  # v1: -1 means no quota
        if quota is not None:
            period = _int(_read(d / "cpu.cfs_period_us")) or 100000
            if quota > 0:
                cpus = quota / period
            break
    memory = None
    for d in _cgroup_dirs(base, "memory"):
        text = _read(d / "memory.max") or _read(d / "memory.limit_in_bytes")
        if text:
            value = _int(text)  # "max" (v2) reads as None: unlimited
            if value is not None and value < 2**60:  # v1 writes "unlimited" as about 2**63
                memory = value
            break
    return cpus, memory


def usable_cpus(root: str | os.PathLike = "/", cpu_count: int | None = None) -> int | None:
    """CPUs this process may run on: its affinity mask, capped by the cgroup CPU quota."""
    count = None
    if _is_live(root) and hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    count = count or cpu_count
    quota, _ = read_cgroup_limits(root)
    if quota is not None:
        capped = max(1, math.ceil(quota))
        count = min(count, capped) if count else capped
    return count


def read_ram_gib(root: str | os.PathLike = "/") -> float | None:
    text = _read(Path(root) / "proc" / "meminfo")
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text or "", re.M)
    return round(int(m.group(1)) / 1024**2, 2) if m else None


def read_shm(root: str | os.PathLike = "/") -> tuple[int | None, int | None]:
    """(total, free) bytes of /dev/shm, the shared memory DataLoader workers pass batches through."""
    try:
        st = os.statvfs(Path(root) / "dev" / "shm")
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def read_memlock_limit() -> int | None:
    """Soft RLIMIT_MEMLOCK of this process (`ulimit -l`, in bytes); -1 when unlimited."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError):
        return None
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def detect_container(root: str | os.PathLike = "/", environ: Mapping[str, str] | None = None) -> str | None:
    """"kubernetes", "docker", "podman", "container" (some other runtime) or None on bare metal."""
    env = os.environ if environ is None else environ
    base = Path(root)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    cgroup = _read(base / "proc" / "1" / "cgroup") or ""
    if "kubepods" in cgroup:
        return "kubernetes"
    if (base / ".dockerenv").exists() or "docker" in cgroup:
        return "docker"
    if (base / "run" / ".containerenv").exists() or "libpod" in cgroup:
        return "podman"
    if any(word in cgroup for word in ("containerd", "lxc", "crio")):
        return "container"
    if (env.get("container") or "").strip():  # set by systemd-nspawn, podman, LXC
        return "container"
    return None


def detect_iommu(root: str | os.PathLike = "/") -> str | None:
    """"on", "passthrough" (iommu=pt), "off", or None when the machine does not say.

    An IOMMU that translates every DMA forces GPU peer-to-peer traffic through the root complex
    (or blocks it), which is why the doctor cares; `iommu=pt` keeps it out of the device path.
    """
    base = Path(root)
    cmdline = (_read(base / "proc" / "cmdline") or "").split()
    args = {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else "") for a in cmdline}
    if args.get("iommu") == "off" or args.get("intel_iommu") == "off" or args.get("amd_iommu") == "off":
        return "off"
    units = None
    try:
        units = os.listdir(base / "sys" / "class" / "iommu")
    except OSError:
        units = None
    groups = None
    try:
        groups = os.listdir(base / "sys" / "kernel" / "iommu_groups")
    except OSError:
        groups = None
    active = bool(units) or bool(groups)
    if args.get("iommu") == "pt" or args.get("amd_iommu") == "pt":
        if active or (units is None and groups is None):
            return "passthrough"
        return "off"
    if active:
        return "on"
    if units is not None or groups is not None:
        return "off"
    if args.get("intel_iommu") == "on" or args.get("amd_iommu") == "on":
        return "on"
    return None


def read_numa_nodes(root: str | os.PathLike = "/") -> int | None:
    try:
        names = os.listdir(Path(root) / "sys" / "devices" / "system" / "node")
    except OSError:
        return None
    count = sum(1 for n in names if re.fullmatch(r"node\d+", n))
    return count or None


def _fabric_manager_process(root: str | os.PathLike) -> bool | None:
    """True when a process named nv-fabricmanager is in /proc; False when none is; None if /proc is unreadable."""
    proc = Path(root) / "proc"
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        comm = _read(proc / pid / "comm")
        if comm and comm.strip() == FABRIC_MANAGER_PROCESS:
            return True
    return False


def _fabric_manager_unit(timeout: float = 2.0) -> bool | None:
    """`systemctl is-active nvidia-fabricmanager`, or None where systemd cannot answer (containers)."""
    exe = shutil.which("systemctl")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "is-active", FABRIC_MANAGER_UNIT], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    state = out.stdout.strip()
    if state in ("active", "activating", "reloading"):
        return True
    if state in ("inactive", "failed", "deactivating"):
        return False
    return None  # "unknown" (no such unit) or systemd not running as PID 1


def detect_fabric_manager(root: str | os.PathLike = "/", nvswitch_count: int | None = None,
                          container: str | None = None) -> bool | None:
    """Whether NVIDIA Fabric Manager runs; None when it cannot be known from here.

    Only NVSwitch systems need it, so systemd is asked only when an NVSwitch is on the bus. Inside
    a container the host's processes are invisible, so "not found" means "unknown" there.
    """
    seen = _fabric_manager_process(root)
    if seen:
        return True
    if nvswitch_count and _is_live(root):
        unit = _fabric_manager_unit()
        if unit is not None:
            return unit
    if seen is False and container is None:
        return False
    return None


def collect_system(root: str | os.PathLike = "/", pci_devices: list[PciDeviceFacts] | None = None,
                   environ: Mapping[str, str] | None = None) -> SystemFacts:
    """All system facts; `pci_devices` (from `pci.read_pci_devices`) gives the NVSwitch count."""
    cpu_model, cpu_count = read_cpu(root)
    shm_total, shm_free = read_shm(root)
    live = _is_live(root)
    kernel = (_read(Path(root) / "proc" / "sys" / "kernel" / "osrelease") or "").strip() or None
    if kernel is None and live:
        kernel = platform.release() or None
    nvswitch_count = None if pci_devices is None else sum(1 for d in pci_devices if d.kind == "nvswitch")
    container = detect_container(root, environ)
    _quota, memory_limit = read_cgroup_limits(root)
    return SystemFacts(
        os=read_os(root),
        kernel=kernel,
        python=platform.python_version(),
        cpu_model=cpu_model,
        cpu_count=cpu_count,
        ram_total_gib=read_ram_gib(root),
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
        memlock_limit_bytes=read_memlock_limit() if live else None,
        container=container,
        iommu=detect_iommu(root),
        nvswitch_count=nvswitch_count,
        fabric_manager_running=detect_fabric_manager(root, nvswitch_count, container),
        numa_nodes=read_numa_nodes(root),
        cpus_usable=usable_cpus(root, cpu_count),
        memory_limit_gib=None if memory_limit is None else round(memory_limit / 1024**3, 2),
    )
