"""The TensorFlow training worker: one process per machine, MirroredStrategy over its devices.

Started by `gpurig train --framework tf` (through `gpurig.train.tf.run_tf_training`), never by hand:

    python -m gpurig.train.tf.worker --plan RUN_DIR/plan.json

The plan file is the parent's `TrainPlan`: the `TrainConfig` and the decisions it made (device,
replicas, precision policy, cross-device ops) in its `tf` block. With a TF_CONFIG in the environment this process is one
worker of a MultiWorkerMirroredStrategy job. Worker 0 (the chief) alone prints, writes TensorBoard
logs, checkpoints and `summary.json`; the other workers save checkpoints to a scratch directory
(every worker must take part in a save) and write `worker-<i>.json`.

Exit status: 0 trained (or stopped by SIGTERM / train.max_seconds after saving a checkpoint),
1 training failed (non-finite loss), 2 bad input found here (a data file, a model/data mismatch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput
from gpurig.launch.tfjob import configure_devices
from gpurig.train.tf.runner import worker_job
from gpurig.train.tf.stop import Stop

# Quiet TensorFlow's C++ start-up chatter; set before the import that reads it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def train(job: dict[str, Any]) -> int:
    import tensorflow as tf

    configure_devices(tf, job)  # first thing: before any op touches a device (Keras included)

    from gpurig.train.tf.trainer import Trainer

    trainer = Trainer(job)
    failed = trainer.run()
    if failed:
        return failed
    result = trainer.summary()
    if trainer.chief:
        _write_json(trainer.out / "tf_result.json", result)
    else:
        _write_json(trainer.out / f"worker-{trainer.worker_index}.json", result)
        shutil.rmtree(trainer.ckpt_dir, ignore_errors=True)  # scratch: only the chief's checkpoints are kept
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpurig.train.tf.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True, help="the plan the parent wrote (plan.json)")
    args = parser.parse_args(argv)
    Stop.install()
    job = worker_job(json.loads(Path(args.plan).read_text()))
    try:
        return train(job)
    except BadInput as exc:
        print(f"gpurig: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
