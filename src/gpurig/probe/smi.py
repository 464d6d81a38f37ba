"""`nvidia-smi` as the fallback source of GPU facts, for when NVML cannot be loaded from Python.

The parsers are pure functions of the text `nvidia-smi` prints (tested on recorded outputs in
`tests/fixtures/smi/`); `read_smi()` runs the tool and feeds them. The tool's own failure message
("Failed to initialize NVML: Driver/library version mismatch") is kept, because it is the
diagnosis.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from gpurig.probe.facts import GpuFacts, GpuPairFacts, GpuProcessFacts, NvLinkFacts
from gpurig.probe.nvml import throttle_reason_names
from gpurig.probe.pci import normalize_bus_id

# `nvidia-smi --query-gpu=` field -> GpuFacts attribute. Fields a driver does not know are
# dropped one by one and the query is retried (`Field "x" is not a valid field to query.`).
QUERY_FIELDS: dict[str, str] = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "compute_cap": "compute_capability",
    "memory.total": "memory_total_mib",
    "memory.used": "memory_used_mib",
    "pcie.link.gen.current": "pcie_gen_current",
    "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width_current",
    "pcie.link.width.max": "pcie_width_max",
    "ecc.mode.current": "ecc_enabled",
    "ecc.errors.uncorrected.volatile.total": "ecc_volatile_uncorrected",
    "ecc.errors.uncorrected.aggregate.total": "ecc_aggregate_uncorrected",
    "retired_pages.single_bit_ecc.count": "retired_pages_sbe",  # summed into retired_pages
    "retired_pages.double_bit.count": "retired_pages",
    "retired_pages.pending": "retired_pages_pending",
    "persistence_mode": "persistence_mode",
    "compute_mode": "compute_mode",
    "mig.mode.current": "mig_enabled",
    "clocks.sm": "sm_clock_mhz",
    "clocks.max.sm": "sm_clock_max_mhz",
    "clocks.mem": "memory_clock_mhz",
    "clocks_throttle_reasons.active": "throttle_reasons",
    "power.draw": "power_draw_w",
    "power.limit": "power_limit_w",
    "temperature.gpu": "temperature_c",
    "utilization.gpu": "utilization_pct",
}

_INT = {"index", "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
        "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "retired_pages", "retired_pages_sbe", "sm_clock_mhz",
        "sm_clock_max_mhz", "memory_clock_mhz"}
_FLOAT = {"memory_total_mib", "memory_used_mib", "power_draw_w", "power_limit_w", "temperature_c",
          "utilization_pct"}
_BOOL = {"ecc_enabled", "retired_pages_pending", "persistence_mode", "mig_enabled"}
_COMPUTE_MODES = {"default": "Default", "exclusive_process": "Exclusive_Process",
                  "exclusive_thread": "Exclusive_Thread", "prohibited": "Prohibited"}


def _missing(text: str) -> bool:
    t = text.strip().lower()
    return t in ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]",
                 "[gpu requires reset]", "[requested functionality has been deprecated]")


def _value(attr: str, text: str):
    if _missing(text):
        return None
    t = text.strip()
    try:
        if attr in _INT:
            return int(float(t))
        if attr in _FLOAT:
            return float(t)
    except ValueError:
        return None
    if attr in _BOOL:
        low = t.lower()
        if low in ("enabled", "yes", "on", "1"):
            return True
        if low in ("disabled", "no", "off", "0"):
            return False
        return None
    if attr == "compute_mode":
        return _COMPUTE_MODES.get(t.lower().replace(" ", "_"), t)
    if attr == "throttle_reasons":
        try:
            return throttle_reason_names(int(t, 16))
        except ValueError:
            return None
    if attr == "pci_bus_id":
        return normalize_bus_id(t)
    return t


def parse_query_gpu(text: str, fields: list[str]) -> list[GpuFacts]:
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` output."""
    gpus = []
    rows = csv.reader([ln for ln in text.splitlines() if ln.strip()], skipinitialspace=True)
    for row in rows:
        if len(row) != len(fields):
            continue  # a warning line or a truncated row: not a GPU
        values = {QUERY_FIELDS[f]: _value(QUERY_FIELDS[f], cell) for f, cell in zip(fields, row, strict=True)}
        if values.get("index") is None:
            continue
        sbe = values.pop("retired_pages_sbe", None)
        if sbe is not None:
            values["retired_pages"] = (values.get("retired_pages") or 0) + sbe
        gpus.append(GpuFacts(**values))
    return gpus


