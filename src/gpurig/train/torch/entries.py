"""Your own model, data and loss in `gpurig train`: entries named `FILE.py:function` or
`package.module:function`.

    gpurig train --model mypkg/models.py:build_model --data mypkg/data.py:build_datasets

- A **model entry** returns a `torch.nn.Module`. It may take, by name, any key of the config's
  `[model]` table (`width`, `hidden`, `depth`, `dropout`, ...) and `num_classes` (the number of
  classes gpurig found in the training targets).
- A **data entry** returns a map-style `Dataset` (`__len__` and `__getitem__` giving `(input,
  target)`), or a `(train, test)` pair of them (test may be None). It may take `seed`.
- A **loss entry** (`train.loss_entry`) is called as `loss(output, target)` and returns a scalar
  tensor. Without one the loss is cross-entropy, unless the model's `forward` takes the targets
  too (`forward(self, x, y)` or a `labels` argument, as Hugging Face models do): then the model is
  called with both and its own loss is used (a scalar tensor, or an output with `.loss` or
  `["loss"]`).

`probe_entries` checks all of it before any worker starts, in a child process that never touches
a GPU: the files and functions exist, they return what they must, and one sample goes through the
model. Whatever is wrong exits 2 naming the flag, with the user's traceback trimmed to their code.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput
from gpurig.train.entries import (  # noqa: F401  (re-exported: the shared half of the entries)
    FLAGS,
    _user_traceback,
    _where,
    absolute_entries,
    call_entry,
    child_main,
    load_entry,
    model_arguments,
    probe_in_child,
)

MATERIALISE_LIMIT = int(os.environ.get("GPURIG_HOLD_LIMIT_BYTES", 4 << 30))  # a user Dataset up to this size is held in memory


def build_user_model(cfg: Any, num_classes: int | None) -> Any:
    from torch import nn

    fn, root = load_entry(cfg.model.entry, "model.entry")
    model = call_entry(fn, "model.entry", root, model_arguments(cfg, num_classes))
    if not isinstance(model, nn.Module):
        raise BadInput(f"{_where('model.entry')}: {fn.__name__}() returned a {type(model).__name__}, "
                       "not a torch.nn.Module")
    return model


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "__len__") and hasattr(obj, "__getitem__")


def build_user_data(cfg: Any) -> tuple[Any, Any]:
    """(train, test or None) from the data entry."""
    fn, root = load_entry(cfg.data.entry, "data.entry")
    out = call_entry(fn, "data.entry", root, {"seed": cfg.seed})
    if (isinstance(out, tuple) and len(out) == 2 and _is_dataset(out[0]) and not isinstance(out[0], tuple)
            and (out[1] is None or _is_dataset(out[1])) and not _looks_like_sample(out)):
        train, test = out
    else:
        train, test = out, None
    if not _is_dataset(train):
        raise BadInput(f"{_where('data.entry')}: {fn.__name__}() returned a {type(train).__name__}, not a map-style "
                       "Dataset (__len__ and __getitem__) or a (train, test) pair of them")
    if len(train) == 0:
        raise BadInput(f"{_where('data.entry')}: the training Dataset is empty")
    return train, test


def _looks_like_sample(pair: Any) -> bool:
    """A (tensor, tensor) pair is a sample, not (train, test): tensors have __len__ and __getitem__ too."""
    import torch

    return all(isinstance(p, torch.Tensor) for p in pair)


def sample_of(ds: Any, key: str = "data.entry") -> tuple[Any, Any]:
    import torch

    try:
        item = ds[0]
    except Exception as exc:
        raise BadInput(f"{_where(key)}: reading sample 0 raised:\n{_user_traceback(exc, [Path.cwd()])}") from None
    if not (isinstance(item, tuple | list) and len(item) == 2):
        raise BadInput(f"{_where(key)}: a sample must be an (input, target) pair; sample 0 is a {type(item).__name__}")
    x, y = (torch.as_tensor(v) for v in item)
    return x, y


def takes_targets(model: Any) -> bool:
    """The model's forward takes the targets too (and returns its own loss)."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    names = {p.name for p in params}
    return len(params) >= 2 or bool(names & {"labels", "targets", "target"})


