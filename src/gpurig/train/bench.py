"""`gpurig bench train`: the same workload at 1, 2, ... N processes; throughput per device and scaling.

    from gpurig.train.bench import run_bench_train
    result = run_bench_train(device="cuda", workload="resnet50", baseline="seed")
    for row in result["results"]: print(row["nproc"], row["samples_per_s_per_device"], row["scaling_efficiency"])

With `baseline="seed"` the common DDP tutorial template (fp32, default DataLoader, batch 32) runs the same model and
image size at each count, side by side, and each row carries `speedup_vs_seed`.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from gpurig.diagnose.clocks import POWER_LIMIT_WHY, waiting_for_host
from gpurig.errors import BadInput
from gpurig.launch.plan import default_run_dir, plan_torchrun, resolve_device
from gpurig.launch.runner import raise_if_interrupted, run_plan
from gpurig.train.config import TrainConfig, load_config
from gpurig.train.run import EventHandler, check_timeout, run_training

# Workloads: a preset plus overrides. CPU workloads are small enough for a laptop.
WORKLOADS: dict[str, dict[str, Any]] = {
    # resnet50 and gpt compile, as `gpurig train` does by default for runs of 2000+ steps: the
    # benchmark measures the steady state of such a run without running it for that long.
    "resnet50": {"preset": "resnet50", "set": ["train.compile=on"],
                 "doc": "ResNet-50, synthetic {size}x{size} images, batch {batch} per GPU"},
    "resnet50-cifar": {"preset": "resnet50-cifar", "set": [],
                       "doc": "ResNet-50, synthetic {size}x{size} images (the tutorials' CIFAR-10 workload), batch {batch} per GPU"},
    "gpt": {"preset": "gpt", "set": ["train.compile=on"],
            "doc": "GPT-style decoder (124M), synthetic tokens, {batch} x {seq_len} per GPU"},
    "cpu-cnn": {"preset": "resnet50-cifar", "doc": "small CNN, synthetic {size}x{size} images, batch {batch} per process (CPU)",
                "set": ["model.name=cnn", "model.width=16", "data.batch_size=32", "data.image_size=32"]},
    "demo": {"preset": "demo", "set": ["eval.enabled=false", "checkpoint.enabled=false"],
             "doc": "the digits MLP of --preset demo"},
}


def describe_workload(workload: str, cfg: TrainConfig) -> str:
    """The workload's one-line description, with whether it ran compiled (overrides can change it)."""
    mode = {"on": ", compiled", "off": ", eager (compile off)"}.get(cfg.train.compile, "")
    if cfg.train.strategy == "fsdp":
        mode = ", FSDP" + (mode or ", eager")  # compile auto is off under FSDP (choose_compile)
    return WORKLOADS[workload]["doc"].format(batch=cfg.data.batch_size, seq_len=cfg.data.seq_len,
                                                size=cfg.data.image_size) + mode


