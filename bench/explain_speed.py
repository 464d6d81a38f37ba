"""How fast `gpurig explain` answers: loading the index of resolved threads, and a 30 MB log.

    PYTHONPATH=src python bench/explain_speed.py            # 5 runs of each, medians
    PYTHONPATH=src python bench/explain_speed.py --mb 30 --runs 3 --json

Targets: the index (every shipped thread read, normalised and ranked by BM25) loaded in at most
0.3 s; a 30 MB log explained in at most 3 s, end to end (`gpurig explain FILE`, a fresh process:
imports, reading, the catalogue, the index). The big log is built from the kind of text that
makes logs big: NCCL_DEBUG=INFO start-up of 8 ranks, per-step progress lines and warnings
repeated by every rank, with the failure (a rank's CUDA error and the launcher's table) at the end.
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

LOAD = """
import time
t0 = time.perf_counter()
from gpurig.diagnose.threads import default_index
index = default_index()
t1 = time.perf_counter()
print(f"{t1 - t0:.4f} {sum(1 for c in index.cases if not getattr(c, 'entry', ''))} {len(index.cases)}")
"""

FAILURE = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/home/user/train.py", line 212, in <module>
[rank3]:     loss = model(batch).loss
[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered
[rank3]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
[rank3]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1
W1201 10:00:00.000000 4242 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4245 closing signal SIGTERM
E1201 10:00:01.000000 4242 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 3 (pid: 4246) of binary: /usr/bin/python3
"""


def big_log(path: Path, mb: float) -> None:
    lines = []
    for rank in range(8):
        lines += [f"host-a:{4200 + rank}:{4300 + rank} [{rank}] NCCL INFO Channel {c:02d}/24 : {rank} -> {(rank + 1) % 8} via P2P/CUMEM/read"
                  for c in range(24)]
        lines.append(f"host-a:{4200 + rank}:{4300 + rank} [{rank}] NCCL INFO comm 0x5581 rank {rank} nranks 8 cudaDev {rank} - Init COMPLETE")
    chunk = "\n".join(lines) + "\n"
    step = 0
    target = int(mb * 1024 * 1024)
    with open(path, "w") as f:
        f.write(chunk)
        size = len(chunk)
        while size < target:
            block = []
            for rank in range(8):
                block.append(f"[rank{rank}]: step {step} loss {1.0 / (step + 1):.4f} lr 3.0e-04 tokens/s 123456 mem 61.2 GiB")
                if step % 50 == 0:
                    block.append(f"[rank{rank}]: /usr/lib/python3/site-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs have requires_grad=True. Gradients will be None")
            text = "\n".join(block) + "\n"
            f.write(text)
            size += len(text)
            step += 1
        f.write(FAILURE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs of each measurement (default 5)")
    ap.add_argument("--mb", type=float, default=30.0, help="size of the big log in MB (default 30)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    args = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    loads, threads, cases = [], 0, 0
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, env=env, timeout=120, check=True)
        t, threads, cases = out.stdout.split()
        loads.append(float(t))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp, "big.log")
        big_log(log, args.mb)
        size = log.stat().st_size
        walls, first = [], None
        for _ in range(args.runs):
            start = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "gpurig", "explain", "--json", str(log)], capture_output=True,
                                 text=True, env=env, timeout=300)
            walls.append(time.perf_counter() - start)
            if out.returncode not in (0, 1):
                raise SystemExit(f"gpurig explain failed:\n{out.stderr}")
            first = (json.loads(out.stdout)["matches"] or [{}])[0].get("id")
    result = {"index_load_s": statistics.median(loads), "threads": int(threads), "index_cases": int(cases), "log_bytes": size,
              "explain_big_log_s": statistics.median(walls), "first_answer": first, "runs": args.runs}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"index of {result['threads']} threads ({result['index_cases']} cases with the catalogue's examples) loaded in {result['index_load_s']:.3f} s (median of {args.runs}; target <= 0.3 s)")
        print(f"{size / 1e6:.1f} MB log explained in {result['explain_big_log_s']:.2f} s end to end (target <= 3 s); first answer: {first}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
