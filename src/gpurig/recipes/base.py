"""What every recipe shares: the `Recipe` result, the host summary it is built from, and checks.

A recipe is text (a pip line, a Dockerfile, a docker run line, a compose file, an sbatch script,
a Kubernetes manifest) plus the reasons behind it and the facts it was built on. Every recipe
function is pure: facts and options in, `Recipe` out; the command layer reads and writes files.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpurig.errors import BadInput
from gpurig.probe.facts import RigFacts


@dataclass
class Recipe:
    """A generated recipe: `text` to paste or save, `reasons` a person reads, `facts_used` for audit."""

    kind: str  # "pip", "dockerfile", "docker-run", "compose", "slurm", "k8s"
    text: str
    reasons: list[str] = field(default_factory=list)
    facts_used: dict[str, Any] = field(default_factory=dict)
    fits: bool = True  # False when nothing fits this host (the text then says what to change)
    warnings: list[str] = field(default_factory=list)  # things the user must not miss (e.g. --public)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "recipe": self.text,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "fits": self.fits,
            "facts_used": dict(self.facts_used),
        }


@dataclass
class HostSummary:
    """The few facts recipes are built from, with `None` for anything the snapshot did not tell."""

    gpu_count: int
    gpu_names: list[str]
    compute_capabilities: list[str]  # distinct, sorted: ["8.0", "9.0"]
    driver_version: str | None
    driver_cuda: str | None  # the newest CUDA the driver reports it runs ("13.0"), when it says
    python: str | None  # "3.11.9"
    cpu_count: int | None
    ram_total_gib: float | None
    in_container: str | None
    gpus_without_driver: int = 0  # NVIDIA GPUs on the PCI bus that no driver answers for
    gpus_per_model: dict[str, int] = field(default_factory=dict)  # {"NVIDIA H200": 2}

    @classmethod
    def from_facts(cls, facts: RigFacts) -> HostSummary:
        names = sorted({g.name for g in facts.gpus if g.name})
        caps = sorted({g.compute_capability for g in facts.gpus if g.compute_capability}, key=_version_key)
        return cls(
            gpu_count=len(facts.gpus),
            gpu_names=names,
            compute_capabilities=caps,
            driver_version=facts.driver.driver_version,
            driver_cuda=facts.driver.cuda_driver_version,
            python=facts.system.python,
            cpu_count=facts.system.cpu_count,
            ram_total_gib=facts.system.ram_total_gib,
            in_container=facts.system.container,
            gpus_per_model=dict(Counter(g.name or "NVIDIA GPU" for g in facts.gpus)),
            gpus_without_driver=(sum(1 for d in facts.pci_devices or [] if d.kind == "gpu")
                                 if not facts.gpus else 0),
        )

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0

    def describe(self) -> str:
        """One line for a recipe's header: `2 x NVIDIA H200 (sm 9.0), driver 580.95.05`."""
        if not self.has_gpu:
            if self.gpus_without_driver:
                return f"{self.gpus_without_driver} NVIDIA GPU(s) on the PCI bus, but no driver answers"
            return "no NVIDIA GPU (CPU only)"
        per_model = self.gpus_per_model or {", ".join(self.gpu_names) or "NVIDIA GPU": self.gpu_count}
        gpus = " + ".join(f"{n} x {name}" for name, n in per_model.items())
        caps = "/".join(self.compute_capabilities) or "?"
        driver = self.driver_version or "unknown"
        return f"{gpus} (compute capability {caps}), driver {driver}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_count": self.gpu_count,
            "gpu_names": self.gpu_names,
            "compute_capabilities": self.compute_capabilities,
            "driver_version": self.driver_version,
            "driver_cuda": self.driver_cuda,
            "python": self.python,
            "cpu_count": self.cpu_count,
            "ram_total_gib": self.ram_total_gib,
            "gpus_without_driver": self.gpus_without_driver,
        }

    def driver_missing_advice(self) -> str | None:
        """When GPUs sit on the bus with no driver: a GPU recipe cannot be chosen until one is loaded."""
        if self.has_gpu or not self.gpus_without_driver:
            return None
        return (f"{self.gpus_without_driver} NVIDIA GPU(s) are on the PCI bus but the NVIDIA driver is not loaded: "
                "install or load it (`gpurig doctor` says which), then run this again to get a recipe for the GPUs")


def _version_key(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """"12.8" -> (12, 8); None or garbage -> None."""
    if not text:
        return None
    try:
        return tuple(int(p) for p in str(text).strip().split("."))
    except ValueError:
        return None


def parse_gpu_selection(value: str, host: HostSummary | None = None, flag: str = "--gpus") -> list[int] | None:
    """"all" -> None (every GPU); "0,1" -> [0, 1]. Indices the host does not have are bad input."""
    text = (value or "").strip().lower()
    if text == "all":
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p.isdigit() for p in parts):
        raise BadInput(f"{flag} must be 'all' or GPU indices like '0,1', got {value!r}")
    indices = [int(p) for p in parts]
    if host is not None and not host.has_gpu:
        raise BadInput(f"{flag} {value!r}: the host has no GPU (use --facts FILE from the GPU machine)")
    if len(set(indices)) != len(indices):
        raise BadInput(f"{flag} lists a GPU twice: {value!r}")
    if host is not None and host.gpu_count and max(indices) >= host.gpu_count:
        raise BadInput(f"{flag} {value!r}: GPU {max(indices)} does not exist (the host has {host.gpu_count} GPU(s))")
    return indices


def require_positive(value: int, flag: str) -> int:
    if value < 1:
        raise BadInput(f"{flag} must be at least 1, got {value}")
    return value


def gib_ceil(n_bytes: float) -> int:
    return max(1, math.ceil(n_bytes / 2**30))


# Ports the container's services listen on. SSH uses 2222 because the daemon runs as the
# non-root user, and only root may listen below 1024.
JUPYTER_PORT = 8888
TENSORBOARD_PORT = 6006
SSH_PORT = 2222
WORKDIR = "/workspace"  # where the project is mounted (docker run, compose) or copied (Dockerfile)
DEFAULT_IMAGE = "gpurig-train"  # the tag `docker build -t gpurig-train .` gives the generated Dockerfile
USERNAME = "trainer"  # the non-root user the generated images run as
USER_HOME = "/home/" + USERNAME
USER_UID = 1000  # its default uid and gid: the first user on most Linux hosts, so mounted files match
