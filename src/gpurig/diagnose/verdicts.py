"""Bottleneck verdicts: where a training run's time went, and what to change. Pure, no I/O.

`training_verdicts(summary, samples)` judges a training summary (the step-time parts that
`gpurig train` records, per rank) and, where recorded, monitor samples. `sample_verdicts(samples)`
judges what monitor samples alone can tell. A value that is missing gives no verdict on it.

The training summary, as `gpurig train` writes it:

    {"world_size": 2, "device": "cuda",
     "step_time": {"mean_s", "data_wait_fraction", "compute_fraction", "comm_exposed_fraction"},
     "per_rank": [{"rank", "step_time_s", "data_wait_s", "compute_s", "comm_exposed_s", "gpu_clock"}, ...],
     "gpu_clock": {"slowest_sm_clock_mhz", "fastest_sm_clock_mhz", "slowest_power_capped_fraction", ...},
     "peak_memory_bytes", "memory_total_bytes", "batch_size_per_device", "samples_per_s_per_device",
     "transport": {"0-1": "P2P"},   # optional, per GPU pair, from verify (NCCL's choice)
     "links": {"0-1": "NV18"}}      # optional, per GPU pair, from `nvidia-smi topo -m`

Findings come headline first: the worst bottleneck by its share of step time; a run with no
bottleneck leads with an `ok` verdict.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpurig.diagnose.clocks import _num, clock_paced, waiting_for_host
from gpurig.diagnose.findings import Finding
from gpurig.probe.nvml import POWER_REASONS, THERMAL_REASONS

# Thresholds, each a share of step time or of a resource; chosen so a healthy DDP run on one
# machine (data wait and exposed communication a few percent, ranks within a few percent) is quiet.
INPUT_BOUND_FRACTION = 0.20  # data wait this share of the step or more: the GPU starves
COMM_BOUND_FRACTION = 0.20  # exposed (not overlapped) communication this share or more
STRAGGLER_RATIO = 1.15  # one rank's busy time (data + compute) this much above the median of the others
STRAGGLER_MIN_SHARE = 0.05  # ... and the gap at least this share of the step (ignores noise on tiny steps)
LAUNCH_BOUND_STEP_S = 0.030  # GPU steps shorter than this are dominated by kernel-launch overhead
LAUNCH_BOUND_UTILIZATION = 70.0  # ... confirmed when the GPUs were busy less than this
MEMORY_HEADROOM_FRACTION = 0.50  # peak memory under this share of the GPU: a larger batch fits
THROTTLE_SAMPLE_FRACTION = 0.20  # a throttle reason in this share of busy samples or more
BUSY_UTILIZATION = 50.0  # a GPU at or above this is "working"
IDLE_UTILIZATION = 10.0  # a GPU at or below this is "idle"
LOW_UTILIZATION = 70.0  # the tutorials' rule of thumb: all GPUs should sit above 70%
SLOW_CLOCK_RATIO = 0.85  # one busy GPU's SM clock below this share of the others' median
IMBALANCE_POINTS = 25.0  # one busy GPU this many utilisation points below the others' median
# A GPU "busy" without drawing power is waiting, not computing (a NCCL kernel spinning on a peer):
# on an H200, 100% utilisation at 125 W of 700 W, against ~690 W when it trains.
SPIN_UTILIZATION = 95.0
SPIN_POWER_FRACTION = 0.25  # of the power limit
SPIN_MIN_SAMPLES = 5  # consecutive samples, so a short pause between steps is not a hang
SPIN_MAX_NVLINK_BYTES_PER_S = 1e9  # a kernel moving data over NVLink is communicating, not stuck

_NVLINK_PREFIX = "NV"
_PCIE_LINKS = {"PIX", "PXB", "PHB", "NODE", "SYS"}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


# ------------------------------------------------------------------------------------------
# training


def judge_run(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdicts as summary.json holds them (`training_verdicts`, as dicts); written with the summary."""
    return [f.to_dict() for f in training_verdicts(summary)]


