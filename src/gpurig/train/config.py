"""`TrainConfig`: everything a training run needs, as plain dataclasses, framework-neutral.

A config comes from an embedded preset (`preset("demo")`), a TOML file, or both, and then
`--set a.b=value` overrides. Loading is strict: an unknown key, a value of the wrong type or a
value outside its choices is `BadInput` naming the dotted key. Checks that need the world size
(global batch divisibility) are in `validate(cfg, world_size)`; checks that look at the disk (the
data path) are in `check_data_path(cfg)`.

    cfg = load_config(preset_name="demo", overrides=["optim.lr=0.01", "data.batch_size=64"])
    cfg = load_config(path="run.toml")

The same config drives the PyTorch loop (`framework = "torch"`) and the TensorFlow loop
(`framework = "tf"`, options in the `[tf]` table).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from gpurig.errors import BadInput, check_user_file
from gpurig.train.presets import PRESETS


def _f(default: Any, doc: str, choices: tuple | None = None, minimum: float | None = None, **kw: Any) -> Any:
    """A dataclass field that carries its documentation, its allowed values and its minimum."""
    meta = {"doc": doc, "choices": choices, "min": minimum}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


MODELS = ("mlp", "cnn", "resnet18", "resnet50", "gpt")
DATASETS = ("digits", "synthetic-image", "synthetic-token", "cifar10", "mnist", "imagefolder")
FILE_DATASETS = ("cifar10", "mnist", "imagefolder")
TOKEN_MODELS = ("gpt",)
TOKEN_DATASETS = ("synthetic-token",)


@dataclass
class ModelConfig:
    """Which network to train and its size."""

    name: str = _f("mlp", "The network: mlp (the common tutorial MNIST model: flatten, hidden layers, ReLU), cnn (a small "
                   "conv net), resnet18 / resnet50 (torchvision, random init), gpt (a GPT-style decoder for "
                   "token data).", choices=MODELS)
    entry: str = _f("", "Your own model instead of `name`: FILE.py:function or package.module:function returning a "
                    "torch.nn.Module; it may take any key of this table and num_classes by name (`--model`).")
    hidden: int = _f(128, "mlp: width of each hidden layer (the common tutorial MNIST model: 128).", minimum=1)
    depth: int = _f(1, "mlp: number of hidden layers (the common tutorial MNIST model: 1).", minimum=1)
    width: int = _f(32, "cnn: channels of the first conv block (doubled in the second).", minimum=1)
    layers: int = _f(6, "gpt: transformer blocks.", minimum=1)
    heads: int = _f(8, "gpt: attention heads per block (dim must be divisible by heads).", minimum=1)
    dim: int = _f(512, "gpt: embedding width.", minimum=8)
    dropout: float = _f(0.2, "Dropout probability (mlp after each hidden layer, as the common tutorial MNIST model; gpt "
                        "attention and residual paths).", minimum=0.0)


@dataclass
class DataConfig:
    """Where the samples come from and how they reach the device."""

    dataset: str = _f("digits", "digits (scikit-learn's 8x8 digits, ships with the package), synthetic-image, "
                      "synthetic-token, cifar10 (a local cifar-10-batches-py directory), mnist (a directory of "
                      "idx files, gzipped or not), imagefolder (class sub-directories of JPEG/PNG files).",
                      choices=DATASETS)
    entry: str = _f("", "Your own data instead of `dataset`: FILE.py:function or package.module:function returning "
                    "a map-style Dataset of (input, target), or a (train, test) pair of them (`--data`).")
    path: str = _f("", "Directory of the dataset files (cifar10, mnist, imagefolder). imagefolder uses "
                   "path/train and path/val when they exist, otherwise holds out test_fraction.")
    batch_size: int = _f(64, "Samples per device per micro-batch (what one GPU holds at once).", minimum=1)
    global_batch_size: int = _f(0, "Samples per optimizer step over all devices; 0 = batch_size x devices x "
                                "grad_accum. When set, it must be divisible by batch_size x devices, and the "
                                "quotient becomes train.grad_accum.", minimum=0)
    workers: int | str = _f("auto", "DataLoader worker processes per device for file datasets; 'auto' "
                                  "picks from the CPU cores per device. Ignored for data held on the device.")
    prefetch: int = _f(4, "Batches each DataLoader worker prepares ahead.", minimum=1)
    on_device: str = _f("auto", "Hold the whole dataset in device memory and augment there: auto (when it fits "
                        "in 10% of the device memory and is a tensor dataset), on, off.",
                        choices=("auto", "on", "off"))
    decode: str = _f("auto", "imagefolder JPEG decoding: auto (on the GPU for CUDA runs, where the CPU cannot "
                     "keep up), cpu, gpu.", choices=("auto", "cpu", "gpu"))
    augment: str = _f("auto", "Random crop + horizontal flip for image data: auto (on for cifar10 and "
                      "imagefolder), on, off.", choices=("auto", "on", "off"))
    image_size: int = _f(0, "Side of the square images fed to the model; 0 = the dataset's own (synthetic: 224, "
                         "imagefolder: 224).", minimum=0)
    channels: int = _f(3, "synthetic-image: channels per image.", minimum=1)
    num_classes: int = _f(10, "synthetic-image / synthetic-token labels: number of classes (images). Real "
                          "datasets set this themselves.", minimum=2)
    samples: int = _f(0, "Synthetic datasets: samples per epoch; 0 = 64 batches per device.", minimum=0)
    seq_len: int = _f(256, "Token data: tokens per sample (the GPT context length).", minimum=2)
    vocab_size: int = _f(8192, "Token data: vocabulary size.", minimum=2)
    test_fraction: float = _f(0.2, "digits / imagefolder without a val directory: fraction held out for "
                              "evaluation (a fixed split from the seed).", minimum=0.0)


@dataclass
class OptimConfig:
    """The optimizer; fused kernels where the device has them."""

    name: str = _f("sgd", "sgd (with momentum), adamw or adam.", choices=("sgd", "adamw", "adam"))
    lr: float = _f(0.1, "Peak learning rate (after warm-up).", minimum=0.0)
    momentum: float = _f(0.9, "sgd: momentum.", minimum=0.0)
    nesterov: bool = _f(False, "sgd: Nesterov momentum.")
    weight_decay: float = _f(0.0, "Weight decay (decoupled for adamw).", minimum=0.0)
    beta1: float = _f(0.9, "adam/adamw: first-moment decay.", minimum=0.0)
    beta2: float = _f(0.999, "adam/adamw: second-moment decay.", minimum=0.0)
    fused: str = _f("auto", "Fused optimizer kernels: auto (on CUDA), on, off.", choices=("auto", "on", "off"))
    clip_grad_norm: float = _f(0.0, "Clip the global gradient norm to this value; 0 = off.", minimum=0.0)


@dataclass
class ScheduleConfig:
    """How the learning rate moves over the run (stepped once per optimizer step)."""

    name: str = _f("cosine", "constant, cosine (to min_lr_ratio x lr at the end), linear (to min_lr_ratio), "
                   "step (x gamma every step_size steps).", choices=("constant", "cosine", "linear", "step"))
    warmup_steps: int = _f(0, "Linear warm-up from 0 over this many optimizer steps.", minimum=0)
    min_lr_ratio: float = _f(0.0, "cosine/linear: final lr as a fraction of the peak.", minimum=0.0)
    step_size: int = _f(1000, "step: optimizer steps between decays.", minimum=1)
    gamma: float = _f(0.1, "step: decay factor.", minimum=0.0)


@dataclass
class LoopConfig:
    """Length of the run and the speed/precision/parallelism choices."""

    epochs: int = _f(1, "Passes over the training data (ignored when steps > 0).", minimum=1)
    steps: int = _f(0, "Optimizer steps to run; 0 = run for `epochs`.", minimum=0)
    grad_accum: int = _f(1, "Micro-batches per optimizer step (DDP skips the all-reduce on all but the last "
                         "with no_sync).", minimum=1)
    precision: str = _f("auto", "auto (bf16 autocast on compute capability >= 8.0, fp16 + gradient scaler on "
                        "7.x, fp32 on the CPU), bf16, fp16, fp32.", choices=("auto", "bf16", "fp16", "fp32"))
    compile: str = _f("auto", "torch.compile: auto (on CUDA when the run is long enough to repay the compile "
                      "time), on, off.", choices=("auto", "on", "off"))
    strategy: str = _f("ddp", "ddp (replicate the model, all-reduce gradients) or fsdp (shard parameters, "
                       "gradients and optimizer state with fully_shard).", choices=("ddp", "fsdp"))
    ddp_bucket_mb: int = _f(25, "DDP gradient bucket size in MiB (all-reduce starts as each bucket fills, "
                            "overlapping the backward pass).", minimum=1)
    compile_ddp: str = _f("auto", "How torch.compile treats DDP (torch._dynamo.config.optimize_ddp): "
                          "ddp_optimizer (split the graph at bucket boundaries so each all-reduce overlaps the "
                          "rest of the backward), no_optimization (one graph; all-reduce after the backward), "
                          "python_reducer (compiled autograd traces the reducer); auto = one graph while the all-reduce "
                          "moves at most 256 MiB per step (ResNet-50 measured faster so), else ddp_optimizer.",
                          choices=("auto", "ddp_optimizer", "no_optimization", "python_reducer"))
    buffer_sync: str = _f("auto", "When DDP ranks agree on buffers: forward (rank 0's copied before every forward, "
                          "DDP's default), eval (only before evaluation; right when the buffers are BatchNorm "
                          "statistics, unused while training); auto = eval when every buffer is a BatchNorm "
                          "statistic, else forward.", choices=("auto", "forward", "eval"))
    static_graph: str = _f("auto", "DDP static_graph (the same parameters get gradients every step, which lets "
                           "DDP skip per-step bookkeeping): auto (on for the built-in models), on, off.",
                           choices=("auto", "on", "off"))
    channels_last: str = _f("auto", "channels_last memory format: auto (conv nets on CUDA), on, off.",
                            choices=("auto", "on", "off"))
    log_every: int = _f(0, "Optimizer steps between progress lines and loss reads (each read is a host-device "
                        "sync); 0 = about 20 lines per run.", minimum=0)
    max_seconds: float = _f(0.0, "Stop (with a checkpoint) after this much training time; 0 = no limit.",
                            minimum=0.0)
    loss_entry: str = _f("", "Your own loss: FILE.py:function called as loss(output, target); default "
                         "cross-entropy, or the model's own loss when its forward takes the targets (`--loss`).")


@dataclass
class CheckpointConfig:
    """When rank 0 writes checkpoints (atomically: temp file, fsync, rename)."""

    enabled: bool = _f(True, "Write checkpoints at all.")
    every_steps: int = _f(0, "Optimizer steps between checkpoints; 0 = only at the end (and on SIGTERM).",
                          minimum=0)
    keep: int = _f(2, "Checkpoints kept on disk (older ones are deleted after a new one is safely written).",
                   minimum=1)
    on_error: str = _f("stop", "When a checkpoint cannot be written (disk full, read-only or vanished "
                       "directory): stop (end the run with the reason; the previous checkpoint stays valid) or warn "
                       "(say so and keep training).", choices=("stop", "warn"))
    sharded: bool = _f(False, "FSDP only: every rank writes its own shards in PyTorch's distributed checkpoint "
                       "format (step-N.dcp directories) instead of gathering the full state on rank 0; loads "
                       "on another number of processes.")


@dataclass
class EvalConfig:
    """Evaluation on the held-out split; every sample counted exactly once across ranks."""

    enabled: bool = _f(True, "Evaluate at all (synthetic datasets have no held-out split and skip it).")
    every_epochs: int = _f(1, "Epochs between evaluations (and always at the end).", minimum=1)


@dataclass
class TFConfig:
    """TensorFlow-only options (framework = "tf"); set under framework = "torch" they are refused (CANNOT_HONOUR)."""

    loop: str = _f("custom", "custom (a tf.function train step under strategy.run) or fit (Keras model.fit).",
                   choices=("custom", "fit"))
    cross_device_ops: str = _f("nccl", "MirroredStrategy's all-reduce: nccl (NcclAllReduce), hierarchical "
                               "(HierarchicalCopyAllReduce, for GPUs without P2P) or reduce_to_one "
                               "(ReductionToOneDevice).", choices=("nccl", "hierarchical", "reduce_to_one"))
    worker_hosts: str = _f("", "MultiWorkerMirroredStrategy across machines: host[:port] of every worker, "
                           "comma-separated, in node-rank order (with --nnodes/--node-rank); empty = "
                           "--master-addr with consecutive ports, or a TF_CONFIG / Slurm allocation.")


@dataclass
class TrainConfig:
    """A whole training run. `to_dict()` / `from_dict()` round-trip it through JSON and TOML."""

    framework: str = _f("torch", "torch (DDP/FSDP via torchrun) or tf (MirroredStrategy).",
                        choices=("torch", "tf"))
    seed: int = _f(0, "Seed for data order, model init and augmentation (each rank offsets it by its rank "
                   "where ranks must differ).")
    out_dir: str = _f("", "Run directory (checkpoints, TensorBoard logs, summary.json); '' = runs/<time>. "
                      "--out overrides it.")
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"doc": "The network."})
    data: DataConfig = field(default_factory=DataConfig, metadata={"doc": "The dataset and input pipeline."})
    optim: OptimConfig = field(default_factory=OptimConfig, metadata={"doc": "The optimizer."})
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig, metadata={"doc": "The learning-rate schedule."})
    train: LoopConfig = field(default_factory=LoopConfig, metadata={"doc": "Run length, precision, parallelism."})
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig, metadata={"doc": "Checkpoints."})
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"doc": "Evaluation."})
    tf: TFConfig = field(default_factory=TFConfig, metadata={"doc": "TensorFlow-only options."})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# Presets: embedded configs that need nothing on disk (`train/presets.py`).


def preset(name: str) -> TrainConfig:
    """An embedded config by name (see `PRESETS`)."""
    if name not in PRESETS:
        raise BadInput(f"--preset: unknown preset {name!r}; choose from {', '.join(sorted(PRESETS))}")
    return from_dict(PRESETS[name], source=f"preset {name!r}")


# ---------------------------------------------------------------------------------------------
# Strict conversion between dicts and dataclasses.


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "none"
    args = typing.get_args(tp)
    if args:
        return " or ".join(_type_name(a) for a in args)
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(tp, getattr(tp, "__name__", str(tp)))


def _is_union(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType)


def _check_value(key: str, tp: Any, value: Any, meta: dict[str, Any]) -> Any:
    """Return `value` if it fits type `tp` (ints are accepted as floats); else BadInput naming `key`."""
    ok = False
    candidates = typing.get_args(tp) if _is_union(tp) else (tp,)
    for cand in candidates:
        if cand is bool and isinstance(value, bool):
            ok = True
        elif cand is int and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        elif cand is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
            ok = True
        elif cand is str and isinstance(value, str):
            ok = True
        elif cand is type(None) and value is None:
            ok = True
        if ok:
            break
    if not ok:
        raise BadInput(f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    choices = meta.get("choices")
    if choices and value not in choices:
        raise BadInput(f"{key}: {value!r} is not one of {', '.join(map(str, choices))}")
    minimum = meta.get("min")
    if minimum is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value < minimum:
        raise BadInput(f"{key}: must be at least {minimum:g}, got {value!r}")
    if key.endswith("data.workers") and isinstance(value, str) and value != "auto":
        raise BadInput(f"{key}: must be 'auto' or a non-negative integer, got {value!r}")
    if key.endswith("data.workers") and isinstance(value, int) and value < 0:
        raise BadInput(f"{key}: must be 'auto' or a non-negative integer, got {value!r}")
    return value


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise BadInput(f"{prefix or 'config'}: expected a table, got {type(data).__name__} {data!r}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise BadInput(f"{key}: unknown key; {prefix or 'the top level'} has {', '.join(sorted(fields))}")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value, key)
        else:
            kwargs[name] = _check_value(key, tp, value, dict(fields[name].metadata))
    return cls(**kwargs)


def from_dict(data: dict[str, Any], source: str = "config") -> TrainConfig:
    """Strictly build a TrainConfig from nested dicts (missing keys take their defaults)."""
    cfg = _build(TrainConfig, data, "")
    _check_consistency(cfg)
    return cfg


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _field_at(key: str) -> tuple[Any, dict[str, Any]]:
    """The type and metadata of the field at dotted `key`, or BadInput for an unknown key."""
    cls: Any = TrainConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            where = ".".join(parts[:i]) or "the top level"
            raise BadInput(f"--set {key}: unknown key {part!r}; {where} has {', '.join(sorted(fields))}")
        tp = _hints(cls)[part]
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(tp):
                raise BadInput(f"--set {key}: is a table; set one of its keys, e.g. {key}.{dataclasses.fields(tp)[0].name}=...")
            return tp, dict(fields[part].metadata)
        if not dataclasses.is_dataclass(tp):
            raise BadInput(f"--set {key}: {'.'.join(parts[: i + 1])} is not a table")
        cls = tp
    raise BadInput(f"--set {key}: empty key")  # pragma: no cover


def parse_override(text: str) -> tuple[str, Any]:
    """`"optim.lr=0.1"` -> ("optim.lr", 0.1), typed by the target field; BadInput naming the key."""
    if "=" not in text:
        raise BadInput(f"--set {text!r}: expected KEY=VALUE, e.g. --set optim.lr=0.1")
    key, raw = text.split("=", 1)
    key = key.strip()
    raw = raw.strip()
    tp, _meta = _field_at(key)
    candidates = typing.get_args(tp) if _is_union(tp) else (tp,)
    value: Any = raw
    if raw.lower() in ("none", "null") and type(None) in candidates:
        return key, None
    for cand in candidates:
        try:
            if cand is bool:
                if raw.lower() in ("true", "1", "yes", "on"):
                    value = True
                    break
                if raw.lower() in ("false", "0", "no", "off"):
                    value = False
                    break
            elif cand is int:
                value = int(raw)
                break
            elif cand is float:
                value = float(raw)
                break
            elif cand is str:
                value = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"" else raw
                break
        except ValueError:
            continue
    else:
        raise BadInput(f"--set {key}: expected {_type_name(tp)}, got {raw!r}")
    return key, value


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return out


def load_config(path: str | os.PathLike | None = None, preset_name: str | None = None,
                overrides: list[str] | None = None, base: dict[str, Any] | None = None) -> TrainConfig:
    """The preset (default "demo"), then the TOML file over it, then each --set over that.

    `base` (a config dict, e.g. the one a run was started with) replaces the default preset; an
    explicit `preset_name` replaces `base`. `config_sources()` says the same in words.
    """
    base = copy.deepcopy(base) if base is not None else {}
    if preset_name or not base:
        name = preset_name or "demo"
        if name not in PRESETS:
            raise BadInput(f"--preset: unknown preset {name!r}; choose from {', '.join(sorted(PRESETS))}")
        base = copy.deepcopy(PRESETS[name])
    if path:
        p = Path(path)
        check_user_file(str(p), f"--config {path}", "TOML file")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"--config {path}: not valid TOML: {exc}") from None
        # Check the file alone first, so an error names the file's key, not a merged one.
        _build(TrainConfig, data, "")
        base = _merge(base, data)
    for text in overrides or []:
        key, value = parse_override(text)
        base = _merge(base, _nest(key, value))
    return from_dict(base)


def config_sources(path: str | os.PathLike | None = None, preset_name: str | None = None,
                   overrides: list[str] | None = None, saved_in: str | os.PathLike | None = None) -> str:
    """What made the config, in the order `load_config` applies it: "preset demo, then run.toml,
    then --set optim.lr=0.1". `saved_in`: the run directory whose saved config is the base."""
    parts = [f"preset {preset_name}" if preset_name
             else f"the config saved in {saved_in}" if saved_in else "preset demo (the default)"]
    if path:
        parts.append(str(path))
    parts += [f"--set {o}" for o in overrides or []]
    return ", then ".join(parts)


