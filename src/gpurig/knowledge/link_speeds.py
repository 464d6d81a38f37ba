"""What the links and the memory of a GPU can carry (`links.toml`): NVLink and PCIe generations,
and each part's memory bandwidth, with their sources."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gpurig.knowledge.loaders import UnknownVersion, _cc_tuple, _get, _rows

# ---------------------------------------------------------------------------------------------
# links (links.toml)


@dataclass(frozen=True)
class NvLinkGeneration:
    generation: int
    architecture: str
    compute_capabilities: tuple[str, ...]
    per_link_gbps: float  # nominal, per direction
    links_per_gpu: int
    source: str
    reported_gbps: float | None = None  # what `nvidia-smi nvlink -s` prints per link
    unverified: bool = False


@dataclass(frozen=True)
class PcieGeneration:
    generation: int
    gt_per_s: float
    encoding: str
    per_lane_gbps: float  # per direction, after encoding
    source: str
    unverified: bool = False


@functools.cache
def nvlink_generations() -> tuple[NvLinkGeneration, ...]:
    return tuple(
        NvLinkGeneration(generation=int(_get(r, "generation", "links.toml", "nvlink")),
                         architecture=_get(r, "architecture", "links.toml", "nvlink"),
                         compute_capabilities=tuple(_get(r, "compute_capabilities", "links.toml", "nvlink")),
                         per_link_gbps=float(_get(r, "per_link_gbps", "links.toml", "nvlink")),
                         links_per_gpu=int(_get(r, "links_per_gpu", "links.toml", "nvlink")),
                         source=r["source"],
                         reported_gbps=float(r["reported_gbps"]) if "reported_gbps" in r else None,
                         unverified=bool(r.get("unverified", False)))
        for r in _rows("links.toml", "nvlink")
    )


@functools.cache
def pcie_generations() -> tuple[PcieGeneration, ...]:
    return tuple(
        PcieGeneration(generation=int(_get(r, "generation", "links.toml", "pcie")),
                       gt_per_s=float(_get(r, "gt_per_s", "links.toml", "pcie")),
                       encoding=_get(r, "encoding", "links.toml", "pcie"),
                       per_lane_gbps=float(_get(r, "per_lane_gbps", "links.toml", "pcie")),
                       source=r["source"], unverified=bool(r.get("unverified", False)))
        for r in _rows("links.toml", "pcie")
    )


def nvlink_generation(compute_capability_or_generation: str | int) -> NvLinkGeneration | None:
    """The NVLink of a GPU ("9.0") or a generation (4, "4", "nvlink4", "NVLink 4"); None when there is none.

    A capability is matched exactly: GPUs without NVLink (Ada 8.9, the RTX 5090's 12.0) give None.
    """
    key = compute_capability_or_generation
    if isinstance(key, int):
        return next((g for g in nvlink_generations() if g.generation == key), None)
    text = str(key).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(?:nvlink)?(\d+)", text)
    if m:
        return nvlink_generation(int(m.group(1)))
    want = _cc_tuple(text)
    for gen in nvlink_generations():
        if any(_cc_tuple(c) == want for c in gen.compute_capabilities):
            return gen
    return None


def nvlink_per_link_gbps(compute_capability_or_generation: str | int) -> float | None:
    """Nominal GB/s of one NVLink in one direction ("9.0" -> 25.0, 5 -> 50.0); None when unknown."""
    gen = nvlink_generation(compute_capability_or_generation)
    return gen.per_link_gbps if gen else None


def pcie_generation(gen: int) -> PcieGeneration | None:
    return next((p for p in pcie_generations() if p.generation == gen), None)


@dataclass(frozen=True)
class MemoryBandwidth:
    pattern: str
    gbps: float
    source: str


@functools.cache
def memory_bandwidths() -> tuple[MemoryBandwidth, ...]:
    return tuple(MemoryBandwidth(pattern=_get(r, "pattern", "links.toml", "memory"),
                                 gbps=float(_get(r, "gbps", "links.toml", "memory")), source=r["source"])
                 for r in _rows("links.toml", "memory"))


def memory_bandwidth_for(gpu_name: str | None) -> MemoryBandwidth | None:
    """The datasheet's peak memory bandwidth of the GPU NVML calls `gpu_name`; None when unknown.

        >>> memory_bandwidth_for("NVIDIA H200").gbps
        4800.0
        >>> memory_bandwidth_for("NVIDIA A100-SXM4-80GB").gbps
        2039.0
    """
    if not gpu_name:
        return None
    return next((m for m in memory_bandwidths() if re.search(m.pattern, gpu_name, re.IGNORECASE)), None)


def pcie_gbps(gen: int, width: int) -> float:
    """Bandwidth of a PCIe link in one direction, after encoding: pcie_gbps(4, 16) -> 31.5.

    Raises UnknownVersion for a generation not in the table and ValueError for a width below 1.
    """
    row = pcie_generation(int(gen))
    if row is None:
        raise UnknownVersion(f"PCIe generation {gen} is not in gpurig's table (1 to {pcie_generations()[-1].generation})")
    if int(width) < 1:
        raise ValueError(f"PCIe width must be at least 1 lane, got {width}")
    return row.per_lane_gbps * int(width)
