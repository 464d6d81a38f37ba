"""How fast `gpurig lint` reads a big script, side by side with Python merely compiling it.

    PYTHONPATH=src python bench/lint_speed.py                 # 1 MB and 14 MB, 3 runs each, medians
    PYTHONPATH=src python bench/lint_speed.py --mb 1 --runs 5 --json

The script is the DDP tutorial template (tests/fixtures/scripts) followed by generated helper
functions and modules, each with a rank check and a print (the worst case for the linter: every
function is relevant to its rules). Each variant is a fresh process, as a user's command is:
  gpurig lint --json FILE                  the whole command, end to end
  python: compile(FILE, PyCF_ONLY_AST)     only building Python's syntax tree, the floor of any
                                           linter that reads the whole tree
Peak memory is the process's maximum resident set. Targets: 1 MB in <= 1 s, 14 MB in <= 10 s
and <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "tests" / "fixtures" / "scripts" / "seed_ddp_template.py"
HELPER = '''
def helper_{i}(x, rank):
    y = x * {i} + 1
    if rank == 0:
        print("helper {i}", y)
    for k in range(3):
        y = y + k
    return y


class Block{i}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear({i} % 64 + 1, 8)

    def forward(self, x):
        return self.fc(x).relu()
'''

PARSE_ONLY = "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec', flags=0x400, dont_inherit=True)"


def make_script(path: Path, mb: float) -> int:
    parts = [TEMPLATE.read_text()]
    size, i, target = len(parts[0]), 0, int(mb * 1024 * 1024)
    while size < target:
        part = HELPER.format(i=i)
        parts.append(part)
        size += len(part)
        i += 1
    path.write_text("\n".join(parts))
    return path.stat().st_size


def one_run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak resident MB) of one fresh process (its own peak, read with wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # lint exits 1 when it has findings
        raise SystemExit(f"{' '.join(cmd)} failed with exit status {proc.returncode}")
    return wall, rusage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, action="append", help="script size in MB (repeatable; default 1 and 14)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each variant (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    results = []
    with tempfile.TemporaryDirectory(prefix="gpurig-lint-speed-") as tmp:
        for mb in args.mb or [1.0, 14.0]:
            script = Path(tmp) / f"big_{mb:g}mb.py"
            size = make_script(script, mb)
            variants = {
                "gpurig lint --json": [sys.executable, "-m", "gpurig", "lint", "--json", str(script)],
                "compile only": [sys.executable, "-c", PARSE_ONLY, str(script)],
            }
            row = {"mb": round(size / 2**20, 2)}
            runs = {name: [one_run(cmd, env) for _ in range(args.runs)] for name, cmd in variants.items()}
            for name, rs in runs.items():
                row[name] = {"median_s": round(statistics.median(r[0] for r in rs), 2),
                             "peak_mb": round(max(r[1] for r in rs))}
            row["lint_over_compile"] = round(row["gpurig lint --json"]["median_s"] / row["compile only"]["median_s"], 2)
            results.append(row)
    doc = {"results": results, "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"machine: {doc['cpus']} CPUs, load {doc['load_avg_1m']}")
    print(f"{'script':>8} {'lint (s)':>9} {'lint peak (MB)':>15} {'compile (s)':>12} {'compile peak (MB)':>18} {'lint / compile':>15}")
    for r in results:
        lint, comp = r["gpurig lint --json"], r["compile only"]
        print(f"{r['mb']:>6} MB {lint['median_s']:>9.2f} {lint['peak_mb']:>15} {comp['median_s']:>12.2f} "
              f"{comp['peak_mb']:>18} {r['lint_over_compile']:>14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
