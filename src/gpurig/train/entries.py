"""Your own model, data and loss, for both frameworks: entries named `FILE.py:function` or
`package.module:function`, loaded, called with the arguments they ask for by name, and every
failure said as exit 2 naming the flag, with the user's traceback trimmed to their own code.
`train/torch/entries.py` and `train/tf/entries.py` say what each framework expects them to return.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput

PROBE_TIMEOUT_S = 300.0
FLAGS = {"model.entry": "--model", "data.entry": "--data", "train.loss_entry": "--loss"}


def _where(key: str) -> str:
    return f"{FLAGS[key]} ({key})"


def _user_traceback(exc: BaseException, roots: list[Path]) -> str:
    """The traceback of an exception raised in the user's code, only the frames in their files."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if any(Path(f.filename).resolve().is_relative_to(r) for r in roots)]
    lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}\n    {f.line}' for f in (mine or frames[-3:])]
    return "\n".join(lines + [f"{type(exc).__name__}: {exc}"])


def _package_of(path: Path) -> tuple[Path, str]:
    """For a file inside a package (folders with __init__.py): the folder above the top package and
    the file's dotted module name; else (its folder, "")."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts) if len(parts) > 1 else ""


def _import_file(path: Path, source: str, key: str) -> Any:
    root = path.parent
    module_name = f"_gpurig_user_{path.stem}_{abs(hash(str(path))) % 10**8}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise BadInput(f"{_where(key)}: {source}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # the file's own imports of its neighbours work
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the user's module raises is reported, not re-raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise BadInput(f"{_where(key)}: importing {source} raised:\n{_user_traceback(exc, [root])}") from None
    return module


def _import_named(dotted: str, source: str, key: str, roots: list[Path]) -> Any:
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name and dotted.startswith(exc.name):
            raise BadInput(f"{_where(key)}: no module named {dotted!r} (give FILE.py:function for a file)") from None
        raise BadInput(f"{_where(key)}: importing {source} raised:\n{_user_traceback(exc, roots)}") from None
    except Exception as exc:
        raise BadInput(f"{_where(key)}: importing {source} raised:\n{_user_traceback(exc, roots)}") from None


def load_entry(text: str, key: str) -> tuple[Callable[..., Any], Path]:
    """The function an entry names, and the folder of its code (for trimming tracebacks)."""
    source, sep, name = text.rpartition(":")
    if not sep or not source or not name.isidentifier():
        raise BadInput(f"{_where(key)}: {text!r} must be FILE.py:function or package.module:function")
    if source.endswith(".py") or os.sep in source or "/" in source:
        path = Path(source).expanduser()
        if not path.is_file():
            raise BadInput(f"{_where(key)}: {source}: no such file")
        path = path.resolve()
        root = path.parent
        package_root, dotted = _package_of(path)
        if dotted:  # a module of a package: imported by its name, so its relative imports work
            if str(package_root) not in sys.path:
                sys.path.insert(0, str(package_root))
            module = _import_named(dotted, source, key, [package_root])
        else:
            module = _import_file(path, source, key)
    else:
        if str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))  # package.module:function, from where the command runs
        module = _import_named(source, source, key, [Path.cwd()])
        root = Path(getattr(module, "__file__", None) or ".").resolve().parent
    fn = getattr(module, name, None)
    if fn is None:
        defined = sorted(k for k, v in vars(module).items()
                         if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == module.__name__)
        listed = ", ".join(defined[:12]) or "no public functions"
        raise BadInput(f"{_where(key)}: {source} has no {name!r} (it defines: {listed})")
    if not callable(fn):
        raise BadInput(f"{_where(key)}: {source}:{name} is a {type(fn).__name__}, not a function")
    return fn, root


def call_entry(fn: Callable[..., Any], key: str, root: Path, available: dict[str, Any]) -> Any:
    """Call an entry with the arguments it asks for by name, out of `available`."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in available.items() if takes_any or k in params}
    missing = [p.name for p in params.values() if p.default is inspect.Parameter.empty
               and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
               and p.name not in kwargs]
    if missing:
        raise BadInput(f"{_where(key)}: {fn.__name__}() needs {', '.join(missing)}, which gpurig cannot give "
                       f"(it gives by name: {', '.join(sorted(available))})")
    try:
        return fn(**kwargs)
    except Exception as exc:
        raise BadInput(f"{_where(key)}: {fn.__name__}() raised:\n{_user_traceback(exc, [root])}") from None


def model_arguments(cfg: Any, num_classes: int | None) -> dict[str, Any]:
    """What a model entry may ask for by name: the `[model]` table's keys and num_classes."""
    import dataclasses

    args = {f.name: getattr(cfg.model, f.name) for f in dataclasses.fields(cfg.model) if f.name not in ("name", "entry")}
    if num_classes is not None:
        args["num_classes"] = num_classes
    return args



def absolute_entries(cfg: Any) -> Any:
    """The config with every FILE.py entry's file made absolute (module entries stay as given)."""
    import dataclasses

    def absolute(text: str) -> str:
        source, sep, name = text.rpartition(":")
        if sep and (source.endswith(".py") or "/" in source or os.sep in source):
            return f"{Path(source).expanduser().resolve()}:{name}"
        return text

    return dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, entry=absolute(cfg.model.entry)) if cfg.model.entry else cfg.model,
        data=dataclasses.replace(cfg.data, entry=absolute(cfg.data.entry)) if cfg.data.entry else cfg.data,
        train=dataclasses.replace(cfg.train, loss_entry=absolute(cfg.train.loss_entry))
        if cfg.train.loss_entry else cfg.train,
    )


def probe_in_child(module: str, cfg: Any, env_extra: dict[str, str]) -> dict[str, Any]:
    """Run `python -m <module>` (whose main is `child_main(probe)`) on `cfg` in a child that sees no
    GPU, so the parent never initialises CUDA; its answer, or BadInput with its message."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
           **env_extra}
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([src, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    try:
        proc = subprocess.run([sys.executable, "-m", module], input=json.dumps(cfg.to_dict()),
                              capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BadInput(f"--model/--data: checking the entries took longer than {PROBE_TIMEOUT_S:.0f} s "
                       "(building the dataset or the model on the CPU)") from None
    if proc.returncode == 2:
        lines = [line for line in proc.stderr.strip().splitlines()]
        start = next((i for i, line in enumerate(lines) if line.startswith("gpurig: error: ")), 0)
        raise BadInput("\n".join(lines[start:]).removeprefix("gpurig: error: "))
    if proc.returncode != 0:
        raise BadInput(f"--model/--data: checking the entries failed (exit {proc.returncode}):\n"
                       + "\n".join(proc.stderr.strip().splitlines()[-12:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_main(probe: Callable[[Any], dict[str, Any]]) -> int:
    """The child's side of `probe_in_child`: the config on stdin, the answer as the last stdout line."""
    from gpurig.train.config import from_dict

    cfg = from_dict(json.loads(sys.stdin.read()))
    try:
        info = probe(cfg)
    except BadInput as exc:
        print(f"gpurig: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write("\n" + json.dumps(info) + "\n")
    return 0
