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

from gpurig.commands.monitor import VERDICT_WINDOW, sample_table, verdict_lines
from gpurig.diagnose.verdicts import sample_verdicts
from gpurig.monitor.recorder import Recorder
from gpurig.monitor.sampler import FakeBackend, MonitorUnavailable, NvmlBackend, Sampler


def measure(backend_name: str, gpus: int, seconds: float, interval: float, render: bool) -> dict:
    backend = FakeBackend(gpus=gpus) if backend_name == "fake" else NvmlBackend()
    sampler = Sampler(backend)
    sampler.open()
    window: collections.deque = collections.deque(maxlen=VERDICT_WINDOW)
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    per_sample_cpu = []
    with tempfile.TemporaryDirectory() as tmp, Recorder(Path(tmp) / "cost.jsonl") as recorder:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        next_at = time.monotonic()
        while time.perf_counter() - wall0 < seconds:
            c0 = time.process_time()
            sample = sampler.sample().to_dict()
            recorder.write(sample)
            window.append(sample)
            findings = sample_verdicts(list(window))
            if render:
                console.print(sample_table(sample, findings), verdict_lines(findings))
                console.file.seek(0)
                console.file.truncate()
            per_sample_cpu.append(time.process_time() - c0)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    sampler.close()
    per_sample_cpu.sort()
    return {
        "backend": backend_name, "gpus": backend.gpu_count() if backend_name == "fake" else gpus_seen(sample),
        "interval_s": interval, "render": render, "samples": len(per_sample_cpu),
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 4),
        "core_fraction_pct": round(100 * cpu / wall, 3),
        "cpu_ms_per_sample_median": round(1000 * per_sample_cpu[len(per_sample_cpu) // 2], 3),
        "cpu_ms_per_sample_max": round(1000 * per_sample_cpu[-1], 3),
        "notes": getattr(backend, "notes", []),
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
    result["within_target"] = result["core_fraction_pct"] < 1.0
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
