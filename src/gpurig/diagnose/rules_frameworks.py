"""Doctor rules about PyTorch and TensorFlow builds against this driver and these GPUs.

Frameworks are judged only when they were probed (`frameworks.probed`): a skipped probe leaves
`installed = False`, which means "not looked at", not "not installed".
"""

from __future__ import annotations

import re

from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context, gpu_list, valid_version
from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as kb

# Findings that already explain why a framework cannot use the GPUs.
EXPLAINS_NO_GPU = {
    "nvml-driver-mismatch", "driver-not-loaded", "nvml-unavailable", "container-without-gpus", "driver-too-old-for-gpu", "torch-cuda-too-new-for-driver",
    "tf-cuda-too-new-for-driver", "nvswitch-no-fabric-manager", "cuda-visible-devices-empty",
    "cuda-visible-devices-malformed", "cuda-visible-devices-missing-gpu", "compute-mode-prohibited",
}


def driver_level(ctx: Context, cuda: str) -> str | None:
    """How this driver runs a binary built with CUDA `cuda`: "full", "minor-version", "none", or None (unknown).

    The CUDA version the machine reports (NVML) is preferred to the tables: a driver newer than
    the tables still answers right.
    """
    reported = ctx.driver_cuda
    if reported is not None and kb.major_minor(cuda) <= kb.major_minor(reported):
        return "full"
    if ctx.driver_version is not None:
        level = kb.driver_support(cuda, ctx.driver_version)
        return None if level == "unknown" else level
    if reported is not None:
        return "minor-version" if kb.major_minor(reported)[0] == kb.major_minor(cuda)[0] else "none"
    return None


def _python(ctx: Context) -> str | None:
    return valid_version(ctx.facts.system.python)


def _lowest_cc(ctx: Context) -> str | None:
    # The oldest GPU is the one a wheel is most likely to leave out.
    ccs = sorted(ctx.capabilities, key=kb.version_key)
    return ccs[0] if ccs else None


def wheel_hint(ctx: Context, cc: str | None = None) -> kfw.WheelChoice | None:
    return kfw.torch_wheel_for_host(ctx.driver_version, cc or _lowest_cc(ctx), _python(ctx))


def _wheel_text(choice: kfw.WheelChoice | None) -> str:
    if choice is None:
        return "no published torch wheel fits this driver and GPU: upgrade the driver first"
    return f"`{choice.pip_command}` ({choice.reason})"


def _torch_variant(version: str | None, cuda: str) -> str:
    m = re.search(r"\+(cu\d+)", version or "")
    return m.group(1) if m else kfw.variant_for_cuda(cuda)


def _torch_newer_than_knowledge(version: str | None) -> list[Finding]:
    """Say so when the installed torch is newer than every release in torch.toml: its wheel advice
    (and `gpurig env pip`) would otherwise name an older release without a word."""
    if not version:
        return []
    try:
        if kfw.torch_release(version) is not None:
            return []
        newest = max((r.torch for r in kfw.torch_releases()), key=kb.version_key)
        if kb.version_key(version) <= kb.version_key(newest):
            return []
    except kb.UnknownVersion:  # an unparseable version string: nothing to say
        return []
    return [Finding(
        id="torch-newer-than-knowledge", severity="info", area="frameworks",
        title=f"PyTorch {version} is newer than gpurig's wheel table (newest known: {newest})",
        detail="The compatibility checks still read torch's own build facts (CUDA build, architectures), "
               "but wheel advice and `gpurig env pip` can only name releases up to " + newest + ".",
        fix="Nothing to fix on this machine; a newer gpurig (or a row added to knowledge/torch.toml) "
            "knows the newer wheels",
        evidence={"torch.version": version, "newest_known": newest},
    )]


