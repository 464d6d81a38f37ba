"""Which GPUs a CUDA program started now would see, decided without initialising CUDA.

`CUDA_VISIBLE_DEVICES` may hold indices ("0,1"), UUIDs ("GPU-8c7a..."), MIG ids, an empty string
(hide all) or garbage; CUDA stops reading at the first entry it cannot resolve, so "0,7,1" on a
4-GPU machine shows GPU 0 only.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Visibility:
    """What `CUDA_VISIBLE_DEVICES` does to the GPUs of this machine."""

    raw: str | None  # the variable as set, None when unset
    visible: list[int] = field(default_factory=list)  # physical indices a CUDA program sees, in order
    problems: list[str] = field(default_factory=list)  # entries CUDA will not resolve, and why


def parse_visible_devices(raw: str | None, gpu_count: int, uuids: list[str | None] | None = None) -> Visibility:
    """Apply CUDA's rules for `CUDA_VISIBLE_DEVICES` to a machine with `gpu_count` GPUs."""
    if raw is None:
        return Visibility(raw=None, visible=list(range(gpu_count)))
    vis = Visibility(raw=raw)
    text = raw.strip()
    if text == "":
        return vis
    uuids = uuids or []
    for entry in [e.strip() for e in text.split(",")]:
        if re.fullmatch(r"\d+", entry):
            idx = int(entry)
            if idx >= gpu_count:
                vis.problems.append(f"index {idx} does not exist (the machine has {gpu_count} GPU(s))")
                break
            if idx in vis.visible:
                vis.problems.append(f"index {idx} is listed twice")
                break
            vis.visible.append(idx)
        elif entry.startswith(("GPU-", "MIG-")):
            match = [i for i, u in enumerate(uuids) if u and (u == entry or u.startswith(entry))]
            if not match:
                vis.problems.append(f"{entry!r} matches no GPU UUID on this machine")
                break
            vis.visible.append(match[0])
        else:
            vis.problems.append(f"{entry!r} is neither an index nor a GPU-/MIG- UUID")
            break
    return vis


def nvml_gpu_count() -> int:
    """Physical GPUs NVML reports; 0 when NVML or the driver is missing. Never initialises CUDA."""
    from gpurig.probe.nvml import gpu_count

    return gpu_count()


def visible_gpu_count() -> int:
    """GPUs a CUDA program started with the current environment would see."""
    count = nvml_gpu_count()
    if count == 0:
        return 0
    return len(parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), count).visible)


def torch_cuda_build() -> str | None:
    """The CUDA version the installed torch was built for, read from its files without importing it.

    Returns None when torch is missing or is a CPU-only build.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = Path(loc) / "version.py"
        if path.is_file():
            m = re.search(r"^cuda\s*(?::\s*\w+(?:\[\w+\])?)?\s*=\s*['\"]([\d.]+)['\"]", path.read_text(), re.M)
            return m.group(1) if m else None
    return None


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None
