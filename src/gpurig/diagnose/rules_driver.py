"""Doctor rules about the NVIDIA driver: is there a GPU, is the driver loaded and consistent."""

from __future__ import annotations

from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context
from gpurig.knowledge import loaders as kb
from gpurig.probe.pci import normalize_bus_id

DRIVER_INSTALL = (
    "Install the NVIDIA driver and reboot: on Ubuntu `sudo ubuntu-drivers install` (or "
    "`sudo apt install nvidia-driver-580-server`), then check with `nvidia-smi`"
)


def _mismatch(ctx: Context) -> bool:
    d = ctx.facts.driver
    if d.error and "mismatch" in d.error.lower():
        return True
    # The kernel module and the user-space library (what NVML reports) disagree.
    return bool(d.kernel_module_version and d.driver_version
                and d.kernel_module_version.strip() != d.driver_version.strip())


def nvml_driver_mismatch(ctx: Context) -> list[Finding]:
    if not _mismatch(ctx):
        return []
    d = ctx.facts.driver
    versions = ""
    if d.kernel_module_version and d.driver_version:
        versions = f" The loaded kernel module is {d.kernel_module_version}; the libraries are {d.driver_version}."
    return [Finding(
        id="nvml-driver-mismatch", severity="error", area="driver",
        title="NVIDIA kernel module and driver libraries do not match",
        detail=("NVML answers \"Driver/library version mismatch\": the driver was upgraded but the old kernel "
                "module is still loaded, so nvidia-smi and every CUDA program fail." + versions),
        fix=("Reboot. Without a reboot: stop everything using the GPU, then "
             "`sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia && nvidia-smi`"),
        evidence={"driver.error": d.error, "driver.kernel_module_version": d.kernel_module_version,
                  "driver.driver_version": d.driver_version},
    )]


def device_presence(ctx: Context) -> list[Finding]:
    """No NVIDIA GPU at all, GPUs without a driver, or a driver that user space cannot reach."""
    f = ctx.facts
    pci_gpus = None if f.pci_devices is None else [d for d in f.pci_devices if d.kind == "gpu"]
    if ctx.gpus:
        return _unclaimed_gpus(ctx, pci_gpus or [])
    if _mismatch(ctx):
        return []  # the GPUs are invisible because of the mismatch, said above
    if pci_gpus:
        on_nvidia = [d for d in pci_gpus if d.driver == "nvidia"]
        if on_nvidia and f.system.container:
            # sysfs shows the host's devices; the container itself was given none of them.
            return [Finding(
                id="container-without-gpus", severity="error", area="driver",
                title=f"The host has {len(pci_gpus)} NVIDIA GPU(s), but this {f.system.container} container was given none",
                detail=("The GPUs are on the host's PCI bus and driven by nvidia.ko, yet no NVIDIA library or device "
                        f"node reached the container ({f.driver.error or 'NVML and nvidia-smi did not answer'})."),
                fix=("Start it with the NVIDIA Container Toolkit: `docker run --gpus all --ipc=host ...`; in Kubernetes "
                     "request `resources: limits: nvidia.com/gpu: N`"),
                evidence={"pci_gpus": [vars(d) for d in pci_gpus], "system.container": f.system.container,
                          "driver.error": f.driver.error},
            )]
        if on_nvidia or f.driver.kernel_module_loaded:
            return [Finding(
                id="nvml-unavailable", severity="error", area="driver",
                title="The NVIDIA kernel driver is loaded, but neither NVML nor nvidia-smi answers",
                detail=(f"{len(pci_gpus)} GPU(s) are driven by nvidia.ko, yet the user-space side failed: "
                        f"{f.driver.error or 'no reason given'}. CUDA programs fail the same way."),
                fix=("Install the driver's user-space libraries of the same version as the kernel module "
                     "(`cat /proc/driver/nvidia/version`), e.g. `sudo apt install nvidia-utils-<branch> "
                     "libnvidia-compute-<branch>`, then run `nvidia-smi`"),
                evidence={"pci_gpus": [vars(d) for d in pci_gpus], "driver.error": f.driver.error,
                          "driver.kernel_module_loaded": f.driver.kernel_module_loaded,
                          "driver.kernel_module_version": f.driver.kernel_module_version},
            )]
        bound = sorted({d.driver for d in pci_gpus if d.driver})
        held = ""
        if "nouveau" in bound:
            held = " The open-source nouveau driver holds them; CUDA needs the NVIDIA driver."
        elif "vfio-pci" in bound:
            held = " vfio-pci holds them (they are set aside for a virtual machine)."
        return [Finding(
            id="driver-not-loaded", severity="error", area="driver",
            title=f"{len(pci_gpus)} NVIDIA GPU(s) on the PCI bus, but the NVIDIA driver is not loaded",
            detail=("The GPUs are present (seen on the PCI bus) but nvidia.ko does not drive them, so nothing "
                    "can run on them." + held),
            fix=(DRIVER_INSTALL + "; if it is installed, `sudo modprobe nvidia` and read `sudo dmesg | grep -i nvrm` "
                 "for why it did not load (Secure Boot blocks unsigned modules: `mokutil --sb-state`)"),
            evidence={"pci_gpus": [vars(d) for d in pci_gpus], "driver.error": f.driver.error,
                      "driver.kernel_module_loaded": f.driver.kernel_module_loaded},
        )]
    if f.driver.kernel_module_loaded:
        return []  # the module is loaded yet no GPU listed: the notes say why
    unknown_bus = f.pci_devices is None
    return [Finding(
        id="no-nvidia-gpu", severity="warn", area="driver",
        title="No NVIDIA GPU found: work runs on the CPU",
        detail=("NVML and nvidia-smi found no GPU"
                + (" and the PCI bus could not be read, so a GPU without a driver cannot be ruled out."
                   if unknown_bus else " and there is no NVIDIA device on the PCI bus.")
                + " gpurig still runs verify, bench and train on the CPU with two gloo processes."),
        fix=("Nothing to fix for CPU work. For GPUs: use a machine with NVIDIA GPUs (cloud: an instance type "
             "with GPUs), or in a container start it with `docker run --gpus all ...` and the NVIDIA Container "
             "Toolkit installed on the host"),
        evidence={"gpu_count": 0, "pci_devices": None if unknown_bus else [], "driver.error": f.driver.error,
                  "system.container": f.system.container},
    )]


