"""Facts from reports users paste into bug reports: `python -m torch.utils.collect_env` and the
default `nvidia-smi` table. Pure text parsing: the result is a `RigFacts` the doctor's rules can
judge, with `None` for everything the pasted text does not say.

    facts, kinds = facts_from_pasted(open("report.txt").read())
"""

from __future__ import annotations

import re

from gpurig.probe.facts import DriverFacts, GpuFacts, GpuProcessFacts, RigFacts

_SMI_HEADER = re.compile(r"NVIDIA-SMI\s+([\d.]+)\s+Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+|N/A)")
_SMI_GPU_ROW = re.compile(
    r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])"
    r"\s+(On|Off)\s*\|\s*(\S+)\s*\|",
    re.M,
)
_SMI_STATE_ROW = re.compile(
    r"^\|\s*(\S+)\s+(\d+|N/A)C?\s+(P\d+|N/A)\s+(?:(\S+?)\s*/\s*(\S+?)\s+)?\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|"
    r"\s*(\d+|N/A)%?\s+(\S+)\s*\|",
    re.M,
)
_SMI_MIG_ROW = re.compile(r"^\|\s+\|\s+\|\s+(Enabled|Disabled|N/A)\s+\|\s*$")
_SMI_PROCESS = re.compile(r"^\|\s+(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+(C|G|C\+G|M|M\+C)\s+(\S.*?)\s+(\d+)MiB\s*\|", re.M)


def _number(text: str | None) -> float | None:
    if not text:
        return None
    m = re.match(r"^([\d.]+)", text.strip())
    return float(m.group(1)) if m else None


def looks_like_nvidia_smi(text: str) -> bool:
    return bool(_SMI_HEADER.search(text))


def looks_like_collect_env(text: str) -> bool:
    return "PyTorch version:" in text and ("CUDA used to build PyTorch:" in text or "Is debug build:" in text)


def parse_nvidia_smi(text: str) -> tuple[DriverFacts, list[GpuFacts]]:
    """The default `nvidia-smi` table: driver, CUDA version, and one GpuFacts per GPU row."""
    header = _SMI_HEADER.search(text)
    driver = DriverFacts(source="nvidia-smi")
    if header:
        driver.driver_version = header.group(2)
        driver.cuda_driver_version = None if header.group(3) == "N/A" else header.group(3)
    gpus: list[GpuFacts] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _SMI_GPU_ROW.match(line)
        if not m:
            continue
        index, name, persistence, bus, _disp, ecc = m.groups()
        gpu = GpuFacts(index=int(index), name=name.strip(), pci_bus_id=bus, persistence_mode=persistence == "On")
        if ecc.isdigit():
            gpu.ecc_enabled = True
            gpu.ecc_volatile_uncorrected = int(ecc)
        # The next lines of the same cell hold temperature, power, memory, utilisation, compute
        # mode, and (newer drivers) the MIG mode; the block ends at the next "+---" rule.
        for follow in lines[i + 1 : i + 4]:
            if follow.startswith("+") or _SMI_GPU_ROW.match(follow):
                break
            s = _SMI_STATE_ROW.match(follow)
            if s:
                _fan, temp, _perf, pwr, cap, used, total, util, mode = s.groups()
                gpu.temperature_c = _number(temp)
                gpu.power_draw_w = _number(pwr)
                gpu.power_limit_w = _number(cap)
                gpu.memory_used_mib = float(used)
                gpu.memory_total_mib = float(total)
                gpu.utilization_pct = _number(util)
                gpu.compute_mode = mode
                continue
            mig = _SMI_MIG_ROW.match(follow)
            if mig and mig.group(1) != "N/A":
                gpu.mig_enabled = mig.group(1) == "Enabled"
        gpus.append(gpu)
    processes = text.split("Processes:", 1)
    if len(processes) == 2:
        for p in _SMI_PROCESS.finditer(processes[1]):
            gpu_index, pid, _kind, name, mib = p.groups()
            for gpu in gpus:
                if gpu.index == int(gpu_index):
                    gpu.processes.append(GpuProcessFacts(pid=int(pid), name=name.strip(), used_memory_mib=float(mib)))
    return driver, gpus


def _field(text: str, label: str) -> str | None:
    m = re.search(rf"^{re.escape(label)}:[ \t]*(.*)$", text, re.M)
    if not m:
        return None
    value = m.group(1).strip()
    return None if value in ("", "N/A", "Could not collect", "None") else value


