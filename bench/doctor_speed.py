"""How long `gpurig doctor` takes, side by side with `python -m torch.utils.collect_env`, in one run.

    PYTHONPATH=src python bench/doctor_speed.py            # 5 runs of each, medians
    PYTHONPATH=src python bench/doctor_speed.py --runs 3 --json

Variants, each a whole command in a fresh process as a user types it:
  doctor (first run)   an empty probe cache: PyTorch and TensorFlow are imported in child processes
  doctor (cached)      the probe cache holds this machine's answers: nothing is imported
  doctor --fast        never imports a framework (cached answers, else versions from their files)
  collect_env          PyTorch's own environment report, the tool users run today
The variants take turns (one run of each, then the next round), so a change in load hits all of
them alike. Wall times are medians; the ratio is collect_env's median over each variant's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    if out.returncode not in (0, 1):  # the doctor exits 1 when it has an error finding: still a full run
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs of each variant (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    cold_cache = tempfile.mkdtemp(prefix="gpurig-bench-cold-")
    warm_cache = tempfile.mkdtemp(prefix="gpurig-bench-warm-")
    doctor = [sys.executable, "-m", "gpurig", "doctor", "--json"]
    variants: dict[str, tuple[list[str], dict[str, str]]] = {
        "doctor (first run)": (doctor, {**env, "GPURIG_CACHE_DIR": cold_cache}),
        "doctor (cached)": (doctor, {**env, "GPURIG_CACHE_DIR": warm_cache}),
        "doctor --fast": ([*doctor, "--fast"], {**env, "GPURIG_CACHE_DIR": warm_cache}),
    }
    has_torch = importlib.util.find_spec("torch") is not None
    if has_torch:
        variants["collect_env"] = ([sys.executable, "-m", "torch.utils.collect_env"], env)
    try:
        _timed(*variants["doctor (cached)"])  # fills the warm cache (and the page cache)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, (cmd, venv) in variants.items():
                if name == "doctor (first run)":
                    shutil.rmtree(cold_cache, ignore_errors=True)
                times[name].append(_timed(cmd, venv))
    finally:
        shutil.rmtree(cold_cache, ignore_errors=True)
        shutil.rmtree(warm_cache, ignore_errors=True)
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians.get("collect_env")
    results = {
        "variants": {name: {"runs": args.runs, "median_s": round(m, 3), "max_s": round(max(times[name]), 3),
                            "collect_env_over_this": round(base / m, 2) if base else None}
                     for name, m in medians.items()},
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), "torch": has_torch,
                    "tensorflow": importlib.util.find_spec("tensorflow") is not None},
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    m = results["machine"]
    print(f"machine: {m['cpus']} CPUs, load {m['load_avg_1m']}, torch={m['torch']}, tensorflow={m['tensorflow']}")
    print(f"{'command':<22}{'runs':>6}{'median (s)':>12}{'max (s)':>10}{'collect_env / this':>20}")
    for name, r in results["variants"].items():
        ratio = f"{r['collect_env_over_this']:.2f}x" if r["collect_env_over_this"] else "n/a"
        print(f"{name:<22}{r['runs']:>6}{r['median_s']:>12.3f}{r['max_s']:>10.3f}{ratio:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