def torch_rules(ctx: Context) -> list[Finding]:
    fw = ctx.facts.frameworks
    if not fw.probed:
        return []
    t = fw.torch
    if t.error:
        return [Finding(
            id="torch-import-failed", severity="warn", area="frameworks",
            title="PyTorch is installed but could not be probed",
            detail=f"`import torch` in a child process failed: {t.error}",
            fix="Reinstall it in this environment: `pip install --force-reinstall torch` (with the index URL "
                "of the CUDA variant you need), then `python -c 'import torch; print(torch.__version__)'`",
            evidence={"torch.error": t.error, "torch.version": t.version},
        )]
    if not t.installed:
        # gpurig's verify, bench, train, launch and check all run PyTorch processes: without it the
        # machine is not ready for any of them, GPU or not.
        fix = "pip install 'gpurig[torch]'"
        if ctx.gpus:
            fix = f"Install the wheel that fits this host: {_wheel_text(wheel_hint(ctx))} (or {fix})"
        else:
            fix += " (the CPU build is enough here: pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu)"
        return [Finding(
            id="torch-not-installed", severity="error", area="frameworks",
            title="PyTorch is not installed",
            detail="gpurig's verify, bench, train, launch and check run PyTorch processes; none of them can start.",
            fix=fix,
            evidence={"torch.installed": False, "driver": ctx.driver_version},
        )]
    findings: list[Finding] = _torch_newer_than_knowledge(t.version)
    if not ctx.gpus:
        on_bus = [d for d in ctx.facts.pci_devices or [] if d.kind == "gpu"]
        if t.cuda_build and not on_bus and ctx.facts.pci_devices is not None:
            # Any torch build runs on the CPU; say only that the smaller one fits here (what `env pip` says).
            findings.append(Finding(
                id="torch-cuda-build-on-cpu-host", severity="info", area="frameworks",
                title=f"PyTorch {t.version} is a CUDA {t.cuda_build} build on a machine without an NVIDIA GPU",
                detail="It runs on the CPU as it is. PyPI's default torch is the CUDA build, which brings "
                       "gigabytes of CUDA libraries this machine cannot use; the CPU build is the one `gpurig env pip` "
                       "names for it.",
                fix="Nothing is needed to run here. To save the space: pip install torch torchvision "
                    "--index-url https://download.pytorch.org/whl/cpu",
                evidence={"torch.version": t.version, "torch.cuda_build": t.cuda_build, "nvidia_gpus_on_pci_bus": 0},
            ))
        return findings  # a CPU machine: any torch build runs on the CPU
    if t.cuda_build is None:
        choice = wheel_hint(ctx)
        return [Finding(
            id="torch-cpu-only-build", severity="error", area="frameworks",
            title=f"PyTorch {t.version} is a CPU-only build on a machine with {len(ctx.gpus)} GPU(s)",
            detail="torch.version.cuda is None: this torch cannot use the GPUs at all.",
            fix=f"`pip uninstall -y torch` then install a CUDA build: {_wheel_text(choice)}",
            evidence={"torch.version": t.version, "torch.cuda_build": None, "gpu_count": len(ctx.gpus)},
        )]
    cuda = valid_version(t.cuda_build)
    if cuda is None:
        return []
    level = driver_level(ctx, cuda)
    evidence = {"torch.version": t.version, "torch.cuda_build": cuda, "driver.driver_version": ctx.driver_version,
                "driver.cuda_driver_version": ctx.driver_cuda}
    try:
        floor = kb.min_driver_for_cuda(cuda)
    except kb.UnknownVersion:
        floor = None
    full = kb.full_driver_for_cuda(cuda)
    if level == "none":
        choice = wheel_hint(ctx)
        need = f"{full} or later" if full else f"one that supports CUDA {cuda}"
        if floor and full and floor != full:
            need += f" (at least {floor}, through minor-version compatibility)"
        findings.append(Finding(
            id="torch-cuda-too-new-for-driver", severity="error", area="frameworks",
            title=f"PyTorch {t.version} is built with CUDA {cuda}, newer than driver {ctx.driver_version or '?'} supports",
            detail=(f"The driver supports CUDA up to {ctx.driver_cuda or kb.max_cuda_for_driver(ctx.driver_version or '') or '?'}; "
                    f"a CUDA {cuda} build needs driver {need}. torch.cuda.is_available() is False."),
            fix=f"Upgrade the driver to {need}, or install a torch this driver runs: {_wheel_text(choice)}",
            evidence={**evidence, "min_driver": floor, "full_driver": full},
        ))
    elif level == "minor-version":
        findings.append(Finding(
            id="torch-cuda-minor-compat", severity="info", area="frameworks",
            title=f"PyTorch's CUDA {cuda} runs on driver {ctx.driver_version} through minor-version compatibility",
            detail=(f"The driver is older than CUDA {cuda}'s own ({full}) but at least the CUDA "
                    f"{kb.major_minor(cuda)[0]}.x floor ({floor}). Machine code runs; PTX cannot be JIT-compiled "
                    "and features newer than the driver are missing."),
            fix=f"Nothing needed for GPUs torch has machine code for; for full support upgrade the driver to {full} or later",
            evidence={**evidence, "min_driver": floor, "full_driver": full},
        ))
    elif level == "full":
        findings.append(Finding(
            id="torch-cuda-driver-ok", severity="ok", area="frameworks",
            title=f"Driver {ctx.driver_version or ''} supports PyTorch's CUDA {cuda}".replace("  ", " "),
            detail=f"PyTorch {t.version} bundles the CUDA {cuda} runtime; the driver supports CUDA "
                   f"{ctx.driver_cuda or kb.max_cuda_for_driver(ctx.driver_version or '') or cuda}.",
            fix="Nothing to do",
            evidence=evidence,
        ))
    findings.extend(_torch_arch(ctx, t.version, cuda, t.arch_list, level))
    return findings