def training_verdicts(summary: dict[str, Any], samples: list[dict[str, Any]] | None = None) -> list[Finding]:
    """Bottleneck verdicts for one training run, headline first. See the module docstring."""
    step = summary.get("step_time") or {}
    bottlenecks: list[tuple[float, Finding]] = []  # (share of step time, finding) for ordering
    advice: list[Finding] = []

    data_wait = _num(step.get("data_wait_fraction"))
    if data_wait is not None and data_wait >= INPUT_BOUND_FRACTION:
        bottlenecks.append((data_wait, _input_bound(summary, data_wait)))

    comm = _num(step.get("comm_exposed_fraction"))
    if comm is not None and comm >= COMM_BOUND_FRACTION:
        bottlenecks.append((comm, _comm_bound(summary, comm)))

    straggler = _straggler(summary)
    if straggler is not None:
        bottlenecks.append(straggler)

    launch = _launch_bound(summary, samples, data_wait, comm)
    if launch is not None:
        bottlenecks.append(launch)
    else:
        host = _host_bound(summary, data_wait, comm)
        if host is not None:
            bottlenecks.append(host)

    if samples:
        for f in _throttling(samples):
            if f.severity == "warn":
                bottlenecks.append((0.0, f))
            else:
                advice.append(f)

    paced = clock_paced(summary)
    if paced is not None:
        advice.append(paced)

    headroom = _memory_headroom(summary)
    if headroom is not None:
        advice.append(headroom)

    bottlenecks.sort(key=lambda pair: -pair[0])
    findings = [f for _, f in bottlenecks]
    if not findings:
        ok = _balanced(summary, data_wait, comm)
        if ok is not None:
            findings.append(ok)
    return findings + advice


def _input_bound(summary: dict[str, Any], fraction: float) -> Finding:
    on_gpu = summary.get("device") == "cuda"
    fix = ("more loader workers and deeper prefetch (`--set data.workers=N --set data.prefetch=8`; pinned memory "
           "and persistent workers are already on), or hold a dataset that fits on the device "
           "(`--set data.on_device=on`)")
    if on_gpu:
        fix += "; decode JPEGs on the GPU (`--set data.decode=gpu`)"
    worst = _worst_rank(summary, "data_wait_s")
    evidence: dict[str, Any] = {"data_wait_fraction": fraction}
    detail = f"The GPUs waited for the next batch {_pct(fraction)} of each step."
    if worst is not None:
        evidence["worst_rank"] = worst[0]
        evidence["worst_rank_data_wait_s"] = worst[1]
        detail += f" Rank {worst[0]} waited longest ({worst[1] * 1000:.1f} ms per step)."
    return Finding(
        id="input-bound", severity="warn", area="training",
        title=f"input-bound: data wait is {_pct(fraction)} of step time; raise workers or move the data to the GPU",
        detail=detail, fix=fix, evidence=evidence,
    )


def _pair_transport_problems(summary: dict[str, Any]) -> list[str]:
    """Why the transport, not the model, makes communication slow: one sentence per bad pair."""
    transport = summary.get("transport") or {}
    links = summary.get("links") or {}
    problems = []
    for pair in sorted(set(transport) | set(links)):
        t = str(transport.get(pair) or "").upper()
        link = str(links.get(pair) or "").upper()
        nvlink = link.startswith(_NVLINK_PREFIX)
        if t and nvlink and not t.startswith("P2P") and t != "NVLS":
            problems.append(f"GPUs {pair} are joined by {links[pair]} but NCCL moved data over {transport[pair]} "
                            "instead of P2P")
        elif t in {"NET", "SOCKET", "IB"}:
            problems.append(f"GPUs {pair} on one machine talked over the network transport ({transport[pair]})")
        elif link in _PCIE_LINKS:
            problems.append(f"GPUs {pair} are joined by PCIe ({links[pair]}), not NVLink")
    return problems