def parse_collect_env(text: str, facts: RigFacts) -> None:
    """Fill `facts` from `python -m torch.utils.collect_env` output."""
    torch = facts.frameworks.torch
    version = _field(text, "PyTorch version")
    torch.installed = version is not None
    torch.version = version
    torch.cuda_build = _field(text, "CUDA used to build PyTorch")
    available = _field(text, "Is CUDA available")
    torch.cuda_available = None if available is None else available == "True"
    cudnn_block = re.search(r"^cuDNN version:(.*?)(?=^\S[^\n]*version:|^\s*$)", text, re.M | re.S)
    if cudnn_block:
        found = re.search(r"(\d+\.\d+\.\d+)", cudnn_block.group(1))
        torch.cudnn_version = found.group(1) if found else None
    nccl = re.search(r"^\[(?:pip3?|conda)\]\s+nvidia-nccl-cu\d+[=\s]+=?\s*([\d.]+)", text, re.M)
    if nccl:
        torch.nccl_version = nccl.group(1)
    tf = re.search(r"^\[(?:pip3?|conda)\]\s+tensorflow(?:-gpu)?[=\s]+=?\s*([\d.]+)", text, re.M)
    if tf:
        facts.frameworks.tensorflow.installed = True
        facts.frameworks.tensorflow.version = tf.group(1)
    facts.frameworks.probed = True
    driver_version = _field(text, "Nvidia driver version")
    if driver_version and not facts.driver.driver_version:
        facts.driver.driver_version = driver_version
        facts.driver.source = facts.driver.source or "nvidia-smi"
    gpus_block = re.search(r"^GPU models and configuration:[ \t]*(.*?)(?:\n\s*\n|\nNvidia driver version)", text, re.M | re.S)
    if gpus_block and not facts.gpus:
        for m in re.finditer(r"GPU (\d+): ([^\n]+)", gpus_block.group(1)):
            facts.gpus.append(GpuFacts(index=int(m.group(1)), name=m.group(2).strip()))
        if not facts.gpus:
            single = gpus_block.group(1).strip()
            if single and single not in ("N/A", "Could not collect"):
                facts.gpus.append(GpuFacts(index=0, name=single))
    facts.system.os = _field(text, "OS")
    python = _field(text, "Python version")
    facts.system.python = python.split()[0] if python else None
    cpus = re.search(r"^CPU\(s\):\s+(\d+)", text, re.M)
    if cpus:
        facts.system.cpu_count = int(cpus.group(1))
    model = re.search(r"^Model name:\s+(.+)$", text, re.M)
    if model:
        facts.system.cpu_model = model.group(1).strip()


def facts_from_pasted(text: str) -> tuple[RigFacts | None, list[str]]:
    """RigFacts from pasted reports, and which kinds were found ("collect_env", "nvidia-smi").

    Returns (None, []) when the text holds neither report.
    """
    kinds = []
    facts = RigFacts(notes=["read from pasted text, not from this machine"])
    if looks_like_nvidia_smi(text):
        facts.driver, facts.gpus = parse_nvidia_smi(text)
        kinds.append("nvidia-smi")
    if looks_like_collect_env(text):
        parse_collect_env(text, facts)
        kinds.append("collect_env")
    if not kinds:
        return None, []
    if facts.driver.driver_version:
        facts.driver.kernel_module_loaded = True
    _fill_from_knowledge(facts)
    return facts, kinds


def _fill_from_knowledge(facts: RigFacts) -> None:
    """What the pasted text implies but does not print: the newest CUDA the driver supports,
    each GPU's compute capability from its name, the architectures a released wheel was built for."""
    try:
        from gpurig.knowledge import frameworks as kfw
        from gpurig.knowledge import loaders
    except ImportError:
        return
    driver = facts.driver
    if driver.driver_version and not driver.cuda_driver_version:
        try:
            driver.cuda_driver_version = loaders.max_cuda_for_driver(driver.driver_version)
        except (ValueError, LookupError):
            pass
    for gpu in facts.gpus:
        if gpu.name and not gpu.compute_capability:
            try:
                gpu.compute_capability = loaders.cc_for_card(gpu.name)
            except (ValueError, LookupError):
                pass
    torch = facts.frameworks.torch
    if torch.version and "+cu" in torch.version and not torch.arch_list:
        base, variant = torch.version.split("+", 1)
        try:
            torch.arch_list = kfw.torch_arch_list(base, variant) or None
        except (ValueError, LookupError):
            pass
