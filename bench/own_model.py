"""Your own model through `gpurig train --model/--data`, against the same model and data in PyTorch
Lightning and in Accelerate, side by side in one run on one GPU.

    python bench/own_model.py --model convnext_tiny --steps 2000 --out /tmp/own
    python bench/own_model.py --model resnet50 --steps 300 --variants gpurig,builtin --out /tmp/own

The model is a torchvision network the user brings (`usermodel.py:build`), the data a user
`Dataset` of random 224x224 images held in host memory (`userdata.py:build`), both written into
--out. Each variant trains the same model on the same data with the same batch size and optimizer
(SGD, momentum 0.9) for --steps steps in a fresh process:

- gpurig:     `gpurig train --model usermodel.py:build --data userdata.py:build` and nothing else
              that changes speed (every choice left to gpurig);
- builtin:    the same network as gpurig's built-in model (resnet50 only), for the "as fast as a
              built-in" comparison;
- lightning:  a LightningModule, `Trainer(precision="bf16-mixed")`, a DataLoader with 8 workers,
              pinned memory and persistent workers, as Lightning's docs teach;
- accelerate: `Accelerator(mixed_precision="bf16")` and the same DataLoader, as Accelerate's docs teach.

Throughput is images/s over the steps after the first `--warmup` (gpurig: its own timed steps,
which leave out warm-up and compilation the same way). Prints one table and the ratios; writes
results.json into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

USER_MODEL = """
import torchvision


def build(num_classes):
    return getattr(torchvision.models, {model!r})(weights=None, num_classes=num_classes)
"""

USER_DATA = """
import torch
from torch.utils.data import Dataset


class RandomImages(Dataset):
    def __init__(self, n, classes, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn((n, 3, 224, 224), generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def build():
    return RandomImages({samples}, {classes})
"""

COMMON = """
import json, sys, time
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
sys.path.insert(0, {here!r})
from usermodel import build
from userdata import build as data

STEPS, WARM, B, CLASSES = {steps}, {warmup}, {batch}, {classes}
torch.backends.cudnn.benchmark = True
train = data()
loader = DataLoader(train, batch_size=B, shuffle=True, num_workers=8, pin_memory=True, drop_last=True,
                    persistent_workers=True)
marks = {{}}


def mark(step):
    if step in (WARM, STEPS):
        torch.cuda.synchronize()
        marks[step] = time.perf_counter()


def report():
    rate = (STEPS - WARM) * B / (marks[STEPS] - marks[WARM])
    print("RESULT " + json.dumps({{"images_per_s": rate}}), flush=True)
"""

LIGHTNING = COMMON + """
try:
    import lightning as L
except ImportError:
    import pytorch_lightning as L


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = build(CLASSES)
        self.done = 0

    def training_step(self, batch, i):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def on_train_batch_end(self, outputs, batch, i):
        self.done += 1
        mark(self.done)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=STEPS, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Lit(), loader)
report()
"""

ACCELERATE = COMMON + """
from accelerate import Accelerator

acc = Accelerator(mixed_precision="bf16")
model = build(CLASSES)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model, opt, dl = acc.prepare(model, opt, loader)
model.train()
done = 0
while done < STEPS:
    for x, y in dl:
        loss = F.cross_entropy(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        done += 1
        mark(done)
        if done == STEPS:
            break
report()
"""


def _run(argv: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=log.parent)
        out, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, code = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout:.0f} s", 124
    log.write_text(out)
    return code, out, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="convnext_tiny", help="a torchvision model name (default convnext_tiny)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50, help="steps left out of Lightning's and Accelerate's timing")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--variants", default="gpurig,lightning,accelerate")
    ap.add_argument("--timeout", type=float, default=580)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu to try the gpurig variants here")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "usermodel.py").write_text(USER_MODEL.format(model=args.model))
    (out / "userdata.py").write_text(USER_DATA.format(samples=args.samples, classes=args.classes))
    fill = {"here": str(out), "steps": args.steps, "warmup": args.warmup, "batch": args.batch, "classes": args.classes}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    results: dict[str, dict] = {}
    common = ["--device", args.device, "--nproc", "1", "--json", "--set", f"train.steps={args.steps}",
              "--set", f"data.batch_size={args.batch}", "--set", "eval.enabled=false",
              "--set", "checkpoint.enabled=false"]
    for variant in args.variants.split(","):
        if variant == "gpurig":
            argv = [sys.executable, "-m", "gpurig", "train", "--model", "usermodel.py:build", "--data",
                    "userdata.py:build", "--out", str(out / "run-gpurig"), *common]
        elif variant == "builtin":
            argv = [sys.executable, "-m", "gpurig", "train", "--set", f"model.name={args.model}", "--set",
                    "data.dataset=synthetic-image", "--set", f"data.num_classes={args.classes}",
                    "--set", f"data.samples={args.samples}", "--out", str(out / "run-builtin"), *common]
        elif variant in ("lightning", "accelerate"):
            script = out / f"{variant}_run.py"
            script.write_text(textwrap.dedent((LIGHTNING if variant == "lightning" else ACCELERATE).format(**fill)))
            argv = [sys.executable, str(script)]
        else:
            raise SystemExit(f"--variants: unknown variant {variant!r}")
        code, text, wall = _run(argv, env, out / f"{variant}.log", args.timeout)
        row: dict = {"returncode": code, "wall_s": round(wall, 1)}
        if code == 0 and variant in ("gpurig", "builtin"):
            s = json.loads((out / f"run-{variant}" / "summary.json").read_text())
            row["images_per_s"] = s["samples_per_s"]
            row["choices"] = {c["name"]: c["value"] for c in s.get("choices", [])}
        elif code == 0:
            line = next(x for x in text.splitlines() if x.startswith("RESULT "))
            row.update(json.loads(line[len("RESULT "):]))
        else:
            row["error"] = text[-1500:]
        results[variant] = row
        (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
        print(f"{variant:>10}  rc {code}  {row.get('images_per_s', float('nan')):9.1f} images/s  ({wall:.0f} s)",
              flush=True)
    rates = {k: v["images_per_s"] for k, v in results.items() if "images_per_s" in v}
    if "gpurig" in rates:
        for other in ("lightning", "accelerate", "builtin"):
            if other in rates:
                print(f"gpurig / {other}: {rates['gpurig'] / rates[other]:.3f}")
        rivals = [rates[k] for k in ("lightning", "accelerate") if k in rates]
        if rivals:
            print(f"gpurig / the faster of Lightning and Accelerate: {rates['gpurig'] / max(rivals):.3f}")
    return 0 if all(v["returncode"] == 0 for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