def _comm_bound(summary: dict[str, Any], fraction: float) -> Finding:
    problems = _pair_transport_problems(summary)
    evidence: dict[str, Any] = {"comm_exposed_fraction": fraction}
    if summary.get("transport"):
        evidence["transport"] = summary["transport"]
    if summary.get("links"):
        evidence["links"] = summary["links"]
    detail = f"Gradient exchange that compute did not hide took {_pct(fraction)} of each step."
    if problems:
        evidence["transport_problems"] = problems
        detail += " The transport is the reason: " + "; ".join(problems) + "."
        if any("instead of P2P" in p for p in problems):
            fix = ("let NCCL use P2P: unset NCCL_P2P_DISABLE and NCCL_P2P_LEVEL, check `nvidia-smi topo -p2p r`, "
                   "and in a container run with --ipc=host (or a large --shm-size); then `gpurig verify` shows P2P")
        elif any("network" in p for p in problems):
            fix = "unset NCCL_SHM_DISABLE / NCCL_P2P_DISABLE so GPUs on one machine use P2P or SHM, not sockets"
        else:
            fix = ("PCIe is the limit, so hide communication behind compute: more work per all-reduce "
                   f"({_bigger_batch(summary)}, or `--set train.grad_accum=4`: one all-reduce per 4 micro-batches) "
                   "and larger buckets (`--set train.ddp_bucket_mb=100`)")
        title = f"communication-bound: exposed communication is {_pct(fraction)} of step time, and the transport is why"
    else:
        fix = ("hide communication behind compute: more work per all-reduce "
               f"({_bigger_batch(summary)}, or `--set train.grad_accum=4`: one all-reduce per 4 micro-batches) "
               "and larger buckets (`--set train.ddp_bucket_mb=100`)")
        title = f"communication-bound: exposed communication is {_pct(fraction)} of step time"
    return Finding(id="communication-bound", severity="warn", area="training", title=title, detail=detail,
                   fix=fix, evidence=evidence)


def _bigger_batch(summary: dict[str, Any], factor: int = 2) -> str:
    """The `gpurig train` override for a batch `factor` times larger per device."""
    batch = summary.get("batch_size_per_device")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
        return f"`--set data.batch_size={batch * factor}`"
    return f"a {factor}x larger `data.batch_size`"


def _worst_rank(summary: dict[str, Any], key: str) -> tuple[int, float] | None:
    rows = [(r.get("rank"), _num(r.get(key))) for r in summary.get("per_rank") or [] if isinstance(r, dict)]
    rows = [(rank, v) for rank, v in rows if isinstance(rank, int) and v is not None]
    if len(rows) < 2:
        return None
    return max(rows, key=lambda rv: rv[1])


def _straggler(summary: dict[str, Any]) -> tuple[float, Finding] | None:
    """A rank busy (data wait + compute) much longer than the others; the others then wait for it in
    the all-reduce, so in synchronous data parallelism every rank's step time looks the same."""
    busy = []
    for r in summary.get("per_rank") or []:
        if not isinstance(r, dict) or not isinstance(r.get("rank"), int):
            continue
        compute, wait = _num(r.get("compute_s")), _num(r.get("data_wait_s"))
        if compute is None:
            continue
        busy.append((r["rank"], compute + (wait or 0.0), compute, wait))
    if len(busy) < 2:
        return None
    rank, slowest, compute, wait = max(busy, key=lambda b: b[1])
    others = statistics.median(b[1] for b in busy if b[0] != rank)
    step = _num((summary.get("step_time") or {}).get("mean_s")) or slowest
    if others <= 0 or slowest < STRAGGLER_RATIO * others or (slowest - others) < STRAGGLER_MIN_SHARE * step:
        return None
    other_wait = statistics.median((b[3] or 0.0) for b in busy if b[0] != rank)
    other_compute = statistics.median(b[2] for b in busy if b[0] != rank)
    cause = "waits longer for data" if (wait or 0.0) - other_wait > compute - other_compute else "computes slower"
    share = (slowest - others) / step if step else 0.0
    evidence = {"rank": rank, "busy_s": slowest, "others_median_busy_s": others, "ratio": slowest / others,
                "per_rank_busy_s": {b[0]: b[1] for b in busy}}
    return share, Finding(
        id="straggler-rank", severity="warn", area="training",
        title=f"straggler: rank {rank} is {slowest / others:.2f}x slower than the others and {cause}; the rest wait for it",
        detail=(f"Rank {rank} spends {slowest * 1000:.1f} ms per step on data and compute, the others "
                f"{others * 1000:.1f} ms; in synchronous data parallelism every rank waits for the slowest."),
        fix=(f"look at rank {rank}'s GPU with `gpurig monitor` (throttling, lower clocks, another process on it); "
             "check CPU affinity and that its data shard is not larger or slower to read than the others'"
             if summary.get("device") == "cuda" else
             "on the CPU the processes share cores: keep OMP_NUM_THREADS x processes at or below the core count, "
             "and run nothing else on the machine while training"),
        evidence=evidence,
    )


