"""The doctor's judgement: a `RigFacts` snapshot in, `Finding`s out, with no I/O.

    >>> from gpurig.probe.facts import RigFacts
    >>> [f.id for f in judge(RigFacts())]
    ['no-nvidia-gpu']

Each rule lives in a `rules_<area>.py` module (driver, gpus, links, system/environment,
frameworks; network, over the rendezvous facts of `gpurig doctor --master-addr`) and returns
findings with a stable id, a severity, the facts it used as evidence and a concrete fix. Unknown
facts (`None`) never raise a finding. Rules run in a fixed order so that a later rule can stay
quiet about a symptom an earlier finding already explains (`Context.made`): no fabric manager
explains NVLinks that are down and a torch that cannot start CUDA.
"""

from __future__ import annotations

import traceback

from gpurig.diagnose import (
    rules_driver,
    rules_frameworks,
    rules_gpus,
    rules_links,
    rules_network,
    rules_system,
)
from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context, Rule
from gpurig.probe.facts import RigFacts
from gpurig.probe.network import RendezvousFacts

# Every finding id the rules can make, with its area and what it means. Ids are stable: tools and
# people grep for them, so a rule that changes meaning gets a new id.
FINDINGS: dict[str, tuple[str, str]] = {
    # driver
    "no-nvidia-gpu": ("driver", "no NVIDIA GPU anywhere: work runs on the CPU"),
    "driver-not-loaded": ("driver", "GPUs on the PCI bus, nvidia.ko not driving them"),
    "nvml-unavailable": ("driver", "nvidia.ko loaded, NVML and nvidia-smi do not answer"),
    "container-without-gpus": ("driver", "the host has GPUs, the container was given none"),
    "nvml-driver-mismatch": ("driver", "kernel module and user-space driver versions differ"),
    "gpu-without-nvidia-driver": ("driver", "some GPUs bound to vfio-pci/nouveau/nothing"),
    "driver-ok": ("driver", "the driver and the CUDA version it supports"),
    "driver-too-old-for-gpu": ("driver", "the driver predates the GPU's architecture"),
    "driver-branch-eol": ("driver", "the driver branch was past its end of life when the snapshot was taken"),
    # gpus
    "gpus-found": ("gpus", "the GPUs, by model"),
    "mixed-gpu-models": ("gpus", "different models (or memory sizes): the slowest sets the pace"),
    "ecc-uncorrected-errors": ("gpus", "uncorrected ECC errors (volatile: error, lifetime: warn)"),
    "memory-pages-retired": ("gpus", "retired pages (pending: error)"),
    "memory-rows-remapped": ("gpus", "remapped rows (pending or failed: error)"),
    "mig-enabled": ("gpus", "MIG mode on"),
    "compute-mode-exclusive": ("gpus", "exclusive compute mode"),
    "compute-mode-prohibited": ("gpus", "prohibited compute mode"),
    "persistence-mode-off": ("gpus", "persistence mode off"),
    "gpu-memory-in-use": ("gpus", "memory already held by other processes"),
    "gpu-throttled": ("gpus", "thermal slowdown or hardware power brake"),
    "gpu-power-capped": ("gpus", "clocks held down by the power limit"),
    # links
    "nvswitch-no-fabric-manager": ("links", "NVSwitch board without a running fabric manager"),
    "fabric-manager-unknown": ("links", "NVSwitch board, fabric manager state unknown"),
    "fabric-manager-ok": ("links", "NVSwitch board with the fabric manager running"),
    "nvlink-ok": ("links", "NVLinks all up: how the GPUs are joined and at what rate"),
    "nvlink-links-down": ("links", "a GPU with fewer active NVLinks than its peers"),
    "nvlink-slow-links": ("links", "NVLinks running below the speed of the others"),
    "nvlink-inactive": ("links", "NVLink ports with nothing connected"),
    "pcie-width-degraded": ("links", "PCIe link trained to fewer lanes than possible"),
    "pcie-gen-below-max": ("links", "PCIe generation below the maximum while the GPU is busy"),
    "pcie-gen-idle-downclock": ("links", "PCIe generation low while idle or with unknown load"),
    "pcie-ok": ("links", "PCIe links at full width"),
    "pcie-p2p-iommu": ("links", "PCIe peer-to-peer with the IOMMU on"),
    "pcie-p2p-unavailable": ("links", "GPU pairs without PCIe peer access"),
    "p2p-ok": ("links", "peer access between every pair"),
    # system and environment
    "shm-too-small": ("system", "/dev/shm too small (the Docker 64 MB default: error)"),
    "shm-ok": ("system", "/dev/shm large enough"),
    "cuda-visible-devices-empty": ("environment", "CUDA_VISIBLE_DEVICES hides every GPU"),
    "cuda-visible-devices-malformed": ("environment", "CUDA_VISIBLE_DEVICES has an entry CUDA cannot read"),
    "cuda-visible-devices-missing-gpu": ("environment", "CUDA_VISIBLE_DEVICES names a GPU that does not exist"),
    "cuda-visible-devices-hides-gpus": ("environment", "CUDA_VISIBLE_DEVICES hides some GPUs"),
    "cuda-device-order": ("environment", "different GPUs without CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    "nccl-p2p-disabled": ("environment", "NCCL peer-to-peer off where the hardware has it"),
    "nccl-shm-disabled": ("environment", "NCCL shared-memory transport off"),
    "nccl-ib-disabled": ("environment", "NCCL InfiniBand off (matters across machines)"),
    "nccl-algo-forced": ("environment", "NCCL_ALGO / NCCL_PROTO forced"),
    # frameworks
    "torch-import-failed": ("frameworks", "torch present but its import crashed"),
    "torch-newer-than-knowledge": ("frameworks", "the installed torch is newer than gpurig's wheel table"),
    "torch-not-installed": ("frameworks", "no torch: verify, bench, train, launch and check cannot start"),
    "torch-cpu-only-build": ("frameworks", "a CPU-only torch on a GPU machine"),
    "torch-cuda-build-on-cpu-host": ("frameworks", "a CUDA torch on a machine without an NVIDIA GPU (runs; the CPU wheel is smaller)"),
    "torch-cuda-too-new-for-driver": ("frameworks", "torch's CUDA needs a newer driver"),
    "torch-cuda-minor-compat": ("frameworks", "torch's CUDA runs through minor-version compatibility"),
    "torch-cuda-driver-ok": ("frameworks", "the driver supports torch's CUDA"),
    "torch-arch-missing": ("frameworks", "a GPU's compute capability is not compiled into torch"),
    "torch-arch-ptx-only": ("frameworks", "a GPU runs torch only through PTX JIT"),
    "torch-arch-ptx-needs-driver": ("frameworks", "PTX-only GPU under minor-version compatibility: cannot JIT"),
    "torch-arch-ok": ("frameworks", "torch has machine code for every GPU"),
    "torch-cannot-use-gpu": ("frameworks", "torch.cuda.is_available() is False and nothing else explains it"),
    "torch-device-count-mismatch": ("frameworks", "torch sees fewer GPUs than CUDA_VISIBLE_DEVICES allows"),
    "tf-import-failed": ("frameworks", "TensorFlow present but its import crashed"),
    "tf-cpu-only-build": ("frameworks", "TensorFlow built without CUDA"),
    "tf-cuda-too-new-for-driver": ("frameworks", "TensorFlow's CUDA needs a newer driver"),
    "tf-gpu-unsupported": ("frameworks", "a GPU too old for TensorFlow's cuDNN"),
    "tf-sees-no-gpu": ("frameworks", "TensorFlow sees no GPU (CUDA/cuDNN libraries missing)"),
    "tf-ok": ("frameworks", "TensorFlow sees the GPUs"),
    # network: only with `gpurig doctor --master-addr` (rules_network.py, over RendezvousFacts)
    "rendezvous-port-open": ("network", "the master's rendezvous port accepts a connection"),
    "rendezvous-port-refused": ("network", "nothing listens on the rendezvous port (this machine the master: info)"),
    "rendezvous-port-timeout": ("network", "no answer from the rendezvous port: a firewall drops it"),
    "rendezvous-host-unresolved": ("network", "the master address does not resolve"),
    "rendezvous-no-route": ("network", "no route to the master (network or host unreachable)"),
    "rendezvous-port-error": ("network", "connecting to the rendezvous failed otherwise"),
    "socket-ifname-matches-nothing": ("network", "NCCL_/GLOO_SOCKET_IFNAME names no usable interface"),
    "socket-ifname-not-route": ("network", "NCCL_/GLOO_SOCKET_IFNAME selects other than the route to the master"),
    # the doctor itself
    "doctor-rule-failed": ("general", "a rule crashed on this snapshot; the others ran"),
}

RULES: list[Rule] = [
    *rules_driver.RULES,
    *rules_gpus.RULES,
    *rules_links.RULES,
    *rules_system.RULES,
    *rules_frameworks.RULES,
    *rules_frameworks.LATE_RULES,  # symptoms (torch sees no GPU): only when nothing above explains them
]


def judge(facts: RigFacts, network: RendezvousFacts | None = None) -> list[Finding]:
    """All findings for a snapshot, in rule order (callers sort with `sort_findings`); with
    `network` (the rendezvous facts of `--master-addr`), the network rules too."""
    ctx = Context(facts)
    findings: list[Finding] = []
    runs = [(rule, ctx) for rule in RULES]
    if network is not None:
        runs += [(rule, network) for rule in rules_network.RULES]
    for rule, subject in runs:
        try:
            made = rule(subject)
        except Exception as exc:  # a rule bug must not hide every other finding; it is reported instead
            where = traceback.extract_tb(exc.__traceback__)[-1]
            made = [Finding(
                id="doctor-rule-failed", severity="warn", area="general",
                title=f"The doctor's rule {rule.__name__} failed on this snapshot",
                detail=f"{type(exc).__name__}: {exc} (at {where.name}:{where.lineno}). The other rules ran.",
                fix="Report it with the snapshot attached: `gpurig doctor --save-facts facts.json`",
                evidence={"rule": rule.__name__, "error": f"{type(exc).__name__}: {exc}"},
            )]
        findings.extend(made)
        ctx.made.update(f.id for f in made)
    return findings
