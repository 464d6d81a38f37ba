"""`wrap_model`: the one place a PyTorch model gets its distributed wrapper and its compilation.

The order is fixed and matters:

1. **Compile mode for DDP first, as a decision only.** When the model will be compiled and DDP
   will wrap it, `apply_compile_ddp` sets how dynamo treats DDP's all-reduce hooks *before*
   `DDP(...)` is built, because DDP reads that setting when it is constructed.
2. **FSDP or DDP next: the wrapper that owns the gradients.** FSDP shards every block, then the
   root (`fully_shard`), so parameters, gradients and optimizer state are split over the ranks.
   DDP wraps the whole model with buckets viewed in place (`gradient_as_bucket_view`), a static
   graph when nothing skips parameters, and buffers synchronised only when they need to be.
3. **`torch.compile` last, around the wrapper.** Compiling the DDP module lets dynamo split the
   graph at bucket boundaries so the all-reduce keeps overlapping with the backward pass;
   compiling inside DDP would hide the buckets from it.

The optimizer is built afterwards on the raw model's parameters (FSDP has replaced them by sharded
ones in place), so it sees exactly what the wrapper updates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from gpurig.errors import BadInput
from gpurig.train.config import TrainConfig
from gpurig.train.torch.base import Context
from gpurig.train.torch.choices import (
    Choice,
    apply_compile_ddp,
    choose_compile,
    compiled_autograd_backward,
    ddp_buffer_sync,
    fsdp_fits_note,
    only_batchnorm_statistics,
)
from gpurig.train.torch.models import shard_units


@dataclass
class Wrapped:
    dist_model: nn.Module  # what synchronises the gradients: the DDP module, the FSDP root, or the model
    step_model: nn.Module  # what a training step calls: `dist_model`, compiled when compile is on
    backward_ctx: Callable[[], contextlib.AbstractContextManager]  # entered around every backward
    fsdp: bool  # parameters are sharded (checkpoints and evaluation gather them)
    buffers_from_rank0_at_eval: bool  # DDP skips per-forward buffer copies: copy rank 0's before evaluation


def wrap_model(model: nn.Module, cfg: TrainConfig, ctx: Context, total_steps: int,
               choose: Callable[[Choice], Choice], breaks: dict | None = None) -> Wrapped:
    """Wrap `model` (already on its device) for this run and say each decision through `choose`.
    `breaks`: what the parent's probe found tracing your own model (see `choose_compile`)."""
    dev = ctx.device
    accum = cfg.train.grad_accum
    fsdp = cfg.train.strategy == "fsdp"
    buffers_from_rank0_at_eval = False

    # 1. How compile will treat DDP: decided before DDP() reads it.
    compile_on = choose(choose_compile(cfg, dev, total_steps, breaks)).value
    ddp_mode = None
    if compile_on and ctx.world > 1 and not fsdp:
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        ddp_mode = choose(apply_compile_ddp(cfg, grad_bytes, ctx.world)).value

    # 2. The wrapper that owns the gradients.
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for unit in shard_units(model):
            fully_shard(unit)
        fully_shard(model)
        dist_model = model
        choose(Choice("strategy", "fsdp", f"fully_shard on {len(shard_units(model))} blocks + root: "
                      "parameters, gradients and optimizer state sharded" + fsdp_fits_note(cfg, model, dev)))
    elif ctx.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        # Every built-in model uses all its parameters each step, so the graph is static; DDP's
        # static_graph does not support no_sync on the first steps, hence off with accumulation.
        if cfg.train.static_graph == "on" and accum > 1:
            raise BadInput("train.static_graph: 'on' cannot be combined with train.grad_accum > 1 "
                           "(accumulation uses no_sync); use auto")
        static = cfg.train.static_graph == "on" or (cfg.train.static_graph == "auto" and accum == 1)
        per_forward = (cfg.train.buffer_sync == "forward"
                       or (cfg.train.buffer_sync == "auto" and not only_batchnorm_statistics(model)))
        buffers_from_rank0_at_eval = not per_forward
        dist_model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                         gradient_as_bucket_view=True, static_graph=static,
                         bucket_cap_mb=cfg.train.ddp_bucket_mb, **ddp_buffer_sync(per_forward))
        if any(True for _ in model.buffers()):
            if cfg.train.buffer_sync != "auto":
                why = "asked for in the config"
            elif per_forward:
                why = "buffers other than BatchNorm statistics: DDP copies rank 0's before every forward"
            else:
                why = ("BatchNorm running statistics are unused while training: rank 0's are copied to every "
                       "rank before evaluation, not before every forward (0.35 ms per ResNet-50 step on 2 "
                       "H200s); checkpoints hold rank 0's, as before")
            choose(Choice("buffer_sync", "forward" if per_forward else "eval", why))
        choose(Choice("strategy", "ddp", "DDP, gradient_as_bucket_view (no gradient copy into buckets)"
                      + (", static_graph" if static else "")
                      + f", {cfg.train.ddp_bucket_mb} MiB buckets"
                      + (", no_sync for accumulation" if accum > 1 else "")))
    else:
        dist_model = model
        choose(Choice("strategy", "single", "one process: no gradient synchronisation"))

    # 3. Compile around the wrapper.
    step_model = torch.compile(dist_model) if compile_on else dist_model
    backward_ctx = compiled_autograd_backward if ddp_mode == "python_reducer" else contextlib.nullcontext
    return Wrapped(dist_model, step_model, backward_ctx, fsdp, buffers_from_rank0_at_eval)