def _torch_arch(ctx: Context, version: str | None, cuda: str, arch_list: list[str] | None,
                level: str | None) -> list[Finding]:
    source = "torch.cuda.get_arch_list()"
    arch = list(arch_list or [])
    if not arch and version:
        # get_arch_list() is empty when CUDA is unusable: fall back to the published build's list.
        arch = kfw.torch_arch_list(version, _torch_variant(version, cuda))
        source = "gpurig's table of published wheels"
    if not arch:
        return []
    findings = []
    covered = []
    for cc, gpus in sorted(ctx.capabilities.items(), key=lambda kv: kb.version_key(kv[0])):
        coverage = kfw.arch_coverage(arch, cc)
        sm = "sm_" + cc.replace(".", "")
        evidence = {"torch.version": version, "arch_list": arch, "arch_list_source": source,
                    "compute_capability": cc, "gpus": [g.index for g in gpus]}
        if coverage == "sass":
            covered.append((cc, gpus))
        elif coverage is None:
            choice = wheel_hint(ctx, cc)
            findings.append(Finding(
                id="torch-arch-missing", severity="error", area="frameworks",
                title=f"{gpu_list(gpus)} ({gpus[0].name or sm}, {sm}) not compiled into PyTorch {version}",
                detail=(f"This torch has code for {' '.join(arch)} ({source}); nothing runs on compute capability "
                        f"{cc}: kernels fail with \"no kernel image is available for execution on the device\"."),
                fix=f"Install a torch built for {sm}: {_wheel_text(choice)}",
                evidence=evidence,
            ))
        elif level == "minor-version":
            full = kb.full_driver_for_cuda(cuda)
            findings.append(Finding(
                id="torch-arch-ptx-needs-driver", severity="error", area="frameworks",
                title=f"{gpu_list(gpus)} ({sm}) only has PTX in PyTorch {version}, and the driver cannot JIT it",
                detail=(f"No machine code for {sm}; the PTX needs the full CUDA {cuda} driver ({full}) to be "
                        f"compiled, and driver {ctx.driver_version} only runs CUDA {cuda} through minor-version "
                        "compatibility."),
                fix=f"Upgrade the driver to {full} or later, or install a torch with {sm} machine code: "
                    f"{_wheel_text(wheel_hint(ctx, cc))}",
                evidence=evidence,
            ))
        else:
            findings.append(Finding(
                id="torch-arch-ptx-only", severity="warn", area="frameworks",
                title=f"{gpu_list(gpus)} ({sm}) runs PyTorch {version} only through PTX JIT compilation",
                detail=("No machine code for this GPU: the driver compiles the PTX at first use (minutes on the "
                        "first start, cached afterwards), and some kernels run slower than native ones."),
                fix=f"Install a torch with {sm} machine code when one exists: {_wheel_text(wheel_hint(ctx, cc))}",
                evidence=evidence,
            ))
    if covered and not findings:
        parts = [f"{gpu_list(g)}: compute capability {cc}" for cc, g in covered]
        findings.append(Finding(
            id="torch-arch-ok", severity="ok", area="frameworks",
            title=f"PyTorch {version} has machine code for every GPU",
            detail="; ".join(parts) + f" ({source}: {' '.join(arch)}).",
            fix="Nothing to do",
            evidence={"torch.version": version, "arch_list": arch, "arch_list_source": source,
                      "compute_capabilities": [cc for cc, _ in covered]},
        ))
    return findings


