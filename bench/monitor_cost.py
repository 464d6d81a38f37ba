"""What `gpurig monitor` costs the machine it watches: CPU time per sample, as a share of one core.

Runs the monitor's own loop work (read every GPU, turn counters into rates, append a JSON line to a
recording, judge the last samples, and optionally render the live table into a buffer) on a fixed
cadence for a while, and divides the process's CPU time by the wall time.

    PYTHONPATH=src python bench/monitor_cost.py --backend nvml --seconds 30       # a real GPU machine
    PYTHONPATH=src python bench/monitor_cost.py --backend fake --gpus 8 --seconds 10

The target is under 1% of a core at the default 1 s interval.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from gpurig.diagnose.verdicts import sample_verdicts
from gpurig.monitor.recorder import Recorder
from gpurig.monitor.sampler import FakeBackend, MonitorUnavailable, NvmlBackend, Sampler
from gpurig.monitor.watch import VERDICT_WINDOW
from gpurig.report.monitor_view import sample_table, verdict_lines


def measure(backend_name: str, gpus: int, seconds: float, interval: float, render: bool) -> dict:
    backend = FakeBackend(gpus=gpus) if backend_name == "fake" else NvmlBackend(time_calls=True)
    sampler = Sampler(backend)
    sampler.open()
    window: collections.deque = collections.deque(maxlen=VERDICT_WINDOW)
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    phases = {"sample": 0.0, "record": 0.0, "judge": 0.0, "render": 0.0}
    per_sample_cpu = []
    sample: dict = {}
    with tempfile.TemporaryDirectory() as tmp, Recorder(Path(tmp) / "cost.jsonl") as recorder:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        next_at = time.monotonic()
        while time.perf_counter() - wall0 < seconds:
            c0 = time.process_time()
            sample = sampler.sample().to_dict()
            c1 = time.process_time()
            recorder.write(sample)
            c2 = time.process_time()
            window.append(sample)
            findings = sample_verdicts(list(window))
            c3 = time.process_time()
            if render:
                console.print(sample_table(sample, findings), verdict_lines(findings))
                console.file.seek(0)
                console.file.truncate()
            c4 = time.process_time()
            for name, dt in zip(phases, (c1 - c0, c2 - c1, c3 - c2, c4 - c3), strict=True):
                phases[name] += dt
            per_sample_cpu.append(c4 - c0)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    sampler.close()
    per_sample_cpu.sort()
    n = len(per_sample_cpu)
    return {
        "backend": backend_name, "gpus": gpus_seen(sample),
        "interval_s": interval, "render": render, "samples": n,
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 4),
        "core_fraction_pct": round(100 * cpu / wall, 3),
        # what each use of the monitor costs, as a share of one core at this interval
        "core_fraction_pct_record_only": round(100 * (phases["sample"] + phases["record"]) / wall, 3),
        "core_fraction_pct_live_view": round(100 * sum(phases.values()) / wall, 3),
        "cpu_ms_per_sample_by_phase": {k: round(1000 * v / n, 3) for k, v in phases.items()},
        "cpu_ms_per_sample_median": round(1000 * per_sample_cpu[n // 2], 3),
        "cpu_ms_per_sample_max": round(1000 * per_sample_cpu[-1], 3),
        "notes": sorted(set(getattr(backend, "notes", []))),
        # NVML: CPU ms per sample spent in each query, all GPUs together
        "nvml_cpu_ms_per_sample": {k: round(1000 * v / n, 3) for k, v in
                                   sorted((getattr(backend, "call_cpu_s", None) or {}).items(), key=lambda kv: -kv[1])},
    }


def gpus_seen(sample: dict) -> int:
    return len(sample["gpus"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("nvml", "fake"), default="nvml")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the fake backend (default 2)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--no-render", action="store_true", help="leave out rendering the live table")
    args = ap.parse_args()
    try:
        result = measure(args.backend, args.gpus, args.seconds, args.interval, render=not args.no_render)
    except MonitorUnavailable as exc:
        print(f"monitor_cost: no GPU to sample ({exc}); try --backend fake", file=sys.stderr)
        return 1
    result["target_pct"] = 1.0
    result["sampling_within_target"] = result["core_fraction_pct_record_only"] < 1.0
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
