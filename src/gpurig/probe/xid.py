"""Xid events from the kernel log (`dmesg`): the driver's record of a GPU fault, by PCI bus.

    NVRM: Xid (PCI:0000:06:00): 79, pid=1234, GPU has fallen off the bus.

Reading the kernel log may need root (`kernel.dmesg_restrict`); without it the answer is None,
never an error: missing is a value.
"""

from __future__ import annotations

import re
import subprocess

XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+)(.*)")


def parse_xids(text: str) -> list[dict]:
    """Every Xid line of a kernel log: {"bus": "06:00", "xid": 79, "text": the line}."""
    out = []
    for line in text.splitlines():
        m = XID_LINE.search(line)
        if m:
            out.append({"bus": m.group(2).lower(), "xid": int(m.group(3)), "text": line.strip()[-300:]})
    return out


def read_xids(timeout: float = 5.0) -> list[dict] | None:
    """The Xid lines of `dmesg` now, or None when the kernel log cannot be read."""
    try:
        proc = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return parse_xids(proc.stdout)


def bus_of(pci_bus_id: str | None) -> str | None:
    """NVML's '00000000:06:00.0' as the kernel log writes it: '06:00'."""
    if not pci_bus_id:
        return None
    m = re.search(r"([0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.\d$", pci_bus_id.strip())
    return m.group(1).lower() if m else None
