"""How long the doctor's fact collection takes: collect_facts(frameworks=False) and (True).

    PYTHONPATH=src python bench/doctor_speed.py            # 5 runs of each, medians
    PYTHONPATH=src python bench/doctor_speed.py --runs 3 --json

The fast path (no framework probes) should answer in well under a second; with torch and
TensorFlow installed the whole collection should stay under 5 s on a 2-core machine. Each run is
a fresh child process, as a user's `gpurig doctor` is, so imports and NVML start-up are counted.
Wall times are medians; "CPU time" is the whole process tree's user+system seconds, which shows
what the work costs when other jobs share the cores (wall time then grows, CPU time does not).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
t0 = time.perf_counter()
from gpurig.probe.collect import collect_facts
t1 = time.perf_counter()
facts = collect_facts(frameworks={frameworks}, timeout=60)
t2 = time.perf_counter()
print(f"{{t1 - t0:.4f}} {{t2 - t1:.4f}} {{len(facts.gpus)}}")
"""


def one_run(frameworks: bool) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD.format(frameworks=frameworks)], capture_output=True,
                         text=True, env=env, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the whole process tree (the probe children are waited for, so they count):
    # unlike wall time, this does not grow when other work shares the cores.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(f"collect_facts failed:\n{out.stderr}")
    imp, collect, gpus = out.stdout.split()
    return {"wall_s": wall, "cpu_s": cpu, "import_s": float(imp), "collect_s": float(collect), "gpus": int(gpus)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs of each variant (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = ap.parse_args()
    one_run(False)  # warm the page cache once; the first run after boot is an outlier
    results = {}
    for frameworks in (False, True):
        runs = [one_run(frameworks) for _ in range(args.runs)]
        results["frameworks" if frameworks else "fast"] = {
            "runs": args.runs,
            "median_collect_s": round(statistics.median(r["collect_s"] for r in runs), 3),
            "median_process_wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "max_process_wall_s": round(max(r["wall_s"] for r in runs), 3),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "gpus": runs[0]["gpus"],
        }
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "torch": importlib.util.find_spec("torch") is not None,
        "tensorflow": importlib.util.find_spec("tensorflow") is not None,
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    m = results["machine"]
    print(f"machine: {m['cpus']} CPUs, load {m['load_avg_1m']}, torch={m['torch']}, tensorflow={m['tensorflow']}")
    print(f"{'variant':<12}{'runs':>6}{'collect_facts (s)':>20}{'whole process (s)':>20}{'max (s)':>10}"
          f"{'CPU time (s)':>15}")
    for name in ("fast", "frameworks"):
        r = results[name]
        print(f"{name:<12}{r['runs']:>6}{r['median_collect_s']:>20.3f}{r['median_process_wall_s']:>20.3f}"
              f"{r['max_process_wall_s']:>10.3f}{r['median_cpu_s']:>15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