# What each framework cannot honour, in one table: key -> (refused values, what to do instead).
# `None` as refused values means every value but the key's default: the key steers only the other
# framework. A refused setting is an error naming the key, never silently ignored.
CANNOT_HONOUR: dict[str, dict[str, tuple[frozenset | None, str]]] = {
    "tf": {
        "model.name": (frozenset({"resnet18", "gpt"}), "choose mlp, cnn or resnet50"),
        "data.dataset": (frozenset({"synthetic-token"}),
                         "choose digits, mnist, cifar10, imagefolder or synthetic-image"),
        "train.strategy": (frozenset({"fsdp"}), "MirroredStrategy replicates the model: use ddp"),
        "train.compile": (None, "the TensorFlow step is already a tf.function; torch.compile is PyTorch's"),
        "train.compile_ddp": (None, "a torch.compile setting for DDP"),
        "train.channels_last": (None, "Keras convolutions are channels-last already"),
        "train.static_graph": (None, "a DDP setting"),
        "train.buffer_sync": (None, "a DDP setting; MirroredStrategy keeps one copy of each variable in sync"),
        "train.ddp_bucket_mb": (None, "a DDP setting; MirroredStrategy packs its own all-reduces"),
        "optim.fused": (None, "fused optimizer kernels are PyTorch's"),
        "data.workers": (None, "tf.data sets its own parallelism (AUTOTUNE)"),
        "data.prefetch": (None, "tf.data prefetches with AUTOTUNE"),
        "data.on_device": (None, "tf.data feeds the replicas from host memory"),
        "data.decode": (None, "tf.data decodes images on the CPU"),
        "checkpoint.sharded": (None, "a FSDP setting"),
        "checkpoint.on_error": (None, "a checkpoint the TensorFlow worker cannot write ends the run"),
        "train.loss_entry": (None, "a PyTorch loss function; under tf the loss is sparse categorical "
                             "cross-entropy on your model's class scores"),
    },
    "torch": {
        "tf.loop": (None, "a TensorFlow setting: use --framework tf"),
        "tf.cross_device_ops": (None, "a TensorFlow setting; DDP all-reduces with NCCL (gloo on the CPU)"),
        "tf.worker_hosts": (None, "a TensorFlow setting; for several machines use --nnodes/--master-addr"),
    },
}