def _mean_busy_utilization(samples: list[dict[str, Any]] | None) -> float | None:
    values = [_num(g.get("utilization_pct")) for s in samples or [] for g in s.get("gpus", [])]
    values = [v for v in values if v is not None and v > IDLE_UTILIZATION]
    return statistics.fmean(values) if values else None


def _launch_bound(summary: dict[str, Any], samples: list[dict[str, Any]] | None,
                  data_wait: float | None, comm: float | None) -> tuple[float, Finding] | None:
    if summary.get("device") != "cuda":
        return None  # on the CPU there is no kernel launch to wait for
    mean_s = _num((summary.get("step_time") or {}).get("mean_s"))
    if mean_s is None or mean_s >= LAUNCH_BOUND_STEP_S:
        return None
    if (data_wait or 0.0) >= INPUT_BOUND_FRACTION or (comm or 0.0) >= COMM_BOUND_FRACTION:
        return None  # the time goes elsewhere
    util = _mean_busy_utilization(samples)
    if util is not None and util >= LAUNCH_BOUND_UTILIZATION:
        return None  # the GPU is kept busy after all
    batch = summary.get("batch_size_per_device")
    evidence: dict[str, Any] = {"step_time_s": mean_s, "batch_size_per_device": batch}
    detail = f"Each step takes {mean_s * 1000:.1f} ms"
    if util is not None:
        evidence["mean_gpu_utilization_pct"] = util
        detail += f" and the GPUs were busy {util:.0f}% of the time"
    detail += ": at this size Python and kernel launches, not the GPU, set the pace."
    bigger = _bigger_batch(summary, 4)
    return 0.5, Finding(
        id="launch-bound", severity="warn", area="training",
        title=f"launch-bound: steps of {mean_s * 1000:.1f} ms are too small to keep the GPU busy",
        detail=detail,
        fix=(f"give each step more work ({bigger}) or compile the model (`--set train.compile=on`); in a loop of "
             "your own, capture the step with CUDA graphs (torch.compile mode='reduce-overhead')"),
        evidence=evidence,
    )


def _host_bound(summary: dict[str, Any], data_wait: float | None,
                comm: float | None) -> tuple[float, Finding] | None:
    """Steps of any length whose GPUs held their full clock far under their power limit (the
    summary's `gpu_clock`): the time goes on the host, which the step split cannot show, since
    the host's own work counts as compute there."""
    if summary.get("device") != "cuda":
        return None
    if (data_wait or 0.0) >= INPUT_BOUND_FRACTION or (comm or 0.0) >= COMM_BOUND_FRACTION:
        return None  # the time goes elsewhere
    c = summary.get("gpu_clock") or {}
    why = waiting_for_host(c)
    if not why:
        return None
    strategy = summary.get("strategy")
    return 0.4, Finding(
        id="host-bound", severity="warn", area="training",
        title=f"host-bound: the GPUs held full clock at {c['power_w']:.0f} W of {c['power_limit_w']:.0f} W, "
              "waiting for the host inside each step",
        detail=why[0].upper() + why[1:] + ". The step split counts the host's work as compute.",
        fix=("profile a few steps (torch.profiler) to see where the host's time goes; "
             + ("FSDP's per-block hooks cost host time on every block: for a model that fits one GPU, "
                "`--set train.strategy=ddp` is faster" if strategy == "fsdp" else
                "compile the model (`--set train.compile=on`), keep .item() and other host reads out of the step")),
        evidence={k: c.get(k) for k in ("slowest_sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w")},
    )


