"""The mixed-precision pieces the GPU path uses, run on the CPU in a TensorFlow child process:
the body computes in float16/bfloat16, the output layer in float32, float16 gets loss scaling."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tfrun import _env

pytestmark = pytest.mark.tf

SNIPPET = r"""
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras, numpy as np, tensorflow as tf
from gpurig.train.config import load_config
from gpurig.train.tf.choices import needs_loss_scaling
from gpurig.train.tf.models import build_model
from gpurig.train.tf.optim import make_optimizer
out = {}
for policy in ("mixed_float16", "mixed_bfloat16", "float32"):
    keras.mixed_precision.set_global_policy(policy)
    cfg = load_config(overrides=["framework=tf", "model.name=cnn", "model.width=4", "optim.name=sgd", "optim.lr=0.1"])
    model = build_model(cfg, (8, 8, 1), 10)
    opt = make_optimizer(keras, cfg, 10, needs_loss_scaling(policy))
    x = tf.constant(np.random.RandomState(0).rand(4, 8, 8, 1).astype("float32"))
    y = tf.constant([1, 2, 3, 4], dtype=tf.int64)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    before = [v.numpy().copy() for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
        scaled = opt.scale_loss(loss) if needs_loss_scaling(policy) else loss
    grads = tape.gradient(scaled, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    moved = max(float(np.max(np.abs(a - v.numpy()))) for a, v in zip(before, model.trainable_variables))
    out[policy] = {
        "hidden_compute": model.get_layer("conv0a").compute_dtype,
        "hidden_variables": model.get_layer("conv0a").kernel.dtype,
        "logits": logits.dtype.name,
        "loss_scale_optimizer": type(opt).__name__ == "LossScaleOptimizer",
        "loss_finite": bool(np.isfinite(float(loss))),
        "weights_moved": moved,
    }
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_policies_keep_a_float32_output_and_scale_float16_losses():
    proc = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=240, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert r["mixed_float16"]["hidden_compute"] == "float16" and r["mixed_bfloat16"]["hidden_compute"] == "bfloat16"
    for policy in r:
        assert r[policy]["hidden_variables"] == "float32"  # variables stay float32 under mixed policies
        assert r[policy]["logits"] == "float32"
        assert r[policy]["loss_finite"] and r[policy]["weights_moved"] > 0
    assert r["mixed_float16"]["loss_scale_optimizer"]
    assert not r["mixed_bfloat16"]["loss_scale_optimizer"] and not r["float32"]["loss_scale_optimizer"]