def _default_of(key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(TrainConfig(), section), name)


def check_framework(cfg: TrainConfig) -> None:
    """BadInput naming the first key `cfg.framework` cannot honour (the `CANNOT_HONOUR` table)."""
    for key, (refused, instead) in CANNOT_HONOUR.get(cfg.framework, {}).items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if (value != _default_of(key)) if refused is None else (value in refused):
            raise BadInput(f"{key}: {value!r} is not available with framework={cfg.framework} ({instead})")


def _check_consistency(cfg: TrainConfig) -> None:
    """Checks between fields that need neither the world size nor the disk."""
    check_framework(cfg)
    token_model = cfg.model.name in TOKEN_MODELS and not cfg.model.entry
    token_data = cfg.data.dataset in TOKEN_DATASETS and not cfg.data.entry
    if token_model != token_data and not (cfg.model.entry or cfg.data.entry):
        raise BadInput(
            f"model.name: {cfg.model.name!r} does not fit data.dataset {cfg.data.dataset!r} "
            f"(gpt trains on token data: synthetic-token; the other models on images)"
        )
    if cfg.model.name == "gpt" and cfg.model.dim % cfg.model.heads:
        raise BadInput(f"model.dim: {cfg.model.dim} is not divisible by model.heads {cfg.model.heads}")
    if not 0.0 <= cfg.data.test_fraction < 1.0:
        raise BadInput(f"data.test_fraction: must be in [0, 1), got {cfg.data.test_fraction}")
    if cfg.optim.beta1 >= 1.0 or cfg.optim.beta2 >= 1.0:
        raise BadInput("optim.beta1/optim.beta2: must be below 1")


