"""Real files against synthetic data: an ImageFolder of generated ImageNet-like JPEGs, same model.

Generates `--images` JPEGs (500x375, quality 90, ~75-100 KiB, in 100 class directories), then trains
ResNet-50 at 224x224 on them (gpurig's default: batched nvJPEG decoding and random-resized-crop on
the GPU, DataLoader workers only read bytes) and on synthetic images, with the same settings, and
prints the ratio. Target: the ImageFolder run at >= 0.9x the synthetic rate.

    PYTHONPATH=src python bench/train_imagefolder.py --counts 1 --json-out runs/imagefolder.json
    PYTHONPATH=src python bench/train_imagefolder.py --set data.decode=cpu     # the CPU-decode comparison
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from gpurig.train.config import load_config
from gpurig.train.run import run_training

CLASSES = 100


def _write(args: tuple[str, int, int, int]) -> int:
    from PIL import Image

    root, start, count, seed = args
    rng = np.random.default_rng(seed)
    total = 0
    for i in range(start, start + count):
        low = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)  # smooth content plus sensor-like noise
        img = Image.fromarray(low).resize((500, 375), Image.BICUBIC)
        arr = np.asarray(img).astype(np.int16) + rng.normal(0, 12, (375, 500, 3)).astype(np.int16)
        buf = io.BytesIO()
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
        path = Path(root) / f"class{i % CLASSES:03d}" / f"img{i:07d}.jpg"
        path.write_bytes(buf.getvalue())
        total += len(buf.getvalue())
    return total


def generate(root: Path, n: int) -> float:
    """Write n JPEGs under root/train/<class>/; returns the mean size in KiB. Reuses a complete set."""
    train = root / "train"
    marker = root / f".complete-{n}"
    if marker.is_file():
        return float(marker.read_text())
    for c in range(CLASSES):
        (train / f"class{c:03d}").mkdir(parents=True, exist_ok=True)
    workers = max(1, min(32, os.cpu_count() or 1))
    chunk = -(-n // workers)
    jobs = [(str(train), s, min(chunk, n - s), s) for s in range(0, n, chunk)]
    with ProcessPoolExecutor(workers) as ex:
        total = sum(ex.map(_write, jobs))
    kib = total / n / 1024
    marker.write_text(f"{kib:.1f}")
    return kib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--images", type=int, default=0, help="default: 64 batches per process of the largest count "
                    "(an epoch boundary refills the input pipeline; keep --steps below one epoch)")
    ap.add_argument("--data-dir", default="runs/imagefolder-data")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=500)
    ap.add_argument("--out", default="runs/bench-imagefolder")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    n_images = args.images or args.batch * 64 * max(counts)
    kib = generate(Path(args.data_dir), n_images)
    print(f"{n_images} JPEGs, mean {kib:.0f} KiB, in {args.data_dir}/train", flush=True)
    common = [f"train.steps={args.steps}", f"data.batch_size={args.batch}", "data.image_size=224",
              f"model.name={args.model}", "checkpoint.enabled=false", "eval.enabled=false", *args.set]
    rows = []
    for n in counts:
        res = {}
        for variant, sets in (("synthetic", ["data.dataset=synthetic-image", "data.num_classes=100"]),
                              ("imagefolder", ["data.dataset=imagefolder", f"data.path={args.data_dir}"])):
            cfg = load_config(preset_name="resnet50", overrides=common + sets)
            s = run_training(cfg, device=args.device, nproc=n, out_dir=Path(args.out) / f"{variant}-{n}", timeout=args.timeout)
            res[variant] = s
            print(f"{variant:>11} x{n}: {s['samples_per_s_per_device']:,.0f} images/s per device, step time "
                  f"{json.dumps(s['step_time'])}", flush=True)
        a, b = res["imagefolder"]["samples_per_s_per_device"], res["synthetic"]["samples_per_s_per_device"]
        rows.append({"nproc": n, "imagefolder_per_device": a, "synthetic_per_device": b, "ratio": a / b,
                     "imagefolder_choices": res["imagefolder"]["choices"], "imagefolder_step_time": res["imagefolder"]["step_time"],
                     "verdict": (res["imagefolder"]["verdicts"] or [{}])[0].get("title")})
        print(f"ratio imagefolder / synthetic at {n}: {a / b:.3f}", flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"images": n_images, "mean_kib": kib, "rows": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
