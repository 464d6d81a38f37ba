"""What a link should carry, from the facts, and measured copies held against it.

`link_capability` (between two GPUs: NVLink count × per-link speed, or PCIe) and
`host_link_capability` (host and GPU: its PCIe link) give GB/s per direction; a capability the facts
do not give is None, never a guess. `judge_p2p` and `judge_host_and_memory` set what
`gpurig bench comm` and `gpurig burn` measured beside them and say when a copy is far below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpurig.findings import Finding
from gpurig.probe.pci import normalize_bus_id

# "Far below what its kind should reach": a copy under half the link's rate per direction. Healthy
# parts reach 80-90% of their PCIe link with pinned copies, 80-90% of the memory's datasheet peak
# with a device copy, and well over half of an NVLink or PCIe link between GPUs.
P2P_SLOW_FRACTION = 0.5
HOST_LINK_SLOW_FRACTION = 0.5
MEMORY_SLOW_FRACTION = 0.5


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


def judge_p2p(p2p: dict[str, Any] | None, facts: Any, index_of: Any = None) -> tuple[list[dict[str, Any]], list[Finding]]:
    """Each measured pair beside its link's capability; a pair under half of it is a finding.
    `index_of` maps a run's GPU number to the facts' (NVML) index when they differ."""
    rows: list[dict[str, Any]] = []
    findings: list[Finding] = []
    if not p2p:
        return rows, findings
    at = index_of or (lambda i: i)
    for key, row in sorted(p2p["pairs"].items()):
        c = link_capability(facts, at(row["src"]), at(row["dst"])) if facts is not None else LinkCapability(None, None, "no facts")
        eff = row["one_way_gbps"] / c.gbps if c.gbps else None
        rows.append(dict(row, pair=key, capability_gbps=c.gbps, capability=c.how, link=c.link, one_way_efficiency=eff,
                         bidirectional_efficiency=(row["bidirectional_gbps"] / (2 * c.gbps)) if c.gbps else None))
        if eff is not None and eff < P2P_SLOW_FRACTION:
            findings.append(Finding(
                id="p2p-link-slow", severity="warn", area="links",
                title=f"GPU {at(row['src'])} → GPU {at(row['dst'])} copies at {row['one_way_gbps']:.0f} GB/s, {eff:.0%} of its {c.how}",
                detail=f"A {c.kind} link of {c.gbps:.0f} GB/s per direction should carry well over half of it; "
                f"this pair reaches {eff:.0%}.",
                fix="Run `gpurig doctor` for link state (NVLink down, PCIe downtrained, IOMMU); check "
                "`nvidia-smi nvlink -s` and `nvidia-smi topo -p2p r`; rerun `gpurig bench comm` on an idle machine.",
                evidence={"pair": key, "measured_gbps": row["one_way_gbps"], "capability_gbps": c.gbps},
            ))
    return rows, findings


def judge_host_and_memory(measured: dict[str, Any] | None, facts: Any,
                          index: int | None = None) -> tuple[dict[str, Any] | None, list[Finding]]:
    """One GPU's host-link and memory copies (GB/s) beside what its PCIe link and its datasheet
    allow; under half of either is a finding. `index`: the GPU's NVML index (default the first GPU)."""
    findings: list[Finding] = []
    if not measured:
        return None, findings
    gpus = list(getattr(facts, "gpus", None) or [])
    gpu = next((g for g in gpus if g.index == index), None) if index is not None else (gpus[0] if gpus else None)
    name = getattr(gpu, "name", None)
    host = host_link_capability(facts, gpu.index if gpu is not None else (index or 0))
    host_gbps, host_how = host.gbps, host.how
    try:
        from gpurig.knowledge.link_speeds import memory_bandwidth_for

        peak = memory_bandwidth_for(name)
    except ImportError:
        peak = None
    out = dict(measured)
    out["gpu"] = name
    out["host_link"] = {"gbps": host_gbps, "how": host_how, "current": host.link}
    out["device_memory"] = {"gbps": peak.gbps if peak else None,
                            "how": f"{name}'s datasheet peak" if peak else f"no datasheet figure for {name or 'this GPU'} in gpurig's table",
                            "source": peak.source if peak else None}

    def share(value: float | None, cap: float | None) -> float | None:
        return value / cap if value and cap else None

    out["h2d_efficiency"] = share(measured.get("h2d_gbps"), host_gbps)
    out["d2h_efficiency"] = share(measured.get("d2h_gbps"), host_gbps)
    out["bidirectional_efficiency"] = share(measured.get("bidirectional_gbps"), 2 * host_gbps if host_gbps else None)
    out["d2d_efficiency"] = share(measured.get("d2d_gbps"), peak.gbps if peak else None)
    slow = [(k, v) for k, v in (("host → device", out["h2d_efficiency"]), ("device → host", out["d2h_efficiency"]))
            if v is not None and v < HOST_LINK_SLOW_FRACTION]
    if slow:
        downtrained = host.link is not None and host.kind == "pcie" and f"PCIe {host.link}" != host_how
        findings.append(Finding(
            id="host-link-slow", severity="warn", area="links",
            title=f"Copies between host and GPU reach {', '.join(f'{k} {v:.0%}' for k, v in slow)} of {host_how}",
            detail=("Pinned copies normally reach 80-90% of the PCIe link. "
                    + (f"The link runs at {host.link}, below its {host_how.removeprefix('PCIe ')}: reseat the card or "
                       "check the slot and BIOS settings. " if downtrained else "")
                    + "A slow host link starves the input pipeline of every training step."),
            fix="Run `gpurig doctor` (PCIe width and generation, IOMMU); rerun on an idle machine; "
                "`nvidia-smi -q -d PCIE` shows the link's state.",
            evidence={"h2d_gbps": measured.get("h2d_gbps"), "d2h_gbps": measured.get("d2h_gbps"), "capability_gbps": host_gbps},
        ))
    eff = out["d2d_efficiency"]
    if eff is not None and eff < MEMORY_SLOW_FRACTION:
        findings.append(Finding(
            id="memory-bandwidth-low", severity="warn", area="gpus",
            title=f"Device memory copies reach {measured['d2d_gbps']:.0f} GB/s, {eff:.0%} of the {peak.gbps:.0f} GB/s "
                  f"of {name}'s datasheet",
            detail="A device copy normally reaches 80-90% of the memory's peak. Far less points to a memory clock held "
                   "low (power or thermal limit, an application clock setting) or another process using the GPU.",
            fix="Check `nvidia-smi -q -d CLOCK,PERFORMANCE` for throttle reasons and `nvidia-smi` for other processes; "
                "rerun on an idle GPU; `gpurig burn` screens the card under load.",
            evidence={"d2d_gbps": measured.get("d2d_gbps"), "peak_gbps": peak.gbps if peak else None},
        ))
    return out, findings
