"""Crafted facts for the comm tests: two GPUs joined by NVLink or by PCIe."""

from __future__ import annotations

from pathlib import Path

from gpurig.probe.facts import GpuFacts, GpuPairFacts, NvLinkFacts, RigFacts

NCCL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def two_gpu_facts(link: str = "NV18", nvlinks: int = 18, speed: float | None = 26.562, pcie_gen: int = 5,
                  remote: str | None = None) -> RigFacts:
    """Two H200-like GPUs at bus 1b and 43, joined by `link` (NV18 by default, or "PHB"/"SYS" for PCIe).

    speed=None, remote="ffffffff:ff:ff.0" is what NVML reported on the real 2×H200 virtual machine:
    no per-link speed, and a remote end that looks like a switch.
    """
    buses = ["00000000:1B:00.0", "00000000:43:00.0"]
    gpus = []
    for i in range(2):
        links = []
        if link.startswith("NV"):
            links = [NvLinkFacts(link=k, active=True, speed_gbps=speed, remote_pci_bus_id=remote or buses[1 - i],
                                 remote_device_type="switch" if remote else "gpu")
                     for k in range(nvlinks)]
        gpus.append(GpuFacts(index=i, name="NVIDIA H200", pci_bus_id=buses[i], compute_capability="9.0",
                             pcie_gen_max=pcie_gen, pcie_width_max=16, pcie_gen_current=pcie_gen, pcie_width_current=16,
                             nvlinks=links))
    pair = GpuPairFacts(gpu_a=0, gpu_b=1, link=link, nvlink_count=nvlinks if link.startswith("NV") else None, p2p_read=True)
    return RigFacts(gpus=gpus, pairs=[pair])
