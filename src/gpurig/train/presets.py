"""The embedded configs (`gpurig train --preset NAME`): plain dicts over `TrainConfig`'s defaults,
checked like any TOML file when loaded (`config.preset`, `config.load_config`)."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # scikit-learn's digits (1,797 8x8 images, ships with the package), the common tutorial MNIST model
    # (Flatten, Linear 128 + ReLU, Dropout 0.2, Linear 10). Two CPU ranks reach ~98% test accuracy
    # in a few seconds of training.
    "demo": {
        "model": {"name": "mlp", "hidden": 128, "depth": 1, "dropout": 0.2},
        "data": {"dataset": "digits", "batch_size": 32},
        "optim": {"name": "adamw", "lr": 0.003, "weight_decay": 0.0001},
        "schedule": {"name": "cosine", "warmup_steps": 10},
        "train": {"epochs": 20},
        "eval": {"every_epochs": 5},
    },
    # The benchmark workload: ResNet-50 on synthetic 224x224 images, batch 256 per GPU.
    "resnet50": {
        "model": {"name": "resnet50"},
        "data": {"dataset": "synthetic-image", "batch_size": 256, "image_size": 224, "num_classes": 1000},
        "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0001},
        "schedule": {"name": "constant"},
        "train": {"steps": 200},
        "eval": {"enabled": False},
        "checkpoint": {"enabled": False},
    },
    # The tutorials' workload size: ResNet-50 on CIFAR-10-sized 32x32 images.
    "resnet50-cifar": {
        "model": {"name": "resnet50"},
        "data": {"dataset": "synthetic-image", "batch_size": 512, "image_size": 32, "num_classes": 10},
        "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0005},
        "schedule": {"name": "constant"},
        "train": {"steps": 200},
        "eval": {"enabled": False},
        "checkpoint": {"enabled": False},
    },
    # A GPT-style decoder on synthetic tokens (tokens/s and model FLOPs utilisation).
    "gpt": {
        "model": {"name": "gpt", "layers": 12, "heads": 12, "dim": 768, "dropout": 0.0},
        "data": {"dataset": "synthetic-token", "batch_size": 16, "seq_len": 1024, "vocab_size": 50304},
        "optim": {"name": "adamw", "lr": 0.0006, "weight_decay": 0.1, "beta2": 0.95, "clip_grad_norm": 1.0},
        "schedule": {"name": "cosine", "warmup_steps": 20, "min_lr_ratio": 0.1},
        "train": {"steps": 200},
        "eval": {"enabled": False},
        "checkpoint": {"enabled": False},
    },
}
