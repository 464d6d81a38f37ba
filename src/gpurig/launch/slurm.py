"""Slurm, read from its environment: how many nodes, which one this is, and the first host.

`srun` sets SLURM_JOB_ID, SLURM_NNODES, SLURM_NODEID and SLURM_JOB_NODELIST (compressed host
lists such as `gpu[01-04,07],cpu3`). `expand_nodelist` expands that syntax without calling
`scontrol`, so a plan can be built (and tested) anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpurig.errors import BadInput

# Each job gets a rendezvous port derived from its id, the same on every node, so two jobs
# sharing a first host do not both ask for 29500.
BASE_PORT = 29500
PORT_SPREAD = 2000


@dataclass
class SlurmJob:
    job_id: str
    nnodes: int
    node_rank: int
    hosts: list[str]
    ntasks_per_node: int | None = None

    @property
    def first_host(self) -> str:
        return self.hosts[0]

    @property
    def rendezvous_port(self) -> int:
        digits = re.sub(r"\D", "", self.job_id) or "0"
        return BASE_PORT + int(digits) % PORT_SPREAD


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets: 'a[1-2],b' -> ['a[1-2]', 'b']."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str) -> list[str]:
    """'01-04' -> ['01','02','03','04'] keeping the zero padding; '7' -> ['7']."""
    if "-" not in spec:
        if not spec.isdigit():
            raise ValueError(f"{spec!r} is not a number or a range")
        return [spec]
    lo, hi = spec.split("-", 1)
    if not (lo.isdigit() and hi.isdigit()):
        raise ValueError(f"{spec!r} is not a range of numbers")
    if int(hi) < int(lo):
        raise ValueError(f"range {spec!r} goes backwards")
    width = len(lo)
    return [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]


def _expand_one(item: str) -> list[str]:
    m = re.match(r"^([^\[\]]*)\[([^\[\]]+)\](.*)$", item)
    if not m:
        if "[" in item or "]" in item:
            raise ValueError(f"cannot read {item!r}")
        return [item]
    prefix, inner, rest = m.groups()
    tails = _expand_one(rest) if rest else [""]
    hosts = []
    for spec in inner.split(","):
        for num in _expand_range(spec.strip()):
            hosts += [prefix + num + t for t in tails]
    return hosts


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand Slurm's compressed host list, in order.

    >>> expand_nodelist("gpu[01-03,07],login1")
    ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']
    """
    text = (nodelist or "").strip()
    if not text:
        raise ValueError("the node list is empty")
    hosts: list[str] = []
    for item in _split_top_level(text):
        hosts += _expand_one(item)
    return hosts


def slurm_from_env(environ: dict[str, str]) -> SlurmJob | None:
    """The Slurm job this process runs in, or None outside Slurm (no SLURM_JOB_ID)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    try:
        hosts = expand_nodelist(nodelist)
    except ValueError as exc:
        raise BadInput(f"SLURM_JOB_NODELIST={nodelist!r}: {exc}") from None

    def _int(name: str, default: int | None) -> int | None:
        raw = environ.get(name)
        if raw is None or raw == "":
            return default
        m = re.match(r"^\d+", raw)  # SLURM_TASKS_PER_NODE style "2(x3)" keeps its first number
        if not m:
            raise BadInput(f"{name}={raw!r} is not a number")
        return int(m.group(0))

    nnodes = _int("SLURM_NNODES", None) or _int("SLURM_JOB_NUM_NODES", None) or len(hosts)
    node_rank = _int("SLURM_NODEID", 0) or 0
    if node_rank >= nnodes:
        raise BadInput(f"SLURM_NODEID={node_rank} is not below SLURM_NNODES={nnodes}")
    return SlurmJob(
        job_id=job_id,
        nnodes=nnodes,
        node_rank=node_rank,
        hosts=hosts,
        ntasks_per_node=_int("SLURM_NTASKS_PER_NODE", None),
    )
