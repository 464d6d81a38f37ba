"""Your own Keras model and tf.data samples in `gpurig train --framework tf`.

- A **model entry** returns a `keras.Model`, built by gpurig inside the strategy's scope (so its
  variables are mirrored). It may take the `[model]` table's keys, `num_classes` and `input_shape`
  (one sample's shape) by name. Its output is class scores: logits, or probabilities when its last
  layer ends in a softmax (gpurig sees which and sets the loss to match).
- A **data entry** returns a `tf.data.Dataset` of `(input, target)` samples, or a `(train, test)`
  pair (test may be None). A batched dataset is unbatched: gpurig makes the global batch and gives
  each replica its slice, as for its own datasets. It is read once into memory (up to 4 GiB).
- `train.loss_entry` is PyTorch's only: the loss is sparse categorical cross-entropy.

`probe_entries` checks them in a child process that sees no GPU before the worker starts.
"""

from __future__ import annotations

import sys
from typing import Any

from gpurig.errors import BadInput
from gpurig.train.entries import _where, call_entry, child_main, load_entry, model_arguments, probe_in_child

MATERIALISE_LIMIT = 4 << 30


def _is_tf_dataset(obj: Any) -> bool:
    import tensorflow as tf

    return isinstance(obj, tf.data.Dataset)


def _arrays(ds: Any, what: str) -> tuple[Any, Any]:
    """A dataset of (input, target) samples as two stacked numpy arrays."""
    import numpy as np

    spec = ds.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise BadInput(f"{_where('data.entry')}: the {what} dataset's elements must be (input, target) pairs; "
                       f"they are {spec}")
    if spec[0].shape.rank and spec[0].shape[0] is None:
        ds = ds.unbatch()  # batched by the user: gpurig batches it itself
    xs, ys, size = [], [], 0
    for x, y in ds.as_numpy_iterator():
        xs.append(x)
        ys.append(y)
        size += x.nbytes + np.asarray(y).nbytes
        if size > MATERIALISE_LIMIT:
            raise BadInput(f"{_where('data.entry')}: the {what} dataset is larger than {MATERIALISE_LIMIT >> 30} GiB "
                           "in memory; gpurig reads your dataset whole (use a smaller one, or your own script)")
    if not xs:
        raise BadInput(f"{_where('data.entry')}: the {what} dataset is empty")
    return np.stack(xs), np.asarray(ys)


def user_source(cfg: Any) -> Any:
    """The data entry's datasets as the `DataSource` the TensorFlow trainer takes."""
    import numpy as np

    from gpurig.train.tf.sources import DataSource, Split

    fn, root = load_entry(cfg.data.entry, "data.entry")
    out = call_entry(fn, "data.entry", root, {"seed": cfg.seed})
    if isinstance(out, tuple) and len(out) == 2 and _is_tf_dataset(out[0]) and (out[1] is None or _is_tf_dataset(out[1])):
        train, test = out
    else:
        train, test = out, None
    if not _is_tf_dataset(train):
        raise BadInput(f"{_where('data.entry')}: {fn.__name__}() returned a {type(train).__name__}, not a "
                       "tf.data.Dataset of (input, target) or a (train, test) pair of them")
    x, y = _arrays(train, "training")
    held = _arrays(test, "test") if (test is not None and cfg.eval.enabled) else None
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise BadInput(f"{_where('data.entry')}: targets must be integer class labels (one per sample) under "
                       f"framework=tf; they are {y.dtype} of shape {y.shape[1:]}")
    return DataSource(cfg.data.entry, Split(x, y.astype(np.int64)),
                      Split(held[0], held[1].astype(np.int64)) if held else None,
                      tuple(x.shape[1:]), int(y.max()) + 1, augment=False, as_given=True)


def build_user_model(cfg: Any, input_shape: tuple[int, ...], num_classes: int) -> Any:
    """The model entry's Keras model (call inside `strategy.scope()`)."""
    import keras

    fn, root = load_entry(cfg.model.entry, "model.entry")
    model = call_entry(fn, "model.entry", root,
                       {**model_arguments(cfg, num_classes), "input_shape": tuple(input_shape)})
    if not isinstance(model, keras.Model):
        raise BadInput(f"{_where('model.entry')}: {fn.__name__}() returned a {type(model).__name__}, not a "
                       "keras.Model (with --framework tf the model is a Keras model)")
    return model


def gives_probabilities(model: Any) -> bool:
    """The model's last layer ends in a softmax: its outputs are probabilities, not logits."""
    import keras

    last = model.layers[-1] if getattr(model, "layers", None) else None
    act = getattr(last, "activation", None)
    return act is keras.activations.softmax or getattr(act, "__name__", "") == "softmax" or (
        type(last).__name__ == "Softmax")


def probe(cfg: Any) -> dict[str, Any]:
    """In this process (a child without GPUs): build the data and the model, run one sample through."""
    info: dict[str, Any] = {}
    src = None
    if cfg.data.entry:
        src = user_source(cfg)
        info.update(samples=len(src.train), test_samples=len(src.test) if src.test else None,
                    sample_shape=list(src.image_shape), num_classes=src.num_classes)
    if cfg.model.entry:
        if src is None:
            from gpurig.train.tf.sources import load_source

            src = load_source(cfg, samples_default=64)
        model = build_user_model(cfg, src.image_shape, src.num_classes)
        x = src.train.images[:1] if src.train.images is not None else None
        if x is not None:
            try:
                out = model(x.astype("float32") if x.dtype == "uint8" else x, training=False)
            except Exception as exc:
                raise BadInput(f"{_where('model.entry')}: the model cannot take a sample of the data (input "
                               f"{tuple(x.shape[1:])} {x.dtype}, batch of 1): {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:300]}") from None
            shape = tuple(out.shape)
            if len(shape) != 2 or shape[1] < src.num_classes:
                raise BadInput(f"{_where('model.entry')}: the model must give class scores (batch, classes) for "
                               f"{src.num_classes} classes; it gives {shape} for a batch of 1")
            info["output_shape"] = list(shape[1:])
        info["params"] = int(model.count_params())
        info["probabilities"] = gives_probabilities(model)
    return info


def probe_entries(cfg: Any) -> dict[str, Any]:
    return probe_in_child("gpurig.train.tf.entries", cfg, {})


if __name__ == "__main__":
    sys.exit(child_main(probe))