def counts_up_to(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    out.append(n)
    return out


SCALING_OK = 0.90  # per-device rate at N / rate at 1 below this deserves an explanation
SCALING_TARGET = 0.98  # below this, a slower clock than the 1-GPU run's is worth naming (info)
CLOCK_SLOWER = 0.99  # the slowest GPU's mean SM clock under this share of the 1-GPU run's
NVLINK_AWAKE = 0.9  # NVLink out of low power in at least this share of readings: awake through the steps


def scaling_findings(rows: list[dict[str, Any]], device: str, cores: int | None = None) -> list[dict[str, Any]]:
    """One finding per process count whose scaling efficiency is below SCALING_OK, with the likely why.

    Judged from the step-time split of that run: exposed communication, data wait, or (neither)
    compute that itself got slower per device, which on the CPU means processes sharing cores.
    """
    out = []
    cores = cores or os.cpu_count() or 1
    for r in rows:
        eff = r.get("scaling_efficiency")
        if eff is None or eff >= SCALING_OK or r["nproc"] == 1:
            continue
        st = r.get("step_time") or {}
        comm = st.get("comm_exposed_fraction") or 0.0
        data = st.get("data_wait_fraction") or 0.0
        if comm >= 0.15:
            why = (f"exposed communication is {comm:.0%} of the step: the gradient all-reduce is not hidden behind "
                   "the backward pass (bigger batch per device, larger DDP buckets, faster links)")
        elif data >= 0.15:
            why = f"data wait is {data:.0%} of the step: the input pipeline does not keep up with {r['nproc']} processes"
        elif device == "cpu":
            why = (f"each process computes slower than one process alone: {r['nproc']} processes share {cores} CPU "
                   "cores (and whatever else runs on this machine), so CPU scaling measures core contention, "
                   "not data parallelism")
        elif host := waiting_for_host(r.get("gpu_clock") or {}):
            why = host + "; with more processes each waits longer. A profile (torch.profiler) shows where the host's time goes"
        else:
            why = ("each GPU computes slower than one GPU alone (clocks, power or thermal limits, NCCL kernels "
                   "sharing the SMs, or another job on the GPUs): run `gpurig monitor` during the benchmark")
        out.append({"nproc": r["nproc"], "scaling_efficiency": eff, "severity": "warn",
                    "title": f"scaling efficiency {eff:.3f} at {r['nproc']} processes (below {SCALING_OK:.2f})",
                    "detail": why})
    return out + clock_findings(rows)


def clock_ratios(rows: list[dict[str, Any]]) -> None:
    """Set each row's `clock_ratio`: its slowest GPU's mean SM clock over the first (1-process) row's."""
    base = ((rows[0].get("gpu_clock") or {}).get("slowest_sm_clock_mhz") if rows and rows[0]["nproc"] == 1 else None)
    for r in rows:
        slow = (r.get("gpu_clock") or {}).get("slowest_sm_clock_mhz")
        r["clock_ratio"] = slow / base if (slow and base) else None


def clock_findings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scaling short of SCALING_TARGET where the slowest GPU ran at a lower clock than the 1-GPU run:
    ranks wait for each other every step, so that GPU sets the pace."""
    out = []
    one = (rows[0].get("gpu_clock") or {}) if rows and rows[0]["nproc"] == 1 else {}
    for r in rows[1:]:
        eff, ratio, c = r.get("scaling_efficiency"), r.get("clock_ratio"), r.get("gpu_clock") or {}
        if eff is None or ratio is None or eff >= SCALING_TARGET or ratio >= CLOCK_SLOWER:
            continue
        capped = c.get("slowest_power_capped_fraction")
        limit = f" {c['power_limit_w']:.0f} W" if c.get("power_limit_w") else ""
        at_cap = (f", at its{limit} power limit {capped:.0%} of the time" if capped else "")
        gpu = c.get("slowest_gpu")
        gpu_one = one.get("slowest_gpu")
        detail = (f"GPU {gpu if gpu is not None else '?'} averaged {c['slowest_sm_clock_mhz']:,.0f} MHz over the "
                  f"timed steps{at_cap}; the 1-GPU run (GPU {gpu_one if gpu_one is not None else '?'}) held "
                  f"{one['slowest_sm_clock_mhz']:,.0f} MHz. The ranks wait for each other every step, so the slowest "
                  f"GPU sets the pace: its clock accounts for up to {1 - ratio:.1%} of the rate (not every kernel "
                  f"slows with the clock), of the {1 - eff:.1%} lost.")
        comm = (r.get("step_time") or {}).get("comm_exposed_fraction")
        if comm:
            detail += f" Exposed communication, calibrated apart, takes {comm:.1%} of the step."
        if capped:
            detail += f" {POWER_LIMIT_WHY}"
            detail += nvlink_awake_note(c, one)
            detail += " Better cooling lowers the power a chip needs for a clock."
        out.append({"nproc": r["nproc"], "scaling_efficiency": eff, "severity": "info", "id": "scaling-clock-paced",
                    "title": f"scaling {eff:.3f} at {r['nproc']} GPUs: the slowest GPU ran at {ratio:.1%} of the "
                             "1-GPU run's clock",
                    "detail": detail, "clock_ratio": ratio})
    return out


def nvlink_awake_note(run: dict[str, Any], one: dict[str, Any]) -> str:
    """A sentence for a run whose NVLinks never slept (the `gpu_clock` of the N-GPU and 1-GPU runs):
    links woken more often than their idle threshold stay at full power, and at a power limit
    that power is the SMs'. Empty where the links slept or did not report their state."""
    awake = run.get("nvlink_awake_fraction")
    if awake is None or awake < NVLINK_AWAKE:
        return ""
    threshold = run.get("nvlink_low_power_threshold_ms")
    after = f" after {threshold:g} ms without traffic" if threshold else " when idle"
    asleep = one.get("nvlink_awake_fraction")
    alone = f"; in the 1-GPU run they were asleep {1 - asleep:.0%} of the time" if asleep is not None else ""
    return (f" NVLink stayed at full power through {awake:.0%} of the timed steps: the links drop to low power only"
            f"{after}, and the gradients cross them every step{alone}. Awake links draw power of their own "
            "(about 20 W per GPU on an H200, measured with no other load), and at the limit it comes out of the "
            "SMs' clock.")


def workload_config(workload: str, device: str, short: bool, overrides: list[str] | None = None) -> TrainConfig:
    if workload not in WORKLOADS:
        raise BadInput(f"--workload: unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    w = WORKLOADS[workload]
    sets = list(w["set"]) + ["checkpoint.enabled=false", "eval.enabled=false"]
    if short:
        # A quick look (gpurig check): no minute of compilation for a few seconds of training.
        sets += ["train.steps=50" if device == "cuda" else "train.steps=40", "train.compile=off"]
    cfg = load_config(preset_name=w["preset"], overrides=sets + list(overrides or []))
    if (cfg.train.strategy == "fsdp" and "train.compile=on" in w["set"]
            and not any(o.replace(" ", "").startswith("train.compile=") for o in overrides or [])):
        # The workload compiles because `gpurig train` would for a long run; under FSDP it would not.
        cfg.train.compile = "auto"
    return cfg


def run_seed_baseline(cfg: TrainConfig, device: str, nproc: int, run_dir: Path, steps: int,
                      batch_size: int | None = None, timeout: float | None = None) -> dict[str, Any]:
    """The DDP tutorial template (gpurig.train.seed_baseline) on the same model input size."""
    size = cfg.data.image_size or 224
    args = ["-m", "gpurig.train.seed_baseline", "--run-dir", str(run_dir), "--steps", str(steps),
            "--warmup", str(min(10, max(2, steps // 5))), "--batch-size", str(batch_size or 32),
            "--image-size", str(size), "--num-classes", str(cfg.data.num_classes)]
    env = {"GPURIG_BASELINE_DEVICE": device}
    plan = plan_torchrun(args, nproc, device, run_dir=str(run_dir), env=env)
    res = run_plan(plan, timeout=timeout)
    raise_if_interrupted(res)
    p = run_dir / "summary.json"
    if not p.is_file():
        return {"variant": "seed-template", "world_size": nproc, "error": f"exit {res.returncode}; log {res.log_path}"}
    return json.loads(p.read_text())


def run_bench_train(
    device: str = "auto",
    nproc: str | int = "auto",
    out_dir: str | None = None,
    short: bool = False,
    facts: Any = None,
    workload: str | None = None,
    overrides: list[str] | None = None,
    baseline: str | None = None,
    baseline_batch_size: int | None = None,
    counts: list[int] | None = None,
    timeout: float | None = None,
    on_event: EventHandler | None = None,
    collective_timeout: float | None = None,
) -> dict[str, Any]:
    """Run the workload at each process count; return rows with per-device rate and scaling efficiency.

    timeout: wall-clock seconds allowed per run; collective_timeout: seconds one collective may wait
    for the other ranks before the run is stopped as hung (default: the trainer's 600).
    """
    check_timeout(timeout, "--max-time")
    check_timeout(collective_timeout, "--timeout")
    choice = resolve_device(device, nproc)
    if baseline not in (None, "seed"):
        raise BadInput(f"--baseline: only 'seed' is known, got {baseline!r}")
    workload = workload or ("resnet50" if choice.device == "cuda" else "cpu-cnn")
    if workload in ("resnet50", "resnet50-cifar", "gpt") and choice.device != "cuda" and not short:
        raise BadInput(f"--workload {workload}: too heavy for the CPU; use cpu-cnn or demo")
    cfg = workload_config(workload, choice.device, short, overrides)
    base = Path(out_dir or default_run_dir("bench-train-"))
    counts = counts or counts_up_to(choice.nproc)
    if max(counts) > choice.nproc:
        raise BadInput(f"--nproc: {max(counts)} processes asked for, {choice.nproc} available")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {base}: cannot create the directory ({exc.strerror or exc})") from None
    env: dict[str, str] = {}
    if collective_timeout is not None:
        env["GPURIG_COLLECTIVE_TIMEOUT"] = f"{collective_timeout:g}"
    if choice.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # The same threads per process at every count: otherwise 1 process gets all the cores' OpenMP
        # threads (which spin against each other on a busy machine) and 2 processes get one each, and
        # "scaling" measures thread contention instead of data parallelism.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(counts)))
    rows: list[dict[str, Any]] = []
    last_summary: dict[str, Any] | None = None
    one = None
    for n in counts:
        if on_event:
            on_event("bench", {"nproc": n, "variant": "gpurig"})
        summary = run_training(copy.deepcopy(cfg), device=choice.device, nproc=n, out_dir=base / f"gpurig-{n}",
                               timeout=timeout, on_event=on_event, env=env)
        last_summary = summary
        per = summary.get("samples_per_s_per_device")
        if n == counts[0]:
            one = per
        row = {
            "nproc": n, "variant": "gpurig", "samples_per_s": summary.get("samples_per_s"),
            "samples_per_s_per_device": per, "units_per_s_per_device": summary.get("units_per_s_per_device"),
            "unit": summary.get("unit"), "mfu": summary.get("mfu"),
            "scaling_efficiency": (per / one) if (per and one and counts[0] == 1) else None,
            "step_time": summary.get("step_time"), "peak_memory_bytes": summary.get("peak_memory_bytes"),
            "gpu_clock": summary.get("gpu_clock"),
            "choices": {c["name"]: c["value"] for c in summary.get("choices", [])},
        }
        if baseline == "seed":
            if on_event:
                on_event("bench", {"nproc": n, "variant": "seed-template"})
            steps = 30 if short else 60
            seed = run_seed_baseline(cfg, choice.device, n, base / f"seed-{n}", steps, baseline_batch_size, timeout)
            row["seed_samples_per_s_per_device"] = seed.get("samples_per_s_per_device")
            row["seed"] = seed
            if per and seed.get("samples_per_s_per_device"):
                row["speedup_vs_seed"] = per / seed["samples_per_s_per_device"]
        rows.append(row)
    clock_ratios(rows)
    result = {
        "scaling_findings": scaling_findings(rows, choice.device),
        "workload": workload, "workload_doc": describe_workload(workload, cfg), "device": choice.device,
        "device_reason": choice.reason, "unit": (last_summary or {}).get("unit"),
        "batch_size_per_device": cfg.data.batch_size, "steps": cfg.train.steps, "results": rows,
        "summary": last_summary, "out_dir": str(base),
    }
    base.mkdir(parents=True, exist_ok=True)
    (base / "bench-train.json").write_text(json.dumps(result, indent=2, default=str))
    return result