def loss_from_output(out: Any) -> Any:
    """A model's own loss: a scalar tensor, `.loss`, or `["loss"]`."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    return loss


def materialise(ds: Any, limit: int = MATERIALISE_LIMIT) -> tuple[Any, Any] | None:
    """The whole Dataset as two stacked tensors, when it is no larger than `limit` bytes: batches are
    then indexed in memory (on the GPU when it fits), with no loader workers. None when larger."""
    import torch

    x0, y0 = sample_of(ds)
    per = x0.numel() * x0.element_size() + y0.numel() * y0.element_size()
    if per * len(ds) > limit:
        return None
    xs = torch.empty((len(ds), *x0.shape), dtype=x0.dtype)
    ys = torch.empty((len(ds), *y0.shape), dtype=y0.dtype)
    for i in range(len(ds)):
        x, y = ds[i]
        xs[i] = torch.as_tensor(x)
        ys[i] = torch.as_tensor(y)
    return xs, ys


def probe(cfg: Any) -> dict[str, Any]:
    """In this process (a child without GPUs): build the user's data and model and run one sample."""
    import torch
    from torch import nn

    info: dict[str, Any] = {}
    num_classes = None
    if cfg.data.entry:
        train, test = build_user_data(cfg)
        x, y = sample_of(train)
        info.update(samples=len(train), test_samples=len(test) if test is not None else None,
                    sample_shape=list(x.shape), sample_dtype=str(x.dtype).replace("torch.", ""),
                    target_shape=list(y.shape), target_dtype=str(y.dtype).replace("torch.", ""))
        if y.dim() == 0 and not y.is_floating_point():
            targets = getattr(train, "targets", None)  # torchvision's datasets keep them all
            if targets is not None and len(targets) == len(train):
                num_classes = int(max(int(t) for t in targets)) + 1
            else:  # the first 4096 here; the worker counts every target before it builds the model
                num_classes = int(max(int(train[i][1]) for i in range(min(len(train), 4096)))) + 1
            info["num_classes"] = num_classes
    if cfg.model.entry:
        model = build_user_model(cfg, num_classes)
        info["params"] = sum(p.numel() for p in model.parameters())
        info["has_conv2d"] = any(isinstance(m, nn.Conv2d) for m in model.modules())
        own_loss = takes_targets(model) and not cfg.train.loss_entry
        info["returns_loss"] = own_loss
        if cfg.data.entry:
            model.eval()
            try:
                with torch.no_grad():
                    out = model(x[None], y[None]) if own_loss else model(x[None])
            except Exception as exc:
                raise BadInput(f"{_where('model.entry')}: the model cannot take a sample of {_where('data.entry')} "
                               f"(input {tuple(x.shape)} {x.dtype}, batch of 1):\n"
                               f"{_user_traceback(exc, [Path.cwd()])}") from None
            if own_loss:
                loss = loss_from_output(out)
                if not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
                    raise BadInput(f"{_where('model.entry')}: forward() takes the targets, so its own loss is "
                                   f"used, but it returned a {type(out).__name__} without a scalar loss "
                                   "(return the loss, or an output with .loss; or give --loss)")
            elif isinstance(out, torch.Tensor):
                info["output_shape"] = list(out.shape[1:])
            if os.environ.get("GPURIG_PROBE_COMPILE") == "1":
                info["compile"] = graph_breaks(model, x[None], y[None] if own_loss else None)
                if not cfg.train.loss_entry and not (out.dim() == 2 and y.dim() == 0):
                    raise BadInput(f"{_where('model.entry')}: the default loss is cross-entropy over class scores "
                                   f"(batch, classes) with integer targets; the model gives {tuple(out.shape)} for "
                                   f"a target of shape {tuple(y.shape)}: give --loss FILE.py:function")
                if num_classes is not None and out.dim() == 2 and out.shape[1] < num_classes:
                    raise BadInput(f"{_where('model.entry')}: the model scores {out.shape[1]} classes, but the "
                                   f"targets go up to {num_classes - 1}")
    if cfg.train.loss_entry:
        load_entry(cfg.train.loss_entry, "train.loss_entry")
    return info


