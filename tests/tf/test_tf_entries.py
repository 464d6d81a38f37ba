"""Your own Keras model and tf.data samples under MirroredStrategy (`--framework tf --model --data`):
trained on two logical CPU devices, and refused with exit 2 naming the flag when wrong. TensorFlow
runs only in child processes, as in the other TensorFlow tests."""

from __future__ import annotations

import textwrap

import pytest
from tfrun import train

pytestmark = [pytest.mark.tf, pytest.mark.slow]

CODE = '''
import keras
import numpy as np
import tensorflow as tf


def build_model(input_shape, num_classes, width=32):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(width, activation="relu"),
                             keras.layers.Dense(num_classes, dtype="float32")])


def build_softmax_model(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes, activation="softmax", dtype="float32")])


def _blobs(n, seed):
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 4, n)
    x = (rng.randn(n, 16) * 0.3 + np.eye(16)[y] * 2).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y))


def build_data():
    return _blobs(512, 0), _blobs(128, 1).batch(32)   # a batched test set is unbatched by gpurig


def not_a_model(input_shape, num_classes):
    return "a string"


def numpy_data():
    return np.zeros((4, 2))
'''


@pytest.fixture()
def code(tmp_path):
    path = tmp_path / "kerascode.py"
    path.write_text(textwrap.dedent(CODE))
    return path


def test_a_keras_model_on_your_tf_data_trains_under_mirrored_strategy(tmp_path, code):
    proc, s = train(tmp_path / "run", ["framework=tf", f"model.entry={code}:build_model",
                                       f"data.entry={code}:build_data", "train.epochs=4", "data.batch_size=16",
                                       "optim.lr=0.05"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert s["world_size"] == 2 and s["strategy"] == "mirrored" and s["accuracy"] >= 0.9
    assert s["eval_samples"] == 128 and s["model"].endswith("kerascode.py:build_model")


def test_a_model_that_ends_in_a_softmax_gets_a_matching_loss(tmp_path, code):
    proc, s = train(tmp_path / "run", ["framework=tf", f"model.entry={code}:build_softmax_model",
                                       f"data.entry={code}:build_data", "train.epochs=4", "data.batch_size=16",
                                       "optim.lr=0.05"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert s["accuracy"] >= 0.9 and s["final_loss"] < 1.0  # cross-entropy on probabilities, not on logits


@pytest.mark.parametrize("overrides, words", [
    (["model.entry={code}:not_a_model", "data.entry={code}:build_data"], "returned a str, not a keras.Model"),
    (["data.entry={code}:numpy_data"], "returned a ndarray, not a tf.data.Dataset"),
    (["model.entry={code}:nothing"], "has no 'nothing'"),
])
def test_wrong_entries_exit_2_naming_the_flag(tmp_path, code, overrides, words):
    proc, s = train(tmp_path / "run", ["framework=tf", *[o.format(code=code) for o in overrides]])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert words in proc.stderr and ("--model (model.entry)" in proc.stderr or "--data (data.entry)" in proc.stderr)
    assert not (tmp_path / "run").exists()