def validate(cfg: TrainConfig, world_size: int) -> TrainConfig:
    """Checks that need the number of processes; resolves global_batch_size into grad_accum.

    Says the arithmetic: `data.global_batch_size 100 is not divisible by data.batch_size 32 x 3
    processes = 96`.
    """
    cfg = copy.deepcopy(cfg)
    per_step = cfg.data.batch_size * world_size
    if cfg.data.global_batch_size:
        if cfg.data.global_batch_size % per_step:
            raise BadInput(
                f"data.global_batch_size: {cfg.data.global_batch_size} is not divisible by data.batch_size "
                f"{cfg.data.batch_size} x {world_size} processes = {per_step}"
            )
        accum = cfg.data.global_batch_size // per_step
        if cfg.train.grad_accum not in (1, accum):
            raise BadInput(
                f"train.grad_accum: {cfg.train.grad_accum} contradicts data.global_batch_size "
                f"{cfg.data.global_batch_size} = {cfg.data.batch_size} x {world_size} processes x {accum}"
            )
        cfg.train.grad_accum = accum
    if cfg.framework == "tf" and cfg.train.grad_accum > 1:
        raise BadInput(
            f"train.grad_accum: {cfg.train.grad_accum}: gradient accumulation is not implemented for framework=tf "
            "(raise data.batch_size instead, or use framework=torch)"
        )
    return cfg