def _memory_headroom(summary: dict[str, Any]) -> Finding | None:
    peak, total = _num(summary.get("peak_memory_bytes")), _num(summary.get("memory_total_bytes"))
    if peak is None or not total or peak <= 0:
        return None
    used = peak / total
    if used >= MEMORY_HEADROOM_FRACTION:
        return None
    batch = summary.get("batch_size_per_device")
    # Activations grow with the batch, weights and optimizer state do not: doubling is safe while
    # peak stays under half the GPU; suggest the largest power of two that keeps ~80% or less.
    factor = 1
    while peak * factor * 2 <= 0.8 * total and factor < 8:
        factor *= 2
    suggestion = _bigger_batch(summary, factor)
    return Finding(
        id="memory-headroom", severity="info", area="training",
        title=f"memory headroom unused: peak {_gib(peak)} of {_gib(total)} ({_pct(used)}); a larger batch fits",
        detail=("A larger batch per GPU gives each step more work per launch and per all-reduce; "
                "raise the learning rate with it (linear scaling) and keep the setting with the best samples/s."),
        fix=f"try {suggestion} (peak memory grows less than the batch, since weights and optimizer state stay)",
        evidence={"peak_memory_bytes": int(peak), "memory_total_bytes": int(total), "used_fraction": used,
                  "batch_size_per_device": batch},
    )


def _balanced(summary: dict[str, Any], data_wait: float | None, comm: float | None) -> Finding | None:
    step = summary.get("step_time") or {}
    compute = _num(step.get("compute_fraction"))
    if data_wait is None and comm is None and compute is None:
        return None  # nothing was measured: no verdict at all
    parts = []
    if compute is not None:
        parts.append(f"compute {_pct(compute)}")
    if data_wait is not None:
        parts.append(f"data wait {_pct(data_wait)}")
    if comm is not None:
        parts.append(f"exposed communication {_pct(comm)}")
    return Finding(
        id="training-balanced", severity="ok", area="training",
        title="balanced: no bottleneck found (" + ", ".join(parts) + " of step time)",
        detail="The GPUs spend the step computing; neither the input pipeline nor communication holds them back.",
        fix="",
        evidence={"compute_fraction": compute, "data_wait_fraction": data_wait, "comm_exposed_fraction": comm,
                  "samples_per_s_per_device": summary.get("samples_per_s_per_device")},
    )


# ------------------------------------------------------------------------------------------
# samples


