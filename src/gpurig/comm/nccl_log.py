"""Which transport NCCL really uses between each pair of ranks, read from its `NCCL_DEBUG=INFO` log.

NCCL prints one line per channel connection, for example (host, pid and thread vary):

    node1:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    node1:4243:4301 [1] NCCL INFO Channel 03 : 1[1] -> 0[0] via SHM/direct/direct
    node2:777:790 [3] NCCL INFO Channel 01/0 : 3[3] -> 8[0] [send] via NET/IB/0/GDRDMA

`parse_nccl_log` turns those into a per-pair transport count; `judge_transport` holds it against the
topology (`RigFacts.pairs[*].link`): GPUs joined by NVLink that talk through SHM or the network have
lost peer-to-peer, which costs most of the bandwidth. Pure functions: no I/O besides reading text.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpurig.findings import Finding
from gpurig.probe.pci import normalize_bus_id

TRANSPORTS = ("P2P/CUMEM", "P2P/IPC", "P2P/direct", "P2P/MNNVL", "SHM", "NET/Socket", "NET/IB", "NVLS", "CollNet")

_CHANNEL = re.compile(
    r"NCCL INFO Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<srcdev>[0-9a-fA-Fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<dstdev>[0-9a-fA-Fx]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)"
)
_VERSION = re.compile(r"NCCL INFO NCCL version (?P<v>[\w.+-]+)")
_NVLS_CHANNELS = re.compile(r"NCCL INFO (?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?P<nvls>\d+) nvls channels")
_NVLS_AVAILABLE = re.compile(r"NVLS multicast support is (?P<what>available|not available)")
_INIT = re.compile(r"rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<cuda>\d+) nvmlDev (?P<nvml>\d+) busId (?P<bus>[0-9a-fA-F]+)")
_CONNECTED_NVLS = re.compile(r"NCCL INFO Connected NVLS")


def classify(via: str) -> str:
    """'P2P/CUMEM/read' -> 'P2P/CUMEM'; 'SHM/direct/direct' -> 'SHM'; 'NET/IB/0/GDRDMA' -> 'NET/IB'."""
    parts = via.split("/")
    head = parts[0]
    if head == "P2P" and len(parts) > 1:
        return "P2P/" + parts[1]
    if head == "NET" and len(parts) > 1:
        return "NET/" + parts[1]
    return head


@dataclass
class PairTransport:
    """Connections from one rank to another, counted per transport (one per channel and direction)."""

    src_rank: int
    dst_rank: int
    src_device: str  # as NCCL printed it: an NVML index ("0") or, in older NCCL, a bus id ("1b000")
    dst_device: str
    transports: dict[str, int] = field(default_factory=dict)

    @property
    def main(self) -> str:
        return max(self.transports.items(), key=lambda kv: kv[1])[0] if self.transports else "unknown"


@dataclass
class TransportReport:
    nccl_version: str | None = None
    pairs: dict[str, PairTransport] = field(default_factory=dict)  # "0->1"
    nvls_channels: int | None = None
    nvls_available: bool | None = None
    nvls_connected: bool = False
    rank_devices: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> nvml index, bus id
    channel_lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pairs"] = {k: dict(asdict(v), main=v.main) for k, v in self.pairs.items()}
        out["rank_devices"] = {str(k): v for k, v in self.rank_devices.items()}
        return out


def parse_nccl_log(text: str) -> TransportReport:
    report = TransportReport()
    seen: set[tuple] = set()
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        m = _CHANNEL.search(line)
        if m:
            report.channel_lines += 1
            src, dst = int(m["src"]), int(m["dst"])
            kind = classify(m["via"])
            # One connection can be logged twice (its send and its receive side, across nodes).
            key = (src, dst, m["ch"], m["conn"], kind)
            key_pair = f"{src}->{dst}"
            if key_pair not in report.pairs:
                report.pairs[key_pair] = PairTransport(src, dst, m["srcdev"], m["dstdev"])
            if key not in seen:
                seen.add(key)
                counts[key_pair][kind] += 1
            continue
        if report.nccl_version is None and (m := _VERSION.search(line)):
            report.nccl_version = m["v"]
        elif m := _NVLS_CHANNELS.search(line):
            report.nvls_channels = max(report.nvls_channels or 0, int(m["nvls"]))
        elif m := _NVLS_AVAILABLE.search(line):
            report.nvls_available = m["what"] == "available"
        elif _CONNECTED_NVLS.search(line):
            report.nvls_connected = True
        elif m := _INIT.search(line):
            report.rank_devices[int(m["rank"])] = {"nvml": int(m["nvml"]), "bus_id": m["bus"].lower()}
    for key, per in counts.items():
        report.pairs[key].transports = dict(per)
    return report


def read_nccl_logs(run_dir: str | Path) -> str:
    """Every NCCL debug file of a run (`nccl-*.log`), concatenated."""
    paths = sorted(Path(run_dir).glob("nccl-*.log"))
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in paths)


def _nccl_bus_key(bus_id: str | None) -> int | None:
    """NCCL prints a bus id as the hex number of its digits: '0000:1b:00.0' is '1b000'.

    The facts' form goes through `normalize_bus_id` first, so NVML's 8-digit domain matches too.
    """
    if not bus_id:
        return None
    text = normalize_bus_id(bus_id) if ":" in bus_id else bus_id
    digits = re.sub(r"[^0-9a-fA-F]", "", text or "")
    try:
        return int(digits, 16)
    except ValueError:
        return None


def _gpu_index(device: str, facts: Any) -> int | None:
    """NCCL's device field -> the GPU index in the facts (an NVML index, or a bus id to look up)."""
    if device.isdigit() and len(device) <= 3:
        return int(device)
    key = _nccl_bus_key(device)
    for gpu in getattr(facts, "gpus", None) or []:
        if key is not None and _nccl_bus_key(gpu.pci_bus_id) == key:
            return gpu.index
    return None


