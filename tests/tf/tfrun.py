"""Helpers of the TensorFlow tests: run `run_tf_training` in a child process, compare checkpoints.

TensorFlow is only ever imported in child processes: importing it here would change this
process's environment (and the suite fails a test that does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = """
import json, sys
from gpurig.errors import BadInput, ProblemFound
from gpurig.train.config import load_config
from gpurig.train.tf import run_tf_training
args = json.loads(sys.argv[1])
try:
    s = run_tf_training(load_config(preset_name=args.get("preset"), overrides=args["overrides"]), args["out"],
                        **args.get("kwargs", {}))
except (BadInput, ProblemFound) as exc:
    print("gpurig: error:", exc, file=sys.stderr)
    sys.exit(exc.exit_code)
print("SUMMARY " + json.dumps(s))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _argv(out: Path, overrides: list[str], preset: str | None = None, **kwargs) -> list[str]:
    return [sys.executable, "-c", RUNNER, json.dumps({"out": str(out), "overrides": overrides, "preset": preset,
                                                      "kwargs": kwargs})]


def train(out: Path, overrides: list[str], preset: str | None = None, timeout: float = 240, **kwargs):
    proc = subprocess.run(_argv(out, overrides, preset, **kwargs), capture_output=True, text=True,
                          timeout=timeout, env=_env())
    summary = None
    for line in proc.stdout.splitlines():
        if line.startswith("SUMMARY "):
            summary = json.loads(line[len("SUMMARY "):])
    return proc, summary


COMPARE = """
import json, sys
import numpy as np
import tensorflow as tf
a, b = sys.argv[1], sys.argv[2]
ra, rb = tf.train.load_checkpoint(a), tf.train.load_checkpoint(b)
names = [n for n, _ in tf.train.list_variables(a) if not n.startswith(("_CHECKPOINTABLE", "save_counter"))]
out = {}
for n in names:
    x, y = ra.get_tensor(n), rb.get_tensor(n)
    diff = float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0
    scale = float(np.max(np.abs(x))) if x.size else 0.0
    out[n] = [diff, scale]
print(json.dumps({"tensors": out, "names_b": sorted(n for n, _ in tf.train.list_variables(b)
                                                    if not n.startswith(("_CHECKPOINTABLE", "save_counter")))}))
"""


def compare_checkpoints(a: str, b: str) -> dict:
    """{tensor name: (max |a - b|, max |a|)} for every saved tensor but the save counter.

    Run in a child process: importing TensorFlow here would change this process's environment.
    """
    proc = subprocess.run([sys.executable, "-c", COMPARE, a, b], capture_output=True, text=True, timeout=120,
                          env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(data["tensors"]) == data["names_b"]
    return {k: tuple(v) for k, v in data["tensors"].items()}