def check_data_path(cfg: TrainConfig) -> None:
    """A file dataset needs an existing directory at data.path; say which key and which path."""
    if cfg.data.dataset not in FILE_DATASETS:
        return
    if not cfg.data.path:
        raise BadInput(f"data.path: dataset {cfg.data.dataset!r} reads files; set data.path to its directory")
    p = Path(cfg.data.path).expanduser()
    if not p.exists():
        raise BadInput(f"data.path: {cfg.data.path} does not exist (dataset {cfg.data.dataset!r})")
    if not p.is_dir():
        raise BadInput(f"data.path: {cfg.data.path} is not a directory (dataset {cfg.data.dataset!r})")


def global_batch(cfg: TrainConfig, world_size: int) -> int:
    """Samples per optimizer step over every device."""
    return cfg.data.batch_size * world_size * cfg.train.grad_accum


def describe_fields() -> list[dict[str, Any]]:
    """Every key with its type, default, choices and doc (for docs and `--help`)."""
    rows: list[dict[str, Any]] = []

    def walk(cls: type, prefix: str, inst: Any) -> None:
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}.{f.name}" if prefix else f.name
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                walk(tp, key, getattr(inst, f.name))
            else:
                rows.append({"key": key, "type": _type_name(tp), "default": getattr(inst, f.name),
                             "choices": f.metadata.get("choices"), "doc": f.metadata.get("doc", "")})

    walk(TrainConfig, "", TrainConfig())
    return rows


def to_toml(cfg: TrainConfig) -> str:
    """The config as TOML (for `config.toml` in the run directory)."""

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        s = str(v).replace("\\", "\\\\").replace('"', '\\"')
        return f'"{s}"'

    d = cfg.to_dict()
    lines = [f"{k} = {val(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines += [f"{kk} = {val(vv)}" for kk, vv in v.items() if vv is not None]
    return "\n".join(lines) + "\n"
