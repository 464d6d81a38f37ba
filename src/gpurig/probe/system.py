"""Facts about the host around the GPUs: OS, CPUs, memory, /dev/shm, memlock, container, IOMMU, NUMA.

Everything is read from files under `root` (default "/"), so tests feed a fake tree. The few facts
that belong to the running process itself (Python version, RLIMIT_MEMLOCK) are read live.
"""

from __future__ import annotations

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
    )
