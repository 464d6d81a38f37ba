"""Keras models of the TensorFlow trainer: the common tutorial MNIST MLP, a small CNN, ResNet-50 (random weights).

Every model ends in a float32 `Dense` that returns logits: under a mixed-precision policy the body
computes in bf16/fp16 and the last layer and the loss stay in float32, as the seeds advise (a
float16 softmax over-/underflows). Build them inside `strategy.scope()`. Runs only in the worker.
"""

from __future__ import annotations

import keras

from gpurig.errors import BadInput

TF_MODELS = ("mlp", "cnn", "resnet50")


def build_model(cfg, image_shape: tuple[int, int, int], num_classes: int) -> keras.Model:
    """The configured network for inputs of `image_shape` (H, W, C) and `num_classes` outputs."""
    name = cfg.model.name
    inputs = keras.Input(image_shape, name="images")
    if name == "mlp":
        # The tutorial model: Flatten, Dense(128, relu), Dropout(0.2), Dense(10); width, depth and
        # dropout come from model.hidden / model.depth / model.dropout.
        x = keras.layers.Flatten()(inputs)
        for i in range(cfg.model.depth):
            x = keras.layers.Dense(cfg.model.hidden, activation="relu", name=f"hidden{i}")(x)
            if cfg.model.dropout > 0:
                x = keras.layers.Dropout(cfg.model.dropout, seed=cfg.seed + i)(x)
    elif name == "cnn":
        w = cfg.model.width
        x = inputs
        for i, ch in enumerate((w, 2 * w)):
            x = keras.layers.Conv2D(ch, 3, padding="same", activation="relu", name=f"conv{i}a")(x)
            x = keras.layers.Conv2D(ch, 3, padding="same", activation="relu", name=f"conv{i}b")(x)
            if x.shape[1] >= 2 and x.shape[2] >= 2:
                x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        if cfg.model.dropout > 0:
            x = keras.layers.Dropout(cfg.model.dropout, seed=cfg.seed)(x)
    elif name == "resnet50":
        h, w_, _ = image_shape
        if h < 32 or w_ < 32:
            raise BadInput(
                f"model.name: resnet50 needs images of at least 32x32, dataset {cfg.data.dataset!r} gives "
                f"{h}x{w_} (set data.image_size=32 or more)"
            )
        body = keras.applications.ResNet50(weights=None, include_top=False, input_shape=image_shape, pooling="avg")
        x = body(inputs)
    else:
        raise BadInput(f"model.name: {name!r} is not available with framework=tf (choose {', '.join(TF_MODELS)})")
    # float32 logits whatever the global policy: the loss and softmax must not run in float16.
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name=name)
