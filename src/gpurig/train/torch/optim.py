"""The optimizer and the learning-rate schedule of `TrainConfig` (fused kernels where asked)."""

from __future__ import annotations

import math
from typing import Any

import torch

from gpurig.train.config import TrainConfig


def lr_factor(cfg: TrainConfig, total_steps: int):
    s = cfg.schedule

    def f(step: int) -> float:
        if s.warmup_steps and step < s.warmup_steps:
            return (step + 1) / s.warmup_steps
        span = max(1, total_steps - s.warmup_steps)
        progress = min(1.0, (step - s.warmup_steps) / span)
        if s.name == "cosine":
            return s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        if s.name == "linear":
            return 1 - (1 - s.min_lr_ratio) * progress
        if s.name == "step":
            return s.gamma ** ((step - s.warmup_steps) // s.step_size)
        return 1.0

    return f


def build_optimizer(cfg: TrainConfig, params, fused: bool) -> torch.optim.Optimizer:
    o = cfg.optim
    kw: dict[str, Any] = {"fused": True} if fused else {}
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, nesterov=o.nesterov and o.momentum > 0,
                               weight_decay=o.weight_decay, **kw)
    cls = torch.optim.AdamW if o.name == "adamw" else torch.optim.Adam
    return cls(params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, **kw)
