"""ResNet-50 training throughput with gpurig's defaults at 1..N GPUs, optionally against the seeds' template.

    PYTHONPATH=src python bench/train_resnet50.py --json-out runs/r50.json                 # 224x224, batch 256
    PYTHONPATH=src python bench/train_resnet50.py --workload resnet50-cifar --baseline seed # 32x32, batch 512

Targets (docs/benchmarks.md): >= 6,500 images/s per H200 at 224x224, scaling >= 0.98 on 2 GPUs;
>= 15,000 images/s per H200 at 32x32.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpurig.commands.bench_train import clock_cell
from gpurig.train.bench import run_bench_train


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="resnet50")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--counts", default="", help="comma-separated process counts, default 1,2,..,N")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--set", action="append", default=[], help="config overrides, e.g. train.compile=off")
    ap.add_argument("--baseline", default=None, choices=[None, "seed"])
    ap.add_argument("--baseline-batch", type=int, default=None)
    ap.add_argument("--out", default="runs/bench-r50")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",") if c] or None

    def on_event(kind, p):
        if kind in ("bench", "choice"):
            print(kind, json.dumps(p), flush=True)
        elif kind == "line" and ("Error" in p["text"] or "error" in p["text"]):
            print("  |", p["text"], flush=True)

    res = run_bench_train(device=args.device, out_dir=args.out, workload=args.workload, counts=counts,
                          overrides=[f"train.steps={args.steps}", *args.set], baseline=args.baseline,
                          baseline_batch_size=args.baseline_batch, on_event=on_event)
    print(f"\n{res['workload_doc']}; steps {args.steps}; overrides {args.set}")
    seed_cols = f" {'seed/GPU':>9} {'x seed':>7}" if args.baseline else ""
    print(f"{'GPUs':>4} {'samples/s/GPU':>14} {'scaling':>8} {'data':>6} {'comm':>6}{seed_cols}  slowest GPU clock")
    for r in res["results"]:
        st = r.get("step_time") or {}
        f = (lambda v: f"{v:.1%}" if isinstance(v, float) else "-")  # noqa: E731
        seed = (f" {r.get('seed_samples_per_s_per_device') or 0:>9,.0f} {r.get('speedup_vs_seed') or 0:>7.2f}"
                if args.baseline else "")
        eff = f"{r['scaling_efficiency']:>8.3f}" if r.get("scaling_efficiency") else f"{'-':>8}"
        print(f"{r['nproc']:>4} {r['samples_per_s_per_device'] or 0:>14,.0f} {eff} "
              f"{f(st.get('data_wait_fraction')):>6} {f(st.get('comm_exposed_fraction')):>6}{seed}  "
              f"{clock_cell(r.get('gpu_clock'))}")
    for finding in res.get("scaling_findings") or []:
        print(f"{finding['title']}: {finding['detail']}")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