def graph_breaks(model: Any, x: Any, y: Any) -> dict[str, Any] | None:
    """What dynamo makes of the model's forward on one sample (traced on the CPU, nothing compiled):
    how many graph breaks, and the first one's reason. None when it cannot say."""
    try:
        import torch._dynamo as dynamo

        explained = dynamo.explain(model)(x) if y is None else dynamo.explain(model)(x, y)
    except Exception:  # a model dynamo cannot trace at all: compile would fail the same way; leave it to auto
        return None
    reasons = [str(getattr(b, "reason", b)).splitlines()[0][:160] for b in explained.break_reasons]
    where = ""
    if explained.break_reasons:
        stack = getattr(explained.break_reasons[0], "user_stack", None) or []
        if stack:
            frame = stack[-1]
            where = f" at {Path(frame.filename).name}:{frame.lineno}"
    return {"graph_breaks": int(explained.graph_break_count),
            "break_reason": (reasons[0] + where) if reasons else None}


def probe_entries(cfg: Any, compile_check: bool = False) -> dict[str, Any]:
    """`probe` in a child process with no GPU visible (the parent never initialises CUDA); BadInput
    (exit 2) with the child's message when an entry is wrong. `compile_check` also traces the model
    with dynamo (a few seconds on the CPU) to find graph breaks, for runs that may compile."""
    return probe_in_child("gpurig.train.torch.entries", cfg, {"GPURIG_PROBE_COMPILE": "1" if compile_check else "0"})


# ---------------------------------------------------------------------------------------------
# In the worker


def user_arrays(cfg: Any, info: dict[str, Any]) -> Any:
    """The user's Dataset(s) read once into memory as the trainer's `ArrayData` (kind "tensor":
    batches are passed to the model as the Dataset gives them, without normalising)."""
    from gpurig.train.torch.data import ArrayData

    train, test = build_user_data(cfg)
    held = materialise(test) if test is not None and classifies(info) else None
    whole = materialise(train)
    if whole is None:  # too big to hold: streamed by DataLoader workers
        targets = getattr(train, "targets", None)
        classes = (int(max(int(t) for t in targets)) + 1 if targets is not None and len(targets) == len(train)
                   else int(info.get("num_classes") or 0))
        test_arrays = None
        if held is not None:
            xt, yt = held
            test_arrays = ArrayData("tensor", xt[:0], yt[:0], xt, yt, num_classes=classes, name=cfg.data.entry)
        return Streamed(train, test_arrays, classes, list(info.get("sample_shape") or sample_of(train)[0].shape))
    x, y = whole
    xt, yt = held if held is not None else (None, None)
    classes = int(y.max()) + 1 if (y.dim() == 1 and not y.is_floating_point() and len(y)) else 0  # every target
    return ArrayData("tensor", x, y, xt, yt, num_classes=classes or int(info.get("num_classes") or 0),
                     name=cfg.data.entry)


@dataclass
class Streamed:
    """A user Dataset too big to hold in memory: read by DataLoader workers as training goes."""

    train: Any  # the map-style Dataset
    test: Any  # ArrayData holding the test set when it fits (and the targets are classes), else None
    num_classes: int
    sample_shape: list[int]


def classifies(info: dict[str, Any]) -> bool:
    """Class scores (batch, classes) against integer targets: accuracy and cross-entropy apply."""
    out = info.get("output_shape")
    return (not info.get("returns_loss") and info.get("target_shape") == [] and (out is None or len(out) == 1)
            and not str(info.get("target_dtype", "")).startswith(("float", "bfloat", "complex")))


def user_loss(cfg: Any) -> Callable[[Any, Any], Any] | None:
    if not cfg.train.loss_entry:
        return None
    fn, _ = load_entry(cfg.train.loss_entry, "train.loss_entry")
    return fn


def flops_of(model: Any, x: Any, y: Any, own_loss: bool) -> float | None:
    """Training FLOPs per sample of a user model (3x one forward, counted on one sample); None when
    the counter cannot follow the model."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    try:
        model.eval()
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model(x[:1], y[:1]) if own_loss else model(x[:1])
        return float(fc.get_total_flops()) * 3 or None
    except Exception:  # a counter that cannot trace the model only loses the MFU figure
        return None
    finally:
        model.train(was_training)


if __name__ == "__main__":
    sys.exit(child_main(probe))