def _unclaimed_gpus(ctx: Context, pci_gpus: list) -> list[Finding]:
    """GPUs on the bus bound to another driver (vfio-pci for a VM, nouveau) next to ones that work."""
    driven = {normalize_bus_id(g.pci_bus_id) for g in ctx.gpus if g.pci_bus_id}
    # A GPU NVML lists is driven, whatever sysfs says (some sandboxes hide the `driver` link).
    unbound = [d for d in pci_gpus if d.driver != "nvidia" and normalize_bus_id(d.slot) not in driven]
    if not unbound or len(driven) < len(ctx.gpus):
        return []  # without every GPU's bus id the two lists cannot be matched
    slots = ", ".join(f"{d.slot} ({d.driver or 'no driver'})" for d in unbound)
    return [Finding(
        id="gpu-without-nvidia-driver", severity="warn", area="driver",
        title=f"{len(unbound)} NVIDIA GPU(s) on the PCI bus are not driven by the NVIDIA driver",
        detail=(f"NVML sees {len(ctx.gpus)} GPU(s), but these are bound to another driver or none: {slots}. "
                "vfio-pci means the GPU is reserved for a virtual machine; nouveau is the open-source "
                "driver, which CUDA cannot use."),
        fix=("If they should train here: `sudo driverctl unset-override <slot>` (vfio-pci), or blacklist "
             "nouveau (`echo blacklist nouveau | sudo tee /etc/modprobe.d/blacklist-nouveau.conf && "
             "sudo update-initramfs -u`), then reboot"),
        evidence={"pci_devices": [vars(d) for d in unbound], "nvml_gpu_count": len(ctx.gpus)},
    )]


def driver_summary(ctx: Context) -> list[Finding]:
    """The driver that works, the CUDA it serves, and whether its branch still gets fixes."""
    if not ctx.gpus or ctx.driver_version is None:
        return []
    driver = ctx.driver_version
    cuda = ctx.driver_cuda
    supports = f" (supports CUDA up to {cuda})" if cuda else ""
    if cuda is None and (from_table := kb.max_cuda_for_driver(driver)):
        newest = kb.cuda_releases()[-1].cuda
        # From the table: a driver newer than its newest row may support more than the table knows.
        supports = f" (supports CUDA {from_table} or later)" if from_table == newest else f" (supports CUDA up to {from_table})"
    findings = [Finding(
        id="driver-ok", severity="ok", area="driver",
        title=f"NVIDIA driver {driver} loaded" + supports,
        detail=f"Read through {ctx.facts.driver.source or 'the driver'}; {len(ctx.gpus)} GPU(s) answer.",
        fix="Nothing to do",
        evidence={"driver.driver_version": driver, "driver.cuda_driver_version": ctx.driver_cuda,
                  "driver.source": ctx.facts.driver.source},
    )]
    findings.extend(_branch_end_of_life(ctx, driver))
    # A GPU newer than the driver: the driver predates the CUDA release that brought its architecture.
    for cc, gpus in sorted(ctx.capabilities.items()):
        arch = kb.arch_for_cc(cc)
        if arch is None:
            continue
        floor = kb.min_driver_for_gpu(cc)
        if floor is not None and not kb.driver_meets(driver, floor):
            findings.append(Finding(
                id="driver-too-old-for-gpu", severity="error", area="driver",
                title=f"Driver {driver} predates {arch.name} GPUs (compute capability {cc})",
                detail=(f"{arch.name} support arrived with CUDA {arch.first_cuda}, whose driver is {floor}; "
                        f"{len(gpus)} GPU(s) of that kind are here."),
                fix=f"Upgrade the driver to {floor} or later (e.g. `sudo apt install nvidia-driver-580-server`), then reboot",
                evidence={"driver.driver_version": driver, "compute_capability": cc, "min_driver": floor},
            ))
    return findings


def _branch_end_of_life(ctx: Context, driver: str) -> list[Finding]:
    """An info when the driver's branch had reached its end of life when the snapshot was taken."""
    when = (ctx.facts.collected_at or "")[:7]  # "2026-11": judged against the snapshot's own date
    if len(when) != 7:
        return []
    name = f"R{driver.split('.')[0]}"
    branch = next((b for b in kb.driver_branches() if b.branch == name), None)
    if branch is None or branch.end_of_life > when:
        return []
    live = sorted((b for b in kb.driver_branches() if b.end_of_life > when), key=lambda b: b.end_of_life)
    target = f"a supported branch ({', '.join(f'{b.branch} {b.kind} until {b.end_of_life}' for b in live)})" \
        if live else "a newer, supported branch"
    return [Finding(
        id="driver-branch-eol", severity="info", area="driver",
        title=f"Driver branch {name} reached its end of life in {branch.end_of_life}",
        detail="It gets no more security or bug fixes.",
        fix=f"Move to {target}, e.g. `sudo apt install nvidia-driver-580-server`, then reboot",
        evidence={"driver.driver_version": driver, "branch": name, "end_of_life": branch.end_of_life,
                  "collected_at": ctx.facts.collected_at},
    )]


RULES = [nvml_driver_mismatch, device_presence, driver_summary]
