"""Rigs for the recipe tests: crafted `RigFacts` of real configurations, and the recorded fixtures."""

from __future__ import annotations

import json
from pathlib import Path

from gpurig.probe.facts import DriverFacts, GpuFacts, RigFacts, SystemFacts

RIGS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"


def make_facts(gpus: list[tuple[str, str]], driver: str | None, driver_cuda: str | None = None,
               python: str | None = "3.11.9", cpus: int | None = 32) -> RigFacts:
    """A snapshot with `gpus` [(name, compute capability)], a driver, a Python and a core count."""
    return RigFacts(
        driver=DriverFacts(source="nvml" if driver else None, driver_version=driver, cuda_driver_version=driver_cuda),
        gpus=[GpuFacts(index=i, name=name, compute_capability=cc) for i, (name, cc) in enumerate(gpus)],
        system=SystemFacts(python=python, cpu_count=cpus, ram_total_gib=256.0),
    )


# Crafted from real configurations (reference/compat.md gives the version facts behind each).
CRAFTED = {
    "h200x2_r580": make_facts([("NVIDIA H200", "9.0")] * 2, "580.95.05", "13.0"),
    "t4_r470": make_facts([("Tesla T4", "7.5")], "470.82.01", "11.4"),
    "v100x4_r535": make_facts([("Tesla V100-SXM2-32GB", "7.0")] * 4, "535.104.05", "12.2", python="3.12.3"),
    "rtx5090_r550": make_facts([("NVIDIA GeForce RTX 5090", "12.0")], "550.54.15", "12.4"),
    "a100x8_r570": make_facts([("NVIDIA A100-SXM4-80GB", "8.0")] * 8, "570.124.06", "12.8", cpus=128),
    "laptop_cpu": make_facts([], None, None, cpus=8),
}


def recorded_rigs() -> dict[str, RigFacts]:
    """The recorded rig fixtures shared by the whole test suite (tests/fixtures/rigs/*.json)."""
    out = {}
    for path in sorted(RIGS_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        out[path.stem] = RigFacts.from_dict(data)
    return out
