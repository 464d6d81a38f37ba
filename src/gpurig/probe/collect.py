"""Collect a `RigFacts` snapshot of this machine: GPUs, links, driver, frameworks, system, environment.

    python -m gpurig.probe.collect                   # the snapshot as JSON on stdout
    python -m gpurig.probe.collect --no-frameworks   # skip the torch/TensorFlow child probes

Read-only and never initialises CUDA in this process: GPUs come from NVML (or `nvidia-smi` when
NVML cannot be loaded), frameworks from child processes. What cannot be read is `None` in the
snapshot and a line in `notes` saying why.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import threading
from collections.abc import Mapping

from gpurig import __version__
from gpurig.probe.environment import collect_env
from gpurig.probe.facts import RigFacts
from gpurig.probe.frameworks import cached_framework_answers, read_framework_files, start_framework_probes
from gpurig.probe.nvml import NvmlResult, read_nvml
from gpurig.probe.pci import read_kernel_module, read_pci_devices
from gpurig.probe.smi import read_smi
from gpurig.probe.system import collect_system


def collect_facts(frameworks: bool = True, timeout: float = 20.0, *, root: str | os.PathLike = "/",
                  environ: Mapping[str, str] | None = None, nvml=None, smi_exe: str | None = None,
                  nvml_timeout: float = 30.0, use_cache: bool = False, refresh: bool = False) -> RigFacts:
    """Snapshot this machine.

    frameworks: probe torch and TensorFlow in child processes (about 2-4 s: their import time);
      False answers in a fraction of a second.
    timeout: seconds each framework probe may take before it is killed and reported as hung.
    nvml_timeout: seconds NVML may take before the GPUs are reported as not answering (starting
      NVML on 8 GPUs without persistence mode takes several seconds, so this is generous).
    root, environ, nvml, smi_exe: where to read from; tests point them at fakes.
    use_cache: take the framework answers from the probe cache when nothing they depend on changed
      (`gpurig.probe.cache`), and keep fresh ones there; with frameworks=False, a cached answer is
      still used when there is one (it costs nothing), else the versions are read from the packages'
      files. refresh: probe anyway and rewrite the cache.

    >>> facts = collect_facts(frameworks=False)
    >>> facts.driver.source in (None, "nvml", "nvidia-smi")
    True
    """
    facts = RigFacts(
        collected_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        gpurig_version=__version__,
    )
    # Start the slow part first: the framework imports run in children while we read the rest.
    probes = None
    if frameworks:
        probes = start_framework_probes(timeout=timeout, environ=environ, use_cache=use_cache, refresh=refresh,
                                        root=root)
    elif use_cache and not refresh:
        probes = cached_framework_answers(environ=environ, root=root)
    try:
        _hardware(facts, root, nvml, smi_exe, nvml_timeout)
        facts.system = collect_system(root, facts.pci_devices, environ)
        facts.env = collect_env(environ)
        if probes is not None:
            facts.frameworks = probes.result()
            if facts.frameworks.from_cache:
                facts.notes.append(f"PyTorch and TensorFlow facts from the probe cache (probed {facts.frameworks.from_cache}; "
                                   "the packages, driver and GPUs are unchanged since): `--refresh` probes them again")
            for name, fw in (("torch", facts.frameworks.torch), ("tensorflow", facts.frameworks.tensorflow)):
                if fw.error:
                    facts.notes.append(f"{name} probe: {fw.error}")
        else:
            facts.frameworks = read_framework_files()
            facts.notes.append("frameworks not probed (asked to skip them); versions read from their files")
    finally:
        if probes is not None:
            probes.close()
    return facts


def _read_nvml_with_deadline(nvml, root, timeout: float) -> NvmlResult:
    """read_nvml() in a thread: a GPU that fell off the bus can make NVML block for minutes.

    The thread is a daemon, so a call stuck in the driver does not keep the process alive.
    """
    box: list[NvmlResult] = []
    worker = threading.Thread(target=lambda: box.append(read_nvml(nvml, root)), name="gpurig-nvml", daemon=True)
    worker.start()
    worker.join(timeout)
    if box:
        return box[0]
    res = NvmlResult(hung=True)
    res.driver.error = (f"NVML: no answer within {timeout:g} s (a GPU that fell off the bus or a hung driver does "
                        "this; look for Xid errors in `sudo dmesg`)")
    return res


def _hardware(facts: RigFacts, root, nvml, smi_exe, nvml_timeout: float) -> None:
    """GPUs, pairs and driver: NVML first, `nvidia-smi` when NVML cannot start; PCI and module always."""
    facts.pci_devices = read_pci_devices(root)
    loaded, module_version = read_kernel_module(root)
    res = _read_nvml_with_deadline(nvml, root, nvml_timeout)
    facts.notes.extend(res.notes)
    driver = res.driver
    if res.ok:
        facts.gpus, facts.pairs = res.gpus, res.pairs
    elif not res.hung:  # (a hung NVML: nvidia-smi would sit on the same driver call, so it is not asked)
        smi = read_smi(smi_exe)
        facts.notes.extend(smi.notes)
        if smi.error is None:
            driver.source = "nvidia-smi"
            driver.driver_version = smi.driver_version
            driver.cuda_driver_version = smi.cuda_driver_version
            facts.gpus, facts.pairs = smi.gpus, smi.pairs
            facts.notes.append(f"GPU facts come from nvidia-smi because {driver.error}")
            driver.error = None
        else:
            driver.error = f"{driver.error}; nvidia-smi: {smi.error}"
    driver.kernel_module_loaded = loaded
    driver.kernel_module_version = module_version
    facts.driver = driver
    if driver.source is None:
        facts.notes.append(f"no GPU facts: {_why_no_gpus(facts)}")


def _why_no_gpus(facts: RigFacts) -> str:
    pci = facts.pci_devices
    gpus_on_bus = [d for d in pci or [] if d.kind == "gpu"]
    reason = facts.driver.error or "neither NVML nor nvidia-smi answered"
    if pci is None:
        return f"{reason} (the PCI bus could not be read to tell whether an NVIDIA GPU is present)"
    if not gpus_on_bus:
        return f"no NVIDIA GPU on the PCI bus ({reason})"
    bound = sorted({d.driver or "no driver" for d in gpus_on_bus})
    return f"{len(gpus_on_bus)} NVIDIA GPU(s) on the PCI bus, bound to: {', '.join(bound)} ({reason})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpurig.probe.collect",
                                     description="Print this machine's RigFacts snapshot as JSON.")
    parser.add_argument("--no-frameworks", action="store_true", help="skip the torch/TensorFlow child probes")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per framework probe (default 20)")
    args = parser.parse_args(argv)
    facts = collect_facts(frameworks=not args.no_frameworks, timeout=args.timeout)
    json.dump(facts.to_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
