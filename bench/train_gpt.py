"""GPT-style decoder (124M: 12 layers, 768 wide, 1024 tokens) training: tokens/s per GPU and model FLOPs utilisation.

MFU = training FLOPs per token (6 x parameters + 12 x layers x width x context) x tokens/s / the
GPU's dense bf16 peak (989 TFLOP/s for an H100/H200 SXM).

    PYTHONPATH=src python bench/train_gpt.py --counts 1,2 --steps 200 --json-out runs/gpt.json
    PYTHONPATH=src python bench/train_gpt.py --set data.batch_size=32 --set train.compile=off
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpurig.train.bench import run_bench_train


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out", default="runs/bench-gpt")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",") if c] or None
    res = run_bench_train(device="cuda", out_dir=args.out, workload="gpt", counts=counts,
                          overrides=[f"train.steps={args.steps}", *args.set])
    print(f"{res['workload_doc']}; steps {args.steps}; overrides {args.set}")
    print(f"{'GPUs':>4} {'tokens/s/GPU':>13} {'scaling':>8} {'MFU':>6} {'step ms':>8} {'peak GiB':>9}")
    for r in res["results"]:
        st = r.get("step_time") or {}
        print(f"{r['nproc']:>4} {r['units_per_s_per_device'] or 0:>13,.0f} {r['scaling_efficiency'] or 0:>8.3f} "
              f"{(r['mfu'] or 0):>6.1%} {(st.get('mean_s') or 0) * 1000:>8.1f} {(r['peak_memory_bytes'] or 0) / 2**30:>9.1f}")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