def torch_gpu_use(ctx: Context) -> list[Finding]:
    """torch cannot see the GPUs (or sees fewer), and no other finding explains why. Runs last."""
    fw = ctx.facts.frameworks
    t = fw.torch
    if not fw.probed or not t.installed or t.error or t.cuda_build is None or not ctx.gpus:
        return []
    visible = ctx.visibility.visible if ctx.visibility else None
    if t.cuda_available is False:
        if ctx.made & EXPLAINS_NO_GPU or visible == []:
            return []
        return [Finding(
            id="torch-cannot-use-gpu", severity="error", area="frameworks",
            title=f"PyTorch {t.version} cannot use the GPUs (torch.cuda.is_available() is False)",
            detail=(f"{len(ctx.gpus)} GPU(s) answer NVML, yet CUDA initialisation fails in a fresh process"
                    + (f"; torch said: {t.cuda_warning}" if t.cuda_warning else ".")),
            fix=("Read the real error: `python -c 'import torch; torch.cuda.init()'`. Common causes: a process "
                 "holding the GPU in exclusive mode, /dev/nvidia-uvm missing (`sudo modprobe nvidia-uvm`), or a "
                 "container started without `--gpus all`"),
            evidence={"torch.cuda_available": False, "torch.version": t.version, "gpu_count": len(ctx.gpus),
                      "torch.cuda_warning": t.cuda_warning},
        )]
    # Fewer only: a GPU failing to initialise. (More would mean the probe ran with another environment.)
    if t.cuda_available and t.device_count is not None and visible is not None and t.device_count < len(visible):
        return [Finding(
            id="torch-device-count-mismatch", severity="warn", area="frameworks",
            title=f"PyTorch sees {t.device_count} GPU(s), CUDA_VISIBLE_DEVICES allows {len(visible)}",
            detail=("torch.cuda.device_count() in a fresh process is below the GPUs NVML lists after "
                    "CUDA_VISIBLE_DEVICES: a GPU fails to initialise, or another process holds it in exclusive mode."),
            fix="Compare `nvidia-smi -L` with `python -c 'import torch; print(torch.cuda.device_count())'` and "
                "read `sudo dmesg | grep -i xid` for GPU errors",
            evidence={"torch.device_count": t.device_count, "visible": visible},
        )]
    return []


