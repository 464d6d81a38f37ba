"""`run_bench_comm`: measure collectives and peer-to-peer copies, and hold them against the links.

    >>> from gpurig.comm.bench import run_bench_comm
    >>> out = run_bench_comm(device="cpu", ops=["allreduce"], min_bytes=1024, max_bytes=4096)
    >>> [p["size"] for p in out["results"]]
    ['1 KiB', '4 KiB']

Runs in the parent (no torch import); the measuring happens in `gpurig.comm.workers.benchmark` inside
torchrun workers. Figures follow nccl-tests: time per call is the mean over ranks of each rank's
median sample; algbw and busbw as in `gpurig.comm.metrics`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.comm.metrics import OPS, algbw_gbps, busbw_gbps, human_bytes, size_sweep
from gpurig.comm.progress import diagnose_hang, read_progress
from gpurig.comm.verify import STARTUP_SECONDS, live_facts, make_run_dir, read_node, read_rank_results
from gpurig.diagnose.links import LinkCapability, judge_host_and_memory, judge_p2p, link_capability
from gpurig.errors import BadInput
from gpurig.findings import Finding
from gpurig.launch.nodes import Nodes
from gpurig.launch.plan import plan_torchrun, resolve_device
from gpurig.launch.runner import raise_if_interrupted, run_plan

GPU_DEFAULT = {"min_bytes": 1 << 10, "max_bytes": 1 << 30, "iters": 20, "warmup": 5, "repeats": 5}
CPU_DEFAULT = {"min_bytes": 1 << 10, "max_bytes": 256 << 10, "iters": 5, "warmup": 2, "repeats": 3}
SHORT_GPU_SIZES = [1 << 20, 4 << 20, 64 << 20, 256 << 20]
SHORT_CPU_SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
P2P_BYTES = 256 << 20
# "Far below what its kind should reach": a copy under half the link's rate per direction, or an
# all-reduce of a large message with bus bandwidth under 40% of the slowest link in the ring
# (nccl-tests reaches ~73% on 2×H200 NV18 and ~82% on H100 NVSwitch systems).
COLLECTIVE_SLOW_FRACTION = 0.4
COLLECTIVE_JUDGED_FROM_BYTES = 256 << 20
# One GPU: no link between GPUs to measure. What one GPU's training depends on instead is its host
# link and its own memory (`diagnose.links.judge_host_and_memory` holds them against the facts).
MEMORY_HOST_BYTES = 256 << 20
MEMORY_DEVICE_BYTES = 1 << 30
NCCL_SETTING_KEYS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
                     "NCCL_SHM_DISABLE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_CUMEM_ENABLE")


def ring_capability(facts: Any, n: int) -> LinkCapability:
    """The slowest link between the run's GPUs: it bounds a ring collective's bus bandwidth."""
    if facts is None or n < 2:
        return LinkCapability(None, None, "no facts about the links" if n >= 2 else "one GPU: no link")
    caps = [link_capability(facts, a, b) for a in range(n) for b in range(a + 1, n)]
    known = [c for c in caps if c.gbps]
    if not known:
        return caps[0]
    return min(known, key=lambda c: c.gbps)


def run_bench_comm(
    device: str = "auto",
    nproc: str | int = "auto",
    ops: list[str] | None = None,
    min_bytes: int | None = None,
    max_bytes: int | None = None,
    dtype: str = "float32",
    iters: int | None = None,
    warmup: int | None = None,
    repeats: int | None = None,
    graph: str = "auto",
    p2p: bool = True,
    out_dir: str | os.PathLike | None = None,
    timeout: float = 120.0,
    facts: Any = None,
    short: bool = False,
    echo: Callable[[str], None] | None = None,
    nodes: Nodes | None = None,
) -> dict[str, Any]:
    """Sweep the message sizes for each op; returns every data point, the p2p matrix and findings.

    short: a few sizes of all-reduce only (for `gpurig check`). nodes: a run across machines (every
    node calls this with its own node_rank): the collectives span every rank, the links judged are
    the network's, and `node` in the result says which node this was. Raises `BadInput` for bad
    arguments.
    """
    if graph not in ("auto", "on", "off"):
        raise BadInput(f"--graph must be auto, on or off, got {graph!r}")
    ops = ops or (["allreduce"] if short else list(OPS))
    for op in ops:
        if op not in OPS:
            raise BadInput(f"--ops: unknown op {op!r} (choose from {', '.join(OPS)})")
    choice = resolve_device(device, nproc)
    cuda = choice.device == "cuda"
    world = choice.nproc * (nodes.nnodes if nodes else 1)
    one_gpu = cuda and world == 1
    if one_gpu:
        ops = []  # a collective on one rank moves nothing: measure the host link and memory instead
    if graph == "on" and not cuda:
        raise BadInput("--graph on needs CUDA; on the CPU the loop is timed without a graph")
    defaults = GPU_DEFAULT if cuda else CPU_DEFAULT
    for name, value in (("--iters", iters), ("--warmup", warmup), ("--repeats", repeats)):
        if value is not None and value < (0 if name == "--warmup" else 1):
            raise BadInput(f"{name} must be at least {0 if name == '--warmup' else 1}, got {value}")
    if short and min_bytes is None and max_bytes is None:
        sizes = SHORT_GPU_SIZES if cuda else SHORT_CPU_SIZES
    else:
        try:
            sizes = size_sweep(min_bytes or defaults["min_bytes"], max_bytes or defaults["max_bytes"])
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    config = {
        "ops": ops, "sizes": sizes, "dtype": dtype, "graph": graph,
        "iters": iters or defaults["iters"], "warmup": defaults["warmup"] if warmup is None else warmup,
        "repeats": repeats or defaults["repeats"],
        "p2p_bytes": P2P_BYTES if (p2p and cuda and choice.nproc >= 2 and not nodes) else 0,
        "memory_host_bytes": MEMORY_HOST_BYTES if one_gpu else 0,
        "memory_device_bytes": MEMORY_DEVICE_BYTES if one_gpu else 0,
    }
    run_dir = make_run_dir(out_dir, "bench-comm")
    (run_dir / "bench-config.json").write_text(json.dumps(config, indent=1))
    entry = ["-m", "gpurig.comm.workers.worker", "bench", "--run-dir", str(run_dir), "--device", choice.device,
             "--timeout", f"{timeout:g}", "--config", str(run_dir / "bench-config.json")]
    plan = plan_torchrun(entry, choice.nproc, choice.device, run_dir=str(run_dir), nodes=nodes,
                         rdzv_id="gpurig-bench-comm")
    if cuda and facts is None:
        facts = live_facts()

    def on_line(line: str) -> None:
        if echo and line.startswith("gpurig-progress: "):
            echo(line[len("gpurig-progress: "):])

    run = run_plan(plan, timeout=STARTUP_SECONDS + timeout * (len(ops) * len(sizes) + 3 + (2 if one_gpu else 0)),
                   echo=on_line)
    raise_if_interrupted(run)
    data = summarise(run_dir, choice, run, config, facts, timeout, plan.full_env(), world=world)
    if data.get("node") is not None:
        data["node"]["network"] = plan.network
    if out_dir is None and data["ok"]:
        # Every figure is in the result; the temporary folder goes unless the run failed.
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            run_dir.parent.rmdir()  # runs/ itself, when this run was all it held
        data["run_dir"] = None
    return data


def summarise(run_dir: Path, choice: Any, run: Any, config: dict[str, Any], facts: Any, timeout: float,
              env: dict[str, str], world: int | None = None) -> dict[str, Any]:
    n = world or choice.nproc
    ranks = read_rank_results(run_dir, n)
    node = read_node(run_dir)
    if node:  # across machines the slowest link of the ring is the network, which the facts do not rate
        cap = LinkCapability(None, None, "the network between the nodes (not rated)")
    elif choice.device == "cuda":
        cap = ring_capability(facts, n)
    else:
        cap = LinkCapability(None, None, "n/a on CPU (gloo)")
    per_rank_points = {r: (d.get("bench") or {}).get("points", []) for r, d in ranks.items()}
    points = []
    base = per_rank_points.get(0, [])
    for i, p in enumerate(base):
        times = [pts[i]["seconds"] for pts in per_rank_points.values() if i < len(pts)]
        seconds = sum(times) / len(times)
        busbw = busbw_gbps(p["op"], p["bytes"], seconds, n)  # 0 on one rank, as in nccl-tests
        point = {
            "op": p["op"], "bytes": p["bytes"], "size": human_bytes(p["bytes"]), "dtype": p["dtype"],
            "time_us": seconds * 1e6, "algbw_gbps": algbw_gbps(p["bytes"], seconds), "busbw_gbps": busbw,
            "graph": p.get("graph", False), "efficiency": (busbw / cap.gbps) if (busbw and cap.gbps) else None,
        }
        if p.get("graph_error"):
            point["graph_error"] = p["graph_error"]
        points.append(point)
    findings: list[Finding] = []
    p2p = (ranks.get(0, {}).get("bench") or {}).get("p2p")
    p2p_rows, p2p_findings = judge_p2p(p2p, facts)
    findings.extend(p2p_findings)
    big = [p for p in points if p["op"] == "allreduce" and p["bytes"] >= COLLECTIVE_JUDGED_FROM_BYTES and p["efficiency"] is not None]
    if big:
        best = max(big, key=lambda p: p["busbw_gbps"])
        if best["efficiency"] < COLLECTIVE_SLOW_FRACTION:
            findings.append(Finding(
                id="allreduce-slow", severity="warn", area="links",
                title=f"all-reduce reaches {best['busbw_gbps']:.0f} GB/s bus bandwidth, {best['efficiency']:.0%} of the {cap.how} link",
                detail=f"At {best['size']} nccl-tests reaches about 70-80% of the link on healthy NVLink machines.",
                fix="Run `gpurig verify` to see which transport NCCL uses; unset NCCL_ALGO/NCCL_PROTO/NCCL_P2P_* "
                "overrides; rerun on an idle machine.",
                evidence={"busbw_gbps": best["busbw_gbps"], "capability_gbps": cap.gbps, "bytes": best["bytes"]},
            ))
    memory, memory_findings = judge_host_and_memory((ranks.get(0, {}).get("bench") or {}).get("memory"), facts)
    findings.extend(memory_findings)
    meta = ranks.get(0, {})
    hangs = [dict(d["hang"], rank=r) for r, d in ranks.items() if d.get("hang")]
    hang = diagnose_hang(read_progress(run_dir, n), hangs, n, timeout) if (hangs or run.timed_out) else None
    error = None
    if run.returncode != 0:
        tail = [ln for ln in run.output_tail if ln.strip() and "Warning" not in ln][-8:]
        error = (f"hang: {hang['message']}" if hang else f"torchrun exited with status {run.returncode}: " + " | ".join(tail))
    return {
        "ok": run.returncode == 0,
        "error": error,
        "device": choice.device, "nproc": n, "backend": choice.backend, "reason": choice.reason,
        **({"node": node} if node else {}),
        "dtype": config["dtype"], "graph": config["graph"], "iters": config["iters"], "warmup": config["warmup"],
        "repeats": config["repeats"],
        "nccl": {"version": meta.get("nccl_version"),
                 "settings": {k: env[k] for k in NCCL_SETTING_KEYS if k in env},
                 "note": "NCCL chooses algorithm and protocol itself unless NCCL_ALGO / NCCL_PROTO are set"},
        "capability": {"kind": cap.kind, "gbps": cap.gbps, "how": cap.how, "link": cap.link},
        "results": points,
        "p2p": {"bytes": p2p["bytes"], "pairs": p2p_rows} if p2p else None,
        "memory": memory,
        "findings": [f.to_dict() for f in findings],
        "hang": hang,
        "run_dir": str(run_dir), "seconds": run.seconds,
    }