NVLINK_LOST_FIX = (
    "NCCL could not use peer-to-peer over NVLink. Unset NCCL_P2P_DISABLE and NCCL_P2P_LEVEL if they "
    "are set; check that `nvidia-smi topo -p2p r` says OK for the pair; in a container start it with "
    "--ipc=host (CUDA IPC between processes needs it); with the IOMMU translating DMA, boot with "
    "iommu=pt (intel_iommu=on iommu=pt); then run `gpurig verify` again."
)


def judge_transport(report: TransportReport, facts: Any, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Hold each pair's transport against the topology. Returns {status, detail, pairs, findings}."""
    env = env or {}
    rows = []
    problems: list[str] = []
    findings: list[Finding] = []
    for key, pair in sorted(report.pairs.items(), key=lambda kv: (kv[1].src_rank, kv[1].dst_rank)):
        a = _gpu_index(pair.src_device, facts) if facts is not None else None
        b = _gpu_index(pair.dst_device, facts) if facts is not None else None
        link = None
        if facts is not None and a is not None and b is not None and hasattr(facts, "pair"):
            p = facts.pair(a, b)
            link = p.link if p else None
        nvlink = bool(link and link.upper().startswith("NV"))
        slow = sorted(t for t in pair.transports if t == "SHM" or t.startswith("NET/"))
        verdict = "ok"
        if nvlink and slow:
            verdict = "fail"
            counts = ", ".join(f"{t} on {pair.transports[t]} connection(s)" for t in slow)
            problems.append(f"rank {pair.src_rank} (GPU {a}) → rank {pair.dst_rank} (GPU {b}) uses {counts} although the GPUs are joined by {link}")
        elif link is None:
            verdict = "topology unknown"
        rows.append({"pair": key, "src_gpu": a, "dst_gpu": b, "link": link, "transports": pair.transports,
                     "main": pair.main, "verdict": verdict})
    if problems:
        set_vars = [f"{k}={env[k]}" for k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE") if k in env]
        detail = "; ".join(problems[:4])
        if set_vars:
            detail += f" (set in the environment: {', '.join(set_vars)})"
        findings.append(Finding(
            id="nccl-nvlink-not-used", severity="error", area="links",
            title="NCCL sends over shared memory or the network between GPUs joined by NVLink",
            detail=detail, fix=NVLINK_LOST_FIX, evidence={"pairs": rows, "env": set_vars},
        ))
        return {"status": "fail", "detail": detail + ". Fix: " + NVLINK_LOST_FIX, "pairs": rows,
                "findings": [f.to_dict() for f in findings]}
    if not rows:
        return {"status": "n/a", "detail": "no NCCL channel lines in the captured log: the transport could not be read",
                "pairs": rows, "findings": []}
    summary: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        summary[r["main"]].append(r["pair"])
    parts = [f"{t} for {len(p)} rank pair(s)" for t, p in summary.items()]
    links = sorted({r["link"] for r in rows if r["link"]})
    text = "NCCL uses " + ", ".join(parts)
    if links:
        text += f"; topology {', '.join(links)}: as expected"
    if any(r["verdict"] == "topology unknown" for r in rows):
        text += "; topology unknown for some pairs (no GPU facts), not judged"
    if report.nvls_channels:
        text += f"; NVLS in use ({report.nvls_channels} channels)"
    return {"status": "pass", "detail": text, "pairs": rows, "findings": []}
