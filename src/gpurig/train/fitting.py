"""`gpurig.fit()`: `gpurig train --model/--data` from Python (a notebook or your own script).

    import gpurig
    from mymodels import build_model          # functions in .py files, not objects
    from mydata import build_train, build_test

    summary = gpurig.fit(build_model, build_train, build_test, steps=500, batch_size=128)
    summary["samples_per_s"], summary["accuracy"]

`model`, `train_data`, `test_data` and `loss` are the functions that build them (or their entry
strings, "FILE.py:function"), never the built objects: the training runs in new processes
started through torchrun, exactly as the command does, and those processes build their own copy.
CUDA is never initialised in the calling process, so a notebook can call `fit` again. The other
keyword arguments are config keys: a name that exists in one table only can be given alone
(`steps=500` is train.steps, `lr=0.1` optim.lr), any key as `section__name` (`optim__name="adamw"`)
or through `config={"optim.name": "adamw"}`. Returns the run's summary (a dict, `RunSummary`'s
fields), which renders as a table in Jupyter.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput
from gpurig.train.config import TrainConfig, load_config
from gpurig.train.summary import Summary

Entry = str | Callable[..., Any]

COMBINED_DATA = '''"""Written by gpurig.fit(): your training and test data entries as one data entry."""
from gpurig.train.torch.entries import call_entry, load_entry


def build(seed=0):
    out = []
    for text in ({train!r}, {test!r}):
        fn, root = load_entry(text, "data.entry")
        out.append(call_entry(fn, "data.entry", root, {{"seed": seed}}))
    return out[0], out[1]
'''


def entry_of(obj: Entry | None, what: str) -> str:
    """The entry string ("FILE.py:qualname") of a function or class defined in a .py file."""
    if obj is None or isinstance(obj, str):
        return obj or ""
    if not callable(obj) or not (inspect.isfunction(obj) or inspect.isclass(obj)):
        kind = type(obj).__name__
        raise BadInput(f"fit({what}=...): got a {kind} object; give the function that builds it (or its "
                       "'FILE.py:function' string): the training runs in new processes, which build their own copy")
    name = obj.__qualname__
    try:
        source = inspect.getsourcefile(obj)
    except TypeError:
        source = None
    if "<" in name or source is None or not Path(source).is_file():  # <lambda>, <locals>, a notebook cell
        raise BadInput(f"fit({what}=...): {obj.__name__} is a lambda, or defined in a notebook cell or inside a "
                       "function, which the training processes cannot import; put it in a .py file (next to the "
                       "notebook) and import it from there")
    return f"{Path(source).resolve()}:{name}"


def _keys() -> dict[str, list[str]]:
    """Each config field name -> the dotted keys that have it."""
    found: dict[str, list[str]] = {}
    for section in dataclasses.fields(TrainConfig):
        if isinstance(section.default_factory, type):  # a table: model, data, optim, ...
            for f in dataclasses.fields(section.default_factory()):  # type: ignore[misc]
                found.setdefault(f.name, []).append(f"{section.name}.{f.name}")
        else:
            found.setdefault(section.name, []).append(section.name)
    return found


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def overrides_of(kwargs: dict[str, Any], config: dict[str, Any] | None) -> list[str]:
    """`--set`-style overrides from fit()'s keyword arguments; BadInput naming an unknown or ambiguous one."""
    keys = _keys()
    out = [f"{k}={_text(v)}" for k, v in (config or {}).items()]
    for name, value in kwargs.items():
        if "__" in name:
            out.append(f"{name.replace('__', '.', 1)}={_text(value)}")
            continue
        where = keys.get(name)
        if not where:
            raise BadInput(f"fit({name}=...): no config key is called {name!r} (see `gpurig train --show-config`)")
        if len(where) > 1:
            spelled = " or ".join(k.replace(".", "__", 1) + "=" for k in where)
            raise BadInput(f"fit({name}=...): {name!r} is in several tables; say which: {spelled}")
        out.append(f"{where[0]}={_text(value)}")
    return out


def fit(model: Entry, train_data: Entry, test_data: Entry | None = None, *, loss: Entry | None = None,
        device: str = "auto", nproc: str | int = "auto", out: str | Path | None = None, resume: str | None = None,
        quiet: bool = False, config: dict[str, Any] | None = None, **kwargs: Any) -> Summary:
    """Train your model on your data with gpurig's defaults on every GPU (or two CPU processes); see
    the module docstring. Raises `gpurig.errors.BadInput` for anything wrong before training starts,
    `ProblemFound` when training fails."""
    from gpurig.train.run import run_training

    sets = overrides_of(kwargs, config)
    model_entry = entry_of(model, "model")
    train_entry = entry_of(train_data, "train_data")
    test_entry = entry_of(test_data, "test_data")
    loss_entry = entry_of(loss, "loss")
    run_dir = Path(out) if out is not None else None
    if test_entry:
        from gpurig.launch.plan import default_run_dir

        run_dir = run_dir or Path(default_run_dir())
        run_dir.mkdir(parents=True, exist_ok=True)
        combined = run_dir / "fit_data.py"
        combined.write_text(COMBINED_DATA.format(train=train_entry, test=test_entry))
        data_entry = f"{combined.resolve()}:build"
    else:
        data_entry = train_entry
    sets += [f"model.entry={model_entry}", f"data.entry={data_entry}"]
    if loss_entry:
        sets.append(f"train.loss_entry={loss_entry}")
    cfg = load_config(overrides=sets)

    def show(kind: str, payload: dict[str, Any]) -> None:
        if not quiet and kind == "line":
            print(payload["text"], flush=True)

    summary = run_training(cfg, device=device, nproc=nproc, out_dir=run_dir, resume=resume, on_event=show)
    return Summary(summary)
