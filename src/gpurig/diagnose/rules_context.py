"""What every doctor rule shares: the snapshot plus a few derived views, and small helpers.

A rule is a function `Context -> list[Finding]`. Rules never read the machine: the only file read
anywhere below `judge` is the knowledge base, through `gpurig.knowledge.loaders`. A fact that is
`None` is unknown, and a rule that needs it says nothing rather than assume.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from gpurig.diagnose.findings import Finding
from gpurig.knowledge import loaders as kb
from gpurig.probe.facts import GpuFacts, RigFacts
from gpurig.probe.visible import Visibility, parse_visible_devices

Rule = Callable[["Context"], list[Finding]]


@dataclass
class Context:
    facts: RigFacts
    # Ids of findings already made, so a later rule can stay quiet about a symptom that an
    # earlier finding already explains (for example: no fabric manager -> NVLinks down).
    made: set[str] = field(default_factory=set)

    @property
    def gpus(self) -> list[GpuFacts]:
        return self.facts.gpus

    @property
    def env(self) -> dict[str, str]:
        return self.facts.env

    @cached_property
    def visibility(self) -> Visibility | None:
        """What CUDA_VISIBLE_DEVICES does here; None when there are no GPUs to apply it to."""
        if not self.gpus:
            return None
        return parse_visible_devices(self.env.get("CUDA_VISIBLE_DEVICES"), len(self.gpus),
                                     [g.uuid for g in self.gpus])

    @cached_property
    def driver_version(self) -> str | None:
        return valid_version(self.facts.driver.driver_version)

    @cached_property
    def driver_cuda(self) -> str | None:
        """The newest CUDA the driver supports, as the machine reports it (NVML / nvidia-smi)."""
        return valid_version(self.facts.driver.cuda_driver_version)

    @cached_property
    def capabilities(self) -> dict[str, list[GpuFacts]]:
        """GPUs grouped by valid compute capability ("9.0" -> [GPU 0, GPU 1])."""
        out: dict[str, list[GpuFacts]] = {}
        for g in self.gpus:
            cc = valid_cc(g.compute_capability)
            if cc is not None:
                out.setdefault(cc, []).append(g)
        return out

    @cached_property
    def nvswitch_without_fabric_manager(self) -> bool:
        s = self.facts.system
        return bool(s.nvswitch_count) and s.fabric_manager_running is False


def valid_version(text: str | None) -> str | None:
    """The version if it parses as one ("580.95.05"), else None (so "N/A" counts as unknown)."""
    if text is None:
        return None
    try:
        kb.version_key(text)
    except kb.UnknownVersion:
        return None
    return text.strip()


def valid_cc(text: str | None) -> str | None:
    if text is None or not re.fullmatch(r"\s*\d+\.\d+\s*", text):
        return None
    return text.strip()


def gpu_label(g: GpuFacts) -> str:
    return f"GPU {g.index} ({g.name})" if g.name else f"GPU {g.index}"


def gpu_list(gpus: list[GpuFacts]) -> str:
    """"GPU 0, 1, 3" for a short list of indices."""
    idx = [str(g.index) for g in gpus]
    return ("GPU " if len(idx) == 1 else "GPUs ") + ", ".join(idx)


def env_flag(env: dict[str, str], name: str) -> bool | None:
    """An integer-valued switch as NCCL reads it: True when set to a non-zero number, None when unset."""
    value = env.get(name)
    if value is None:
        return None
    m = re.fullmatch(r"\s*(-?\d+)\s*", value)
    return bool(m and int(m.group(1)) != 0)


def gib(mib: float | None) -> str:
    return "n/a" if mib is None else f"{mib / 1024:.0f} GiB"


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB", "MiB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop always returns


def is_nvlink_pair(link: str | None, nvlink_count: int | None) -> bool | None:
    """True for an NVLink pair, False for a PCIe one, None when the topology is unknown."""
    if nvlink_count:
        return True
    if link is None:
        return None
    return link.upper().startswith("NV")
