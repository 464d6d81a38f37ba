"""The TensorFlow optimizer and learning-rate schedule of a `TrainConfig`, as `train/torch/optim.py`
builds them for PyTorch. Runs only in the TensorFlow worker process."""

from __future__ import annotations

import math


def make_schedule(keras, cfg, total_steps: int):
    """The learning rate of `TrainConfig.schedule` as a function of the optimizer step."""
    import tensorflow as tf

    sch = cfg.schedule
    peak = cfg.optim.lr

    class Schedule(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warm = float(sch.warmup_steps)
            if sch.name == "constant":
                lr = tf.constant(peak, tf.float32)
            elif sch.name == "step":
                lr = peak * tf.pow(float(sch.gamma), tf.floor((step - warm) / float(sch.step_size)))
            else:
                span = max(1.0, float(total_steps) - warm)
                frac = tf.clip_by_value((step - warm) / span, 0.0, 1.0)
                low = peak * sch.min_lr_ratio
                if sch.name == "cosine":
                    lr = low + (peak - low) * 0.5 * (1.0 + tf.cos(math.pi * frac))
                else:
                    lr = peak - (peak - low) * frac
            if sch.warmup_steps:
                lr = tf.where(step < warm, peak * (step + 1.0) / warm, lr)
            return lr

        def get_config(self):
            return {}

    return Schedule()


def make_optimizer(keras, cfg, total_steps: int, loss_scaling: bool):
    o = cfg.optim
    lr = make_schedule(keras, cfg, total_steps)
    clip = {"global_clipnorm": o.clip_grad_norm} if o.clip_grad_norm > 0 else {}
    if o.name == "sgd":
        opt = keras.optimizers.SGD(lr, momentum=o.momentum, nesterov=o.nesterov,
                                   weight_decay=o.weight_decay or None, **clip)
    elif o.name == "adam":
        opt = keras.optimizers.Adam(lr, beta_1=o.beta1, beta_2=o.beta2, weight_decay=o.weight_decay or None, **clip)
    else:
        opt = keras.optimizers.AdamW(lr, beta_1=o.beta1, beta_2=o.beta2, weight_decay=o.weight_decay, **clip)
    if loss_scaling:
        # float16 gradients underflow: scale the loss up, unscale before the update, skip steps with inf/nan.
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt
