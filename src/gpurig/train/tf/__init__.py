"""The TensorFlow trainer: MirroredStrategy on one machine, MultiWorkerMirroredStrategy on many.

`plan_tf(config, out_dir)` decides (device, precision policy, cross-device ops, cluster) and returns
the `TrainPlan`; `run_tf_training(config, out_dir)` writes it as `plan.json`, runs one worker process
(`python -m gpurig.train.tf.worker`) and returns the summary;
`tf_preflight(facts)` refuses early when TensorFlow is missing or blind to the GPUs. Importing
this package never imports TensorFlow: only the worker does.
"""

from __future__ import annotations

from gpurig.launch.tfjob import tf_preflight
from gpurig.train.tf.runner import plan_tf, plan_tf_job, run_tf_training

__all__ = ["plan_tf", "plan_tf_job", "run_tf_training", "tf_preflight"]