def tensorflow_rules(ctx: Context) -> list[Finding]:
    fw = ctx.facts.frameworks
    if not fw.probed:
        return []
    t = fw.tensorflow
    if t.error:
        return [Finding(
            id="tf-import-failed", severity="warn", area="frameworks",
            title="TensorFlow is installed but could not be probed",
            detail=f"`import tensorflow` in a child process failed: {t.error}",
            fix="Reinstall it: `pip install --force-reinstall 'tensorflow[and-cuda]'` (Linux), and check the Python "
                "version against TensorFlow's supported range",
            evidence={"tensorflow.error": t.error, "tensorflow.version": t.version},
        )]
    if not t.installed or not ctx.gpus or not t.version:
        return []
    build = kfw.tf_build(t.version)
    cuda = valid_version(t.cuda_build) or (build.cuda if build else None)
    cudnn = valid_version(t.cudnn_build) or (build.cudnn if build else None)
    evidence = {"tensorflow.version": t.version, "tensorflow.cuda_build": cuda, "tensorflow.cudnn_build": cudnn,
                "tensorflow.built_with_cuda": t.built_with_cuda, "tensorflow.gpus": t.gpus,
                "driver.driver_version": ctx.driver_version}
    fitting = kfw.tf_for_host(ctx.driver_version, _lowest_cc(ctx), _python(ctx))
    fit_text = f"`{fitting.pip_command}`" if fitting else "no TensorFlow release fits this driver: upgrade the driver"
    if t.built_with_cuda is False:
        return [Finding(
            id="tf-cpu-only-build", severity="warn", area="frameworks",
            title=f"TensorFlow {t.version} is built without CUDA",
            detail="This TensorFlow (tensorflow-cpu, or a platform without GPU wheels) cannot use the GPUs.",
            fix=f"`pip uninstall -y tensorflow tensorflow-cpu` then {fit_text}",
            evidence=evidence,
        )]
    findings = []
    level = driver_level(ctx, cuda) if cuda else None
    if level == "none":
        try:
            floor = kb.min_driver_for_cuda(cuda)
        except kb.UnknownVersion:
            floor = f"one that supports CUDA {cuda}"
        findings.append(Finding(
            id="tf-cuda-too-new-for-driver", severity="error", area="frameworks",
            title=f"TensorFlow {t.version} needs CUDA {cuda}, newer than driver {ctx.driver_version or '?'} supports",
            detail=f"A CUDA {cuda} build needs driver {floor} or later.",
            fix=f"Upgrade the driver to {floor} or later, or install a TensorFlow this driver runs: {fit_text}",
            evidence={**evidence, "min_driver": floor},
        ))
    min_cc = kfw.cudnn_min_cc(cudnn) if cudnn else None
    too_old = [g for cc, gs in ctx.capabilities.items() if min_cc and kb.version_key(cc) < kb.version_key(min_cc)
               for g in gs]
    if too_old:
        findings.append(Finding(
            id="tf-gpu-unsupported", severity="error", area="frameworks",
            title=f"{gpu_list(too_old)} too old for TensorFlow {t.version}'s cuDNN {cudnn}",
            detail=f"cuDNN {cudnn} needs compute capability {min_cc} or higher.",
            fix=f"Use GPUs of compute capability {min_cc}+ or an older TensorFlow: {fit_text}",
            evidence={**evidence, "min_compute_capability": min_cc},
        ))
    visible = ctx.visibility.visible if ctx.visibility else None
    if findings or visible == []:
        return findings
    if t.gpus is not None and len(t.gpus) == 0 and not (ctx.made & EXPLAINS_NO_GPU):
        if build and build.and_cuda_extra:
            fix = f"`pip install 'tensorflow[and-cuda]=={build.tf_version}.*'` (brings CUDA {build.cuda} and cuDNN {build.cudnn})"
        elif build:
            fix = (f"Install CUDA {build.cuda} and cuDNN {build.cudnn} and put their lib directories on "
                   f"LD_LIBRARY_PATH, or move to TensorFlow 2.14+ and `pip install 'tensorflow[and-cuda]'`")
        else:
            fix = f"Install the CUDA and cuDNN this TensorFlow was built with ({cuda or '?'} / {cudnn or '?'}), or {fit_text}"
        findings.append(Finding(
            id="tf-sees-no-gpu", severity="error", area="frameworks",
            title=f"TensorFlow {t.version} sees no GPU",
            detail=(f"It was built for CUDA {cuda or '?'} and cuDNN {cudnn or '?'} and loads them at start; when "
                    "the libraries are missing (plain `pip install tensorflow`), it runs on the CPU without an error."),
            fix=fix,
            evidence=evidence,
        ))
    elif t.gpus:
        findings.append(Finding(
            id="tf-ok", severity="ok", area="frameworks",
            title=f"TensorFlow {t.version} (CUDA {cuda or '?'}, cuDNN {cudnn or '?'}) sees {len(t.gpus)} GPU(s)",
            detail="tf.config.list_physical_devices('GPU') in a child process.",
            fix="Nothing to do",
            evidence=evidence,
        ))
    return findings


RULES = [torch_rules, tensorflow_rules]
LATE_RULES = [torch_gpu_use]
