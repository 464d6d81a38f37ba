"""Xid events, the driver's record of a GPU fault: from the kernel log (`dmesg`), by PCI bus,

    NVRM: Xid (PCI:0000:06:00): 79, pid=1234, GPU has fallen off the bus.

and, while a run goes on, from NVML's event API (`XidEvents`), which answers where the kernel log
is closed. Reading the kernel log may need root (`kernel.dmesg_restrict`); without it the answer
is None, never an error: missing is a value.
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


class XidEvents:
    """Xid events as NVML delivers them while a run goes on (`nvmlEventTypeXidCriticalError`), for
    where the kernel log is closed (containers, `dmesg_restrict`). `start()`, then `poll()` (never
    blocks), then `stop()`. Where NVML cannot register the events (no support, no permission, a
    virtual GPU), `available` stays False and nothing is polled."""

    XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError

    def __init__(self, nvml: object = None) -> None:
        self.nvml = nvml
        self.available = False
        self.error: str | None = None
        self._set = None
        self._bus: dict[int, str | None] = {}
        self.gpus: list[int] = []  # the GPUs whose Xid events NVML delivers
        self._inited = False

    def start(self) -> XidEvents:
        try:
            if self.nvml is None:
                import pynvml

                self.nvml = pynvml
            nvml = self.nvml
            nvml.nvmlInit()
            self._inited = True
            self._set = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, self.XID_CRITICAL_ERROR, self._set)
                except Exception as exc:  # this GPU cannot deliver them; the others may
                    self.error = f"GPU {index}: {exc}"
                    continue
                bus = nvml.nvmlDeviceGetPciInfo(handle).busId
                self._bus[index] = bus.decode() if isinstance(bus, bytes) else str(bus)
            self.gpus = sorted(self._bus)
            self.available = bool(self._bus)
        except Exception as exc:  # no NVML, no driver: the kernel log is all there is
            self.error = str(exc) or type(exc).__name__
        return self

    def poll(self) -> list[dict]:
        """The Xid events delivered since the last poll: {"bus", "xid", "gpu", "text", "source": "nvml"}."""
        out: list[dict] = []
        if not self.available:
            return out
        nvml = self.nvml
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing waiting
                return out
            try:
                index = int(nvml.nvmlDeviceGetIndex(data.device))
            except Exception:
                index = -1
            xid = int(data.eventData)
            bus = self._bus.get(index)
            out.append({"bus": bus_of(bus), "xid": xid, "gpu": index, "source": "nvml",
                        "text": f"NVML event: Xid {xid} on GPU {index} ({bus})"})

    def stop(self) -> None:
        if self._set is not None:
            try:
                self.nvml.nvmlEventSetFree(self._set)
            except Exception:
                pass
            self._set = None
        if self._inited:  # one shutdown for the one init
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
            self._inited = False
        self.available = False
