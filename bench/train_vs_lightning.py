"""gpurig's defaults against PyTorch Lightning's Trainer as users write it, side by side in one run.

Both train ResNet-50 on synthetic 224x224 images, batch 256 per GPU: Lightning with
`precision="bf16-mixed"`, `strategy="ddp"` and a synthetic Dataset through a DataLoader (8 workers,
pinned memory; bench/lightning_user_resnet50.py), gpurig with its defaults. Target: gpurig >= 2.5x.

    PYTHONPATH=src python bench/train_vs_lightning.py --counts 1,2 --json-out runs/vs-lightning.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from gpurig.train.config import load_config
from gpurig.train.run import run_training

HERE = Path(__file__).resolve().parent


def run_lightning(n: int, args, out: Path) -> dict:
    path = out / f"lightning-{n}.json"
    cmd = [sys.executable, str(HERE / "lightning_user_resnet50.py"), "--devices", str(n), "--steps", str(args.lightning_steps),
           "--batch-size", str(args.batch), "--image-size", str(args.image_size), "--json-out", str(path)]
    if args.device == "cpu":
        cmd += ["--accelerator", "cpu", "--precision", "32", "--workers", "1", "--arch", "resnet18", "--warmup", "2"]
    log = out / f"lightning-{n}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=args.timeout,
                              env=dict(os.environ, NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE", "0")))
    if proc.returncode or not path.is_file():
        return {"variant": "lightning", "error": f"exit {proc.returncode}; see {log}"}
    return json.loads(path.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,2")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=200, help="gpurig steps (compile is on from 200)")
    ap.add_argument("--lightning-steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--out", default="runs/vs-lightning")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in [int(c) for c in args.counts.split(",")]:
        light = run_lightning(n, args, out)
        sets = [f"train.steps={args.steps}", f"data.batch_size={args.batch}", f"data.image_size={args.image_size}", *args.set]
        if args.device == "cpu":
            sets += ["model.name=resnet18"]
        cfg = load_config(preset_name="resnet50", overrides=sets)
        ours = run_training(cfg, device=args.device, nproc=n, out_dir=out / f"gpurig-{n}", timeout=args.timeout)
        a, b = ours.get("samples_per_s_per_device"), light.get("samples_per_s_per_device")
        rows.append({"nproc": n, "gpurig_per_device": a, "lightning_per_device": b,
                     "ratio": (a / b) if (a and b) else None, "gpurig": {k: ours.get(k) for k in ("step_time", "choices", "mfu")},
                     "lightning": light})
    print(f"\nResNet-50 {args.image_size}x{args.image_size} synthetic, batch {args.batch}/device, {args.device}")
    print(f"{'n':>3} {'gpurig/dev':>11} {'lightning/dev':>14} {'ratio':>6}")
    for r in rows:
        print(f"{r['nproc']:>3} {r['gpurig_per_device'] or 0:>11,.0f} {r['lightning_per_device'] or 0:>14,.0f} {r['ratio'] or 0:>6.2f}"
              + (f"  lightning: {r['lightning'].get('error')}" if r["lightning"].get("error") else ""))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
