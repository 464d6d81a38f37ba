"""The PyTorch trainer's decisions, as functions of the config, the device and the model.

Each `choose_*` returns a `Choice` (the value and the reason), which the worker prints and keeps in
summary.json; the rest say what a choice depends on (does the model hold only BatchNorm
statistics, does the fused optimizer run on FSDP's DTensor parameters, will the model fit one
GPU). The trainer (`train/torch/trainer.py`) applies them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gpurig.errors import BadInput
from gpurig.train.config import TrainConfig
from gpurig.train.torch.models import CONV_MODELS

# Up to this many bytes on the wire per step (gradients x 2(n-1)/n for a ring all-reduce), running
# the whole all-reduce after the backward costs less than splitting the compiled graph to overlap it:
# about 1 ms at NVLink rates, against the splits' layout copies and lost fusion. Measured on 2 H200s
# with ResNet-50 (102 MB of fp32 gradients), plain PyTorch side by side: one graph 0.966 of one
# GPU's rate, split at 25 MiB buckets 0.954 (docs/benchmarks.md).
ONE_GRAPH_MAX_WIRE_BYTES = 256 * 2**20

FSDP_FITS_SHARE = 0.25  # training state under this share of one GPU's memory: DDP fits with room for activations


FUSED_OPS = {"sgd": "_fused_sgd_", "adam": "_fused_adam_", "adamw": "_fused_adamw_"}

# Compiling ResNet-50 takes about a minute and saves ~30% of each step (4,685 -> 6,641 images/s on
# an H200): repaid after ~3,000 steps. Below this many steps the run stays eager.
COMPILE_MIN_STEPS = 2000


@dataclass
class Choice:
    name: str
    value: Any
    reason: str


def choose_precision(cfg: TrainConfig, device: torch.device) -> Choice:
    want = cfg.train.precision
    if device.type != "cuda":
        if want in ("auto", "fp32"):
            return Choice("precision", "fp32", "CPU: float32 (autocast on the CPU is slower for these models)")
        return Choice("precision", want, f"asked for {want} on the CPU")
    major, minor = torch.cuda.get_device_capability(device)
    cc = f"{major}.{minor}"
    if want == "auto":
        if major >= 8:
            return Choice("precision", "bf16", f"compute capability {cc} >= 8.0: bf16 autocast (no loss scaling needed)")
        if major == 7:
            return Choice("precision", "fp16", f"compute capability {cc}: fp16 autocast with a gradient scaler (no bf16)")
        return Choice("precision", "fp32", f"compute capability {cc} has no fast half precision")
    if want == "bf16" and major < 8:
        raise BadInput(f"train.precision: bf16 needs compute capability 8.0 or newer; this GPU is {cc} (use fp16)")
    return Choice("precision", want, "asked for in the config")


def choose_channels_last(cfg: TrainConfig, device: torch.device, user_conv: bool | None = None) -> Choice:
    """`user_conv`: for your own model (model.entry), whether it holds a Conv2d."""
    conv = cfg.model.name in CONV_MODELS if user_conv is None else user_conv
    if cfg.train.channels_last == "auto":
        on = conv and device.type == "cuda"
        why = ("conv net on CUDA: NHWC lets cuDNN use tensor-core kernels without transposes" if on else
               ("no Conv2d in the model" if user_conv is not None else "not a conv net") if not conv
               else "CPU: NCHW is as fast")
    else:
        on, why = cfg.train.channels_last == "on", "asked for in the config"
    if on and cfg.train.strategy == "fsdp":
        why += ("; the input batches only: fully_shard needs contiguous parameters, and a convolution with an "
                "NHWC input still runs NHWC")
    return Choice("channels_last", on, why)


def only_batchnorm_statistics(model: nn.Module) -> bool:
    """True when every buffer is a BatchNorm running statistic: unused in training mode, so ranks
    need to agree on them only before evaluation (and rank 0's are the ones checkpointed)."""
    norm = (nn.modules.batchnorm._NormBase,)
    for module in model.modules():
        own = list(module.buffers(recurse=False))
        if own and not isinstance(module, norm):
            return False
    return True


def ddp_buffer_sync(per_forward: bool) -> dict[str, bool]:
    """DDP's keyword for syncing buffers before each forward (torch 2.14 renamed broadcast_buffers)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel as DDP

    name = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
            else "broadcast_buffers")
    return {name: per_forward}


def apply_compile_ddp(cfg: TrainConfig, grad_bytes: int, world: int) -> Choice:
    """Set dynamo's DDP mode for this process (it is a global of torch._dynamo) and say why.

    `grad_bytes`: the model's trainable parameters in bytes (its gradients); `world`: processes.
    """
    import torch._dynamo

    mode = cfg.train.compile_ddp
    reasons = {
        "ddp_optimizer": "graph split at DDP bucket boundaries: each all-reduce overlaps the rest of the backward",
        "no_optimization": "one graph: the all-reduce runs after the whole backward (no overlap)",
        "python_reducer": "compiled autograd traces DDP's reducer into the backward graph",
    }
    if mode == "auto":
        wire = grad_bytes * 2 * (world - 1) / max(1, world)
        mb = grad_bytes / 1e6
        if wire <= ONE_GRAPH_MAX_WIRE_BYTES:
            mode = "no_optimization"
            why = (reasons[mode] + f"; {mb:,.0f} MB of gradients all-reduce in about a millisecond, less than "
                   "splitting the graph costs (ResNet-50 on 2 H200s: 0.966 of one GPU's rate in one graph, "
                   "0.954 split)")
        else:
            mode = "ddp_optimizer"
            why = reasons[mode] + f"; {mb:,.0f} MB of gradients: hiding their all-reduce is worth the splits"
    else:
        why = reasons[mode] + " (asked for in the config)"
    torch._dynamo.config.optimize_ddp = mode
    return Choice("compile_ddp", mode, why)


def compiled_autograd_backward():
    """A context for `loss.backward()` that compiles the backward, AccumulateGrad and DDP's Python
    reducer (optimize_ddp=python_reducer) into one graph. Without it that mode all-reduces every
    gradient on its own, eagerly (measured 0.347 of one GPU's rate on 2 H200s)."""
    from torch._dynamo.utils import maybe_enable_compiled_autograd

    # Static shapes: every step has the same batch, and dynamic ones cost kernel quality.
    return maybe_enable_compiled_autograd(True, fullgraph=True, dynamic=False)


def choose_compile(cfg: TrainConfig, device: torch.device, total_steps: int,
                   breaks: dict | None = None) -> Choice:
    """`breaks`: for your own model (model.entry), what dynamo found tracing its forward on one
    sample (`graph_breaks`, `break_reason`), from the parent's probe."""
    if cfg.train.compile != "auto":
        return Choice("compile", cfg.train.compile == "on", "asked for in the config")
    if device.type != "cuda":
        return Choice("compile", False, "CPU: compiling costs more than a short run saves")
    if cfg.model.entry and breaks and breaks.get("graph_breaks"):
        return Choice("compile", False, f"the model's forward has Python control flow that depends on the data "
                      f"({breaks.get('break_reason') or 'a graph break'}): compiled, it would run as "
                      f"{breaks['graph_breaks'] + 1} graphs with the interpreter in between; train.compile=on "
                      "compiles anyway")
    builtin = not cfg.model.entry  # the rules on model.name are about the built-in models
    if builtin and cfg.model.name == "mlp":
        return Choice("compile", False, "an MLP this small gains nothing from compilation")
    if cfg.train.strategy == "fsdp":
        return Choice("compile", False, "FSDP: fully_shard's hooks cut the compiled graph at every block, and the "
                      "many small graphs leave the step bound by the host (ResNet-50 on an H200: 77-87 ms a step "
                      "compiled, 58-59 ms eager); train.compile=on compiles anyway")
    if (builtin and cfg.model.name in CONV_MODELS and 0 < (cfg.data.image_size or 224) < 64
            and cfg.data.dataset != "imagefolder"):
        return Choice("compile", False, "small images: the step is bound by kernel launches, not by fusable work "
                      "(ResNet-50 at 32x32 measured slower compiled)")
    if total_steps < COMPILE_MIN_STEPS:
        return Choice("compile", False, f"{total_steps} steps < {COMPILE_MIN_STEPS}: too short to repay compile time")
    return Choice("compile", True, f"{total_steps} steps: long enough to repay about a minute of compilation "
                  "(fused kernels, ~30% shorter steps)")


def fsdp_fits_note(cfg: TrainConfig, model: nn.Module, device: torch.device) -> str:
    """Under FSDP, a note where the model's training state fits one GPU with room to spare: DDP,
    which keeps everything whole, is faster there. Empty on the CPU and for models that need sharding."""
    if device.type != "cuda":
        return ""
    states = {"sgd": 1 if cfg.optim.momentum > 0 else 0}.get(cfg.optim.name, 2)
    need = sum(p.numel() * p.element_size() for p in model.parameters()) * (2 + states)  # + gradients, states
    total = torch.cuda.get_device_properties(device).total_memory
    if need > FSDP_FITS_SHARE * total:
        return ""
    size = f"{need / 2**30:.1f} GiB" if need >= 2**30 else f"{need / 2**20:.0f} MiB"
    return (f"; this model's parameters, gradients and optimizer state ({size}) fit one GPU "
            f"({total / 2**30:.0f} GiB), where DDP is faster (ResNet-50 on 2 H200s: 6,413 images/s per GPU with DDP, "
            "2,705 with FSDP): use train.strategy=ddp unless the activations need the room")


def fused_runs_on_dtensor(optim_name: str) -> bool:
    """Whether this torch's DTensor has a sharding rule for the optimizer's fused kernel.

    FSDP's parameters are DTensors, and a fused optimizer on them fails at its first step where
    no rule is registered ("Operator aten._fused_sgd_.default does not have a sharding strategy
    registered": torch 2.11 to 2.14 have rules for Adam and AdamW, not SGD). Asked of the
    registry itself rather than of a version list; an unreadable registry counts as no rule."""
    try:
        import torch.distributed.tensor._ops  # noqa: F401  (registers the rules)
        from torch.distributed.tensor import DTensor

        prop = DTensor._op_dispatcher.sharding_propagator
        op = getattr(torch.ops.aten, FUSED_OPS[optim_name]).default
    except (ImportError, AttributeError, KeyError):
        return False
    tables = ("op_strategy_funcs", "op_single_dim_strategy_funcs", "op_to_rules")
    return any(op in getattr(prop, t, {}) for t in tables)


def check_fused_for_fsdp(cfg: TrainConfig) -> None:
    """optim.fused=on with FSDP needs the fused kernel on DTensor parameters: refuse before launch."""
    if cfg.optim.fused == "on" and cfg.train.strategy == "fsdp" and not fused_runs_on_dtensor(cfg.optim.name):
        raise BadInput(f"optim.fused: 'on' cannot run under train.strategy=fsdp with optim.name={cfg.optim.name!r}: "
                       f"torch {torch.__version__.split('+')[0]} has no fused {cfg.optim.name} kernel for sharded "
                       "(DTensor) parameters; use optim.fused=auto (the foreach kernels) or optim.name=adamw")


def choose_fused(cfg: TrainConfig, device: torch.device, fsdp: bool = False) -> Choice:
    if cfg.optim.fused == "auto":
        on = device.type == "cuda"
        if on and fsdp and not fused_runs_on_dtensor(cfg.optim.name):
            return Choice("fused_optimizer", False, f"FSDP: torch {torch.__version__.split('+')[0]} has no fused "
                          f"{cfg.optim.name} kernel for sharded (DTensor) parameters; the foreach implementation")
        return Choice("fused_optimizer", on, "CUDA: one fused kernel for the whole update" if on else
                      "CPU: the default foreach implementation")
    check_fused_for_fsdp(cfg)
    return Choice("fused_optimizer", cfg.optim.fused == "on", "asked for in the config")


def default_workers(world: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 2
    return max(1, min(16, cores // max(1, world) - 1))