def parse_compute_apps(text: str) -> list[tuple[str, GpuProcessFacts]]:
    """Parse `--query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv,noheader,nounits`.

    Returns (normalised bus id, process) pairs.
    """
    found = []
    for row in csv.reader([ln for ln in text.splitlines() if ln.strip()], skipinitialspace=True):
        if len(row) != 4 or not row[1].strip().isdigit():
            continue
        bus, pid, name, used = (c.strip() for c in row)
        mem = None if _missing(used) else _to_float(used)
        found.append((normalize_bus_id(bus) or bus, GpuProcessFacts(pid=int(pid), name=name or None, used_memory_mib=mem)))
    return found


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINK_CODE = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+|SOC)$")


@dataclass
class TopoMatrix:
    """What `nvidia-smi topo -m` says: pair link codes and each GPU's CPU/NUMA affinity."""

    pairs: list[GpuPairFacts] = field(default_factory=list)
    cpu_affinity: dict[int, str | None] = field(default_factory=dict)
    numa_affinity: dict[int, int | None] = field(default_factory=dict)


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` (tab- or space-separated, with or without NIC columns)."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header_idx = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln)), None)
    out = TopoMatrix()
    if header_idx is None:
        return out
    header = lines[header_idx].split()
    # Device columns come first (GPU0.., NIC0.. or mlx5_0..); then "CPU Affinity", "NUMA Affinity", "GPU NUMA ID".
    ncols = header.index("CPU") if "CPU" in header else len(header)
    columns = header[:ncols]
    extra = " ".join(header[ncols:])
    has_numa = "NUMA Affinity" in extra
    gpu_col = {i: int(name[3:]) for i, name in enumerate(columns) if re.fullmatch(r"GPU\d+", name)}
    matrix: dict[tuple[int, int], str] = {}
    for ln in lines[header_idx + 1:]:
        if not ln.strip() or ln.startswith("Legend"):
            break
        cells = ln.split()
        m = re.fullmatch(r"GPU(\d+)", cells[0])
        if not m:
            continue
        row_gpu = int(m.group(1))
        links = cells[1:1 + ncols]
        for col, code in enumerate(links):
            if col in gpu_col and _LINK_CODE.match(code):
                matrix[(row_gpu, gpu_col[col])] = "SYS" if code == "SOC" else code  # SOC: drivers before 384
        rest = cells[1 + ncols:]
        affinity = rest[0] if rest else None
        out.cpu_affinity[row_gpu] = None if affinity is None or _missing(affinity) else affinity
        numa = rest[1] if has_numa and len(rest) > 1 else None
        out.numa_affinity[row_gpu] = int(numa) if numa and numa.isdigit() else None
    gpus = sorted(out.cpu_affinity)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            code = matrix.get((a, b)) or matrix.get((b, a))
            if code is None or code == "X":
                continue
            count = int(code[2:]) if code.startswith("NV") else 0
            out.pairs.append(GpuPairFacts(gpu_a=a, gpu_b=b, link=code, nvlink_count=count))
    return out


def parse_topo_p2p(text: str) -> dict[tuple[int, int], bool | None]:
    """Parse `nvidia-smi topo -p2p r` (or w/n/a): OK -> True; CNS/GNS/TNS/NS/DR -> False; U -> None."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header_idx = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln)), None)
    result: dict[tuple[int, int], bool | None] = {}
    if header_idx is None:
        return result
    cols = [int(c[3:]) for c in lines[header_idx].split() if re.fullmatch(r"GPU\d+", c)]
    for ln in lines[header_idx + 1:]:
        cells = ln.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            break
        row = int(cells[0][3:])
        for col, status in zip(cols, cells[1:], strict=False):
            if col == row or status == "X":
                continue
            result[(row, col)] = True if status == "OK" else (None if status == "U" else False)
    return result


def parse_nvlink_status(text: str) -> dict[int, list[NvLinkFacts]]:
    """Parse `nvidia-smi nvlink -s`: per GPU index, each link's speed (GB/s) or `<inactive>`."""
    links: dict[int, list[NvLinkFacts]] = {}
    current = None
    for ln in text.splitlines():
        m = re.match(r"^GPU (\d+):", ln)
        if m:
            current = int(m.group(1))
            links[current] = []
            continue
        m = re.match(r"^\s+Link (\d+):\s*(.+?)\s*$", ln)
        if m and current is not None:
            link, state = int(m.group(1)), m.group(2)
            speed = re.match(r"([\d.]+)\s*GB/s", state)
            if speed:
                links[current].append(NvLinkFacts(link=link, active=True, speed_gbps=float(speed.group(1))))
            elif "inactive" in state.lower():
                links[current].append(NvLinkFacts(link=link, active=False))
            else:
                links[current].append(NvLinkFacts(link=link))
    return links


def parse_smi_header(text: str) -> tuple[str | None, str | None]:
    """(driver version, CUDA version) from the banner of plain `nvidia-smi`."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return (driver.group(1) if driver else None, cuda.group(1) if cuda else None)


def smi_failure(text: str) -> str | None:
    """The one-line reason nvidia-smi gives when it cannot talk to the driver, else None."""
    for ln in text.splitlines():
        s = ln.strip()
        if s.startswith("Failed to initialize NVML") or "NVIDIA-SMI has failed" in s or s.startswith("No devices were found"):
            return s
    return None


@dataclass
class SmiResult:
    """What `read_smi()` learnt; `error` is set when nvidia-smi itself failed."""

    gpus: list[GpuFacts] = field(default_factory=list)
    pairs: list[GpuPairFacts] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def _run(argv: list[str], timeout: float) -> tuple[int, str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv[:2])} did not answer within {timeout:g} s"
    except OSError as exc:
        return 127, str(exc)
    return out.returncode, (out.stdout or "") + (out.stderr or "")


def read_smi(exe: str | None = None, timeout: float = 10.0) -> SmiResult:
    """Run nvidia-smi and parse what it says. Never raises; a failure is `SmiResult.error`."""
    exe = exe or shutil.which("nvidia-smi")
    res = SmiResult()
    if not exe:
        res.error = "nvidia-smi not found on PATH"
        return res
    rc, banner = _run([exe], timeout)
    if rc != 0:
        res.error = smi_failure(banner) or (banner.strip().splitlines() or [f"exit code {rc}"])[-1]
        return res
    res.driver_version, res.cuda_driver_version = parse_smi_header(banner)
    fields = list(QUERY_FIELDS)
    text = ""
    for _ in range(len(QUERY_FIELDS)):
        rc, text = _run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], timeout)
        bad = re.search(r'Field "([^"]+)" is not a valid field to query', text)
        if rc == 0 or not bad or bad.group(1) not in fields:
            break
        res.notes.append(f"nvidia-smi does not know the query field {bad.group(1)!r}; it is left unknown")
        fields.remove(bad.group(1))
    if rc != 0:
        res.error = smi_failure(text) or (text.strip().splitlines() or [f"exit code {rc}"])[-1]
        return res
    res.gpus = parse_query_gpu(text, fields)
    by_index = {g.index: g for g in res.gpus}
    by_bus = {g.pci_bus_id: g for g in res.gpus}
    rc, text = _run([exe, "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory",
                     "--format=csv,noheader,nounits"], timeout)
    if rc == 0:
        for bus, proc in parse_compute_apps(text):
            if bus in by_bus:
                by_bus[bus].processes.append(proc)
    if res.gpus:
        rc, text = _run([exe, "topo", "-m"], timeout)
        if rc == 0:
            topo = parse_topo_matrix(text)
            res.pairs = topo.pairs
            for idx, gpu in by_index.items():
                gpu.cpu_affinity = topo.cpu_affinity.get(idx)
                gpu.numa_node = topo.numa_affinity.get(idx)
            rc, text = _run([exe, "topo", "-p2p", "r"], timeout) if res.pairs else (1, "")
            if rc == 0:
                p2p = parse_topo_p2p(text)
                for p in res.pairs:
                    p.p2p_read = p2p.get((p.gpu_a, p.gpu_b), p2p.get((p.gpu_b, p.gpu_a)))
        else:
            res.notes.append(f"nvidia-smi topo -m failed: {text.strip()[:200]}")
    rc, text = _run([exe, "nvlink", "-s"], timeout)
    if rc == 0:
        for idx, links in parse_nvlink_status(text).items():
            if idx in by_index:
                by_index[idx].nvlinks = links
    return res
