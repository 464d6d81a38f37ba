"""What a link between two GPUs should carry, from the facts: NVLink count × per-link speed, or PCIe.

Figures are GB/s per direction. A capability that the facts do not give is None, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpurig.probe.pci import normalize_bus_id


@dataclass
class LinkCapability:
    kind: str | None  # "nvlink" | "pcie" | None
    gbps: float | None  # per direction
    how: str  # the arithmetic, in words: "18 × 26.6 GB/s NVLink"
    link: str | None = None  # the topology label, "NV18", "PIX", "SYS"


def _pcie_gbps(gen: int | None, width: int | None) -> float | None:
    if not gen or not width:
        return None
    try:
        from gpurig.knowledge.link_speeds import pcie_gbps  # the link-speed table, when present
    except ImportError:
        return None
    try:
        return pcie_gbps(gen, width)
    except Exception:  # a generation the table does not know: unknown, not a crash
        return None


def _nvlink_per_link(compute_capability: str | None) -> float | None:
    if not compute_capability:
        return None
    try:
        from gpurig.knowledge.link_speeds import nvlink_per_link_gbps
    except ImportError:
        return None
    try:
        return nvlink_per_link_gbps(compute_capability)
    except Exception:  # an architecture the table does not know: unknown, not a crash
        return None


def link_capability(facts: Any, a: int, b: int) -> LinkCapability:
    """GB/s per direction between GPUs `a` and `b`: NVLinks to the peer × per-link speed, else PCIe.

    The per-link speed is what NVML/nvidia-smi reported; when the facts lack it (NVML does not
    give it on every system), the nominal speed of the GPU's NVLink generation from the knowledge
    base. The link count is the links whose remote end is the peer, else the topology's NV#.
    """
    gpus = {g.index: g for g in (getattr(facts, "gpus", None) or [])}
    pair = facts.pair(a, b) if facts is not None and hasattr(facts, "pair") else None
    label = pair.link if pair else None
    ga, gb = gpus.get(a), gpus.get(b)
    if ga is None or gb is None:
        return LinkCapability(None, None, "no facts about this link", label)
    peer_key = normalize_bus_id(gb.pci_bus_id)
    active = [lk for lk in ga.nvlinks if lk.active]
    to_peer = [lk for lk in active if peer_key is not None and normalize_bus_id(lk.remote_pci_bus_id) == peer_key]
    count = len(to_peer) or None
    if count is None and pair and pair.nvlink_count:
        count = pair.nvlink_count
    if count is None and label and (m := re.fullmatch(r"NV(\d+)", label.upper())):
        count = int(m.group(1))
    if count:
        speeds = sorted(lk.speed_gbps for lk in (to_peer or active) if lk.speed_gbps)
        if speeds:
            speed = speeds[len(speeds) // 2]
            return LinkCapability("nvlink", count * speed, f"{count} × {speed:g} GB/s NVLink", label)
        nominal = _nvlink_per_link(ga.compute_capability)
        if nominal:
            return LinkCapability("nvlink", count * nominal, f"{count} × {nominal:g} GB/s NVLink (nominal for compute capability {ga.compute_capability})", label)
        return LinkCapability("nvlink", None, f"{count} NVLinks (speed unknown)", label)
    gen = min(filter(None, (ga.pcie_gen_max, gb.pcie_gen_max)), default=None)
    width = min(filter(None, (ga.pcie_width_max, gb.pcie_width_max)), default=None)
    if gen and width:
        gbps = _pcie_gbps(gen, width)
        return LinkCapability("pcie", gbps, f"PCIe Gen{gen} x{width}" + ("" if gbps else " (speed table not available)"), label)
    return LinkCapability(None, None, "no facts about this link", label)


def host_link_capability(facts: Any, index: int = 0) -> LinkCapability:
    """GB/s per direction between the host and GPU `index`: its PCIe link at its maximum generation
    and width (`link` holds the generation and width it runs at now, when they are known)."""
    gpu = {g.index: g for g in (getattr(facts, "gpus", None) or [])}.get(index)
    gen, width = getattr(gpu, "pcie_gen_max", None), getattr(gpu, "pcie_width_max", None)
    cur_gen, cur_width = getattr(gpu, "pcie_gen_current", None), getattr(gpu, "pcie_width_current", None)
    now = f"Gen{cur_gen} x{cur_width}" if cur_gen and cur_width else None
    if not (gen and width):
        return LinkCapability(None, None, "the PCIe link is not known here", now)
    return LinkCapability("pcie", _pcie_gbps(gen, width), f"PCIe Gen{gen} x{width}", now)