def _per_gpu(samples: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        for g in s.get("gpus", []):
            if isinstance(g.get("index"), int) and not g.get("error"):
                out.setdefault(g["index"], []).append(g)
    return out


def _busy_samples(samples: list[dict[str, Any]], ignore: set[int] | frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """Samples in which at least one GPU (not in `ignore`) was working: idle time before and after a
    job is not judged."""
    return [s for s in samples
            if any((_num(g.get("utilization_pct")) or 0.0) >= BUSY_UTILIZATION
                   for g in s.get("gpus", []) if g.get("index") not in ignore)]


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _throttling(samples: list[dict[str, Any]]) -> list[Finding]:
    findings = []
    for index, all_rows in sorted(_per_gpu(samples).items()):
        # judged on the samples where this GPU itself works: an idle GPU's clocks are not throttled
        rows = [g for g in all_rows if (_num(g.get("utilization_pct")) or 0.0) >= BUSY_UTILIZATION]
        known = [g for g in rows if g.get("throttle_reasons") is not None]
        if not known:
            continue
        thermal = [g for g in known if THERMAL_REASONS & set(g["throttle_reasons"])]
        power = [g for g in known if POWER_REASONS & set(g["throttle_reasons"])]
        temps = [t for t in (_num(g.get("temperature_c")) for g in rows) if t is not None]
        clocks = [c for c in (_num(g.get("sm_clock_mhz")) for g in rows) if c is not None]
        max_clock = max((c for c in (_num(g.get("sm_clock_max_mhz")) for g in rows) if c is not None), default=None)
        evidence: dict[str, Any] = {"gpu": index, "busy_samples": len(known),
                                    "max_temperature_c": max(temps) if temps else None,
                                    "mean_sm_clock_mhz": statistics.fmean(clocks) if clocks else None,
                                    "max_sm_clock_mhz": max_clock}
        clock_note = ""
        if clocks and max_clock:
            clock_note = f"; SM clock averaged {statistics.fmean(clocks):.0f} of {max_clock:.0f} MHz"
        if len(thermal) / len(known) >= THROTTLE_SAMPLE_FRACTION:
            share = len(thermal) / len(known)
            findings.append(Finding(
                id="throttling-thermal", severity="warn", area="gpus",
                title=f"thermal throttling: GPU {index} slowed for heat in {_pct(share)} of busy samples"
                      + (f" (up to {max(temps):.0f} °C)" if temps else ""),
                detail=f"NVML reported a thermal slowdown reason while the GPU was working{clock_note}.",
                fix="improve cooling or airflow (check fans, blanking panels, inlet temperature); "
                    "`nvidia-smi -q -d TEMPERATURE,PERFORMANCE` shows the slowdown thresholds",
                evidence={**evidence, "thermal_fraction": share},
            ))
        if len(power) / len(known) >= THROTTLE_SAMPLE_FRACTION:
            share = len(power) / len(known)
            reasons = sorted({r for g in power for r in g["throttle_reasons"] if r in POWER_REASONS})
            hardware = any(r in {"hw_power_brake", "hw_slowdown"} for r in reasons)
            limits = [v for v in (_num(g.get("power_limit_w")) for g in rows) if v is not None]
            findings.append(Finding(
                id="throttling-power", severity="warn" if hardware else "info", area="gpus",
                title=(f"power throttling: GPU {index} held back by {', '.join(reasons)} in {_pct(share)} of busy samples"
                       if hardware else
                       f"at its power limit: GPU {index} capped by sw_power_cap in {_pct(share)} of busy samples "
                       "(normal under full load)"),
                detail=("A hardware slowdown or power brake means the board or the power supply pulled the clocks down."
                        if hardware else
                        "The GPU runs at its power limit: normal for a heavy load, but clocks drop to stay under it")
                       + clock_note + ".",
                fix=("check the power supply and cabling; `nvidia-smi -q -d PERFORMANCE` lists the active slowdown"
                     if hardware else
                     "if the limit is below the board's default, restore it (`nvidia-smi -q -d POWER` shows both)"),
                evidence={**evidence, "power_fraction": share, "reasons": reasons,
                          "power_limit_w": max(limits) if limits else None},
            ))
    return findings


def _spinning(samples: list[dict[str, Any]]) -> list[Finding]:
    """GPUs that stayed 'busy' at idle-level power with no NVLink traffic for several samples in a row."""
    runs: dict[int, list[tuple[float, dict[str, Any]]]] = {}  # the current run, per GPU
    longest: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    others_idle: dict[int, list[bool]] = {}
    for s in samples:
        gpus = [g for g in s.get("gpus", []) if isinstance(g.get("index"), int) and not g.get("error")]
        for g in gpus:
            i = g["index"]
            util, power, limit = _num(g.get("utilization_pct")), _num(g.get("power_w")), _num(g.get("power_limit_w"))
            nvlink = _num(g.get("nvlink_tx_bytes_per_s"))
            spinning = (util is not None and util >= SPIN_UTILIZATION and power is not None and bool(limit)
                        and power <= SPIN_POWER_FRACTION * limit
                        and (nvlink is None or nvlink < SPIN_MAX_NVLINK_BYTES_PER_S))
            if spinning:
                runs.setdefault(i, []).append((s["time"], g))
                idle = [(_num(o.get("utilization_pct")) or 0.0) <= IDLE_UTILIZATION for o in gpus if o["index"] != i]
                others_idle.setdefault(i, []).append(bool(idle) and all(idle))
                if len(runs[i]) > len(longest.get(i, [])):
                    longest[i] = list(runs[i])
            else:
                runs.pop(i, None)
    findings = []
    for i, run in sorted(longest.items()):
        if len(run) < SPIN_MIN_SAMPLES:
            continue
        rows = [g for _, g in run]
        seconds = run[-1][0] - run[0][0]
        power = statistics.fmean(g["power_w"] for g in rows)
        limit = max(g["power_limit_w"] for g in rows)
        pids = sorted({p["pid"] for g in rows for p in g.get("processes") or [] if isinstance(p, dict) and "pid" in p})
        idle_peers = sum(others_idle.get(i, [])) >= len(run) // 2
        traffic = " with no NVLink traffic" if any(g.get("nvlink_tx_bytes_per_s") is not None for g in rows) else ""
        dump = " and ".join(f"`py-spy dump --pid {p}`" for p in pids[:2]) or "`py-spy dump --pid PID`"
        findings.append(Finding(
            id="gpu-spinning", severity="warn", area="gpus",
            title=(f"GPU {i} looks stuck: {statistics.fmean(_num(g.get('utilization_pct')) or 0 for g in rows):.0f}% busy "
                   f"at {power:.0f} W ({_pct(power / limit)} of its {limit:.0f} W limit){traffic} for {seconds:.0f} s"
                   + (", while the other GPUs are idle" if idle_peers else "")),
            detail=("A kernel that keeps a GPU 'busy' without drawing power is waiting, not computing: most often a NCCL "
                    "collective waiting for a rank that never joins it (a rank that crashed, stopped early, or took "
                    "another code path)."),
            fix=(f"see where the process on it waits: {dump}; pass a timeout to "
                 "init_process_group and set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 so a hang ends in an error; make every "
                 "rank run the same number of steps (a stop on time or on a metric must be agreed, e.g. all_reduce the flag)"),
            evidence={"gpu": i, "samples": len(run), "seconds": seconds, "mean_power_w": power, "power_limit_w": limit,
                      "pids": pids, "other_gpus_idle": idle_peers},
        ))
    return findings


def sample_verdicts(samples: list[dict[str, Any]]) -> list[Finding]:
    """What monitor samples alone say: a GPU stuck in a spinning kernel, an idle GPU among busy ones,
    one GPU slower or less busy than the others, throttling, low utilisation. Worst first; [] when
    nothing can be judged."""
    if not samples:
        return []
    per_gpu = _per_gpu(samples)
    if not per_gpu:
        return []
    spinning = _spinning(samples)
    stuck = {f.evidence["gpu"] for f in spinning}
    findings: list[Finding] = list(spinning)
    # A stuck GPU is not "working": leave it out of the idle, imbalance and clock comparisons.
    busy = _busy_samples(samples, ignore=stuck)
    if not busy:
        utils = [u for g in per_gpu.values() for u in (_num(x.get("utilization_pct")) for x in g) if u is not None]
        if utils and not spinning:
            findings.append(Finding(
                id="gpus-idle", severity="info", area="gpus",
                title=f"no GPU is working (utilisation at most {max(utils):.0f}%)",
                detail="Nothing runs on the GPUs in these samples.", fix="",
                evidence={"samples": len(samples), "max_utilization_pct": max(utils)},
            ))
        return findings

    busy_gpu = {i: rows for i, rows in _per_gpu(busy).items() if i not in stuck}
    util = {i: _mean([_num(g.get("utilization_pct")) for g in rows]) for i, rows in busy_gpu.items()}
    clock = {i: _mean([_num(g.get("sm_clock_mhz")) for g in rows]) for i, rows in busy_gpu.items()}
    known_util = {i: u for i, u in util.items() if u is not None}

    if len(known_util) >= 2:
        idle = sorted(i for i, u in known_util.items() if u <= IDLE_UTILIZATION)
        working = sorted(i for i, u in known_util.items() if u >= BUSY_UTILIZATION)
        if idle and working:
            findings.append(Finding(
                id="gpu-idle", severity="warn", area="gpus",
                title=f"GPU {', '.join(map(str, idle))} idle while GPU {', '.join(map(str, working))} work",
                detail="The job does not use every GPU: one process per GPU is missing, or its GPU is hidden.",
                fix="start one process per GPU (`gpurig launch --nproc N` / `torchrun --nproc-per-node N`) and check "
                    "CUDA_VISIBLE_DEVICES and that each rank calls torch.cuda.set_device(local_rank)",
                evidence={"mean_utilization_pct": known_util, "idle": idle, "working": working},
            ))
        for i, u in sorted(known_util.items()):
            others = [v for j, v in known_util.items() if j != i]
            med = statistics.median(others)
            if u > IDLE_UTILIZATION and med - u >= IMBALANCE_POINTS:
                findings.append(Finding(
                    id="gpu-imbalance", severity="warn", area="gpus",
                    title=f"GPU {i} busy {u:.0f}% while the others average {med:.0f}%",
                    detail="One GPU does less work than the others: its rank waits for data more, or gets less of it.",
                    fix="give every rank the same share (DistributedSampler, drop_last=True) and the same number of "
                        "loader workers; see which rank waits with the step-time breakdown of `gpurig train`",
                    evidence={"gpu": i, "mean_utilization_pct": known_util},
                ))

    known_clock = {i: c for i, c in clock.items() if c is not None and (known_util.get(i) or 0) >= BUSY_UTILIZATION}
    if len(known_clock) >= 2:
        for i, c in sorted(known_clock.items()):
            med = statistics.median(v for j, v in known_clock.items() if j != i)
            if med > 0 and c < SLOW_CLOCK_RATIO * med:
                findings.append(Finding(
                    id="gpu-slow-clocks", severity="warn", area="gpus",
                    title=f"GPU {i} runs slower clocks: {c:.0f} MHz against {med:.0f} MHz on the others",
                    detail="In data-parallel training every GPU waits for the slowest one.",
                    fix=f"look at GPU {i}'s throttle reasons (`nvidia-smi -q -d PERFORMANCE -i {i}`), its cooling "
                        "and its power limit; an application-clock setting (`nvidia-smi -rac`) also lowers clocks",
                    evidence={"gpu": i, "mean_sm_clock_mhz": known_clock},
                ))

    findings.extend(_throttling(samples))

    working_utils = [u for u in known_util.values() if u > IDLE_UTILIZATION]
    if working_utils and statistics.fmean(working_utils) < LOW_UTILIZATION:
        mean_u = statistics.fmean(working_utils)
        findings.append(Finding(
            id="low-utilization", severity="info", area="gpus",
            title=f"low utilisation: working GPUs busy {mean_u:.0f}% of the time on average (below {LOW_UTILIZATION:.0f}%)",
            detail=("The GPUs wait between kernels: for input data, for communication, or for Python to launch the "
                    "next kernel. High memory use with low utilisation usually means the input pipeline."),
            fix="run `gpurig train` (or your loop with its step-time breakdown) to see which; raise loader workers, "
                "a larger batch, or torch.compile",
            evidence={"mean_utilization_pct": known_util},
        ))
    order = {"error": 0, "warn": 1, "info": 2, "ok": 3}
    return sorted(findings, key=lambda f: order[f.severity])
