"""NVIDIA devices on the PCI bus and the state of the kernel module, read from sysfs and procfs.

This works with no driver at all, which is how "driver not loaded" is told apart from "no NVIDIA
GPU": the GPU is on the bus (`lspci -d 10de:`) whether or not `nvidia.ko` is bound to it.
Every reader takes `root` (default "/") so tests can point it at a fake tree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpurig.probe.facts import PciDeviceFacts

NVIDIA_VENDOR = "0x10de"

# PCI class code (base class + subclass, the upper 16 bits of the 24-bit `class` file) -> kind.
_KIND_BY_CLASS = {
    "0x0300": "gpu",  # VGA compatible controller (GeForce / RTX workstation cards)
    "0x0302": "gpu",  # 3D controller (data-centre GPUs: A100, H100, H200)
    "0x0680": "nvswitch",  # "Bridge: other": how NVSwitch chips appear on HGX boards
    "0x0403": "audio",  # HDMI audio function of a consumer card
}


def normalize_bus_id(bus_id: str | None) -> str | None:
    """Return a PCI address in sysfs form, `dddd:bb:dd.f`, lower case.

    NVML and `nvidia-smi` print an 8-digit domain ("00000000:18:00.0"); sysfs and `lspci -D` print
    four ("0000:18:00.0"). One form everywhere lets GPUs, NVLink peers and bus devices be matched.

    >>> normalize_bus_id("00000000:1B:00.0")
    '0000:1b:00.0'
    """
    if not bus_id:
        return None
    text = bus_id.strip().lower()
    m = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", text)
    if not m:
        return text or None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_pci_devices(root: str | os.PathLike = "/") -> list[PciDeviceFacts] | None:
    """NVIDIA functions on the PCI bus, sorted by slot; None when sysfs cannot be read."""
    devices_dir = Path(root) / "sys" / "bus" / "pci" / "devices"
    try:
        entries = sorted(os.listdir(devices_dir))
    except OSError:
        return None
    found = []
    for slot in entries:
        dev = devices_dir / slot
        if (_read(dev / "vendor") or "").lower() != NVIDIA_VENDOR:
            continue
        klass = (_read(dev / "class") or "").lower()
        kind = _KIND_BY_CLASS.get(klass[:6], "other") if klass.startswith("0x") else None
        device_id = _read(dev / "device")
        driver = None
        try:
            driver = os.path.basename(os.readlink(dev / "driver"))
        except OSError:  # no `driver` link: nothing is bound to this function
            driver = None
        found.append(
            PciDeviceFacts(slot=normalize_bus_id(slot) or slot, device_id=device_id.lower() if device_id else None,
                           kind=kind, driver=driver)
        )
    return found


def pci_numa_node(bus_id: str | None, root: str | os.PathLike = "/") -> int | None:
    """The NUMA node sysfs gives for a PCI device; None when unknown (sysfs says -1 on one-node machines)."""
    slot = normalize_bus_id(bus_id)
    if not slot:
        return None
    text = _read(Path(root) / "sys" / "bus" / "pci" / "devices" / slot / "numa_node")
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def pci_cpu_list(bus_id: str | None, root: str | os.PathLike = "/") -> str | None:
    """The CPUs local to a PCI device ("0-15,32-47"), from sysfs `local_cpulist`."""
    slot = normalize_bus_id(bus_id)
    if not slot:
        return None
    return _read(Path(root) / "sys" / "bus" / "pci" / "devices" / slot / "local_cpulist") or None


def read_kernel_module(root: str | os.PathLike = "/") -> tuple[bool | None, str | None]:
    """(loaded, version) of the `nvidia` kernel module.

    loaded is None when the kernel does not expose `/sys/module` at all (nothing can be said).
    The version comes from `/proc/driver/nvidia/version`, e.g.
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 ..." -> "580.95.05",
    or from `/sys/module/nvidia/version`.
    """
    base = Path(root)
    version = None
    text = _read(base / "proc" / "driver" / "nvidia" / "version")
    if text:
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if m:
            version = m.group(1)
    if version is None:
        version = _read(base / "sys" / "module" / "nvidia" / "version") or None
    if (base / "sys" / "module" / "nvidia").is_dir() or text:
        return True, version
    if (base / "sys" / "module").is_dir():
        return False, version
    return None, version
