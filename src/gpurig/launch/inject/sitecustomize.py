"""Loaded at start-up by every Python process that `gpurig launch` starts (its folder is first on
PYTHONPATH). It changes two things, both only inside torchrun's workers, and then hands over to
any `sitecustomize` the user already had:

1. A default collective timeout. `init_process_group()` and `new_group()` called without
   `timeout=` get GPURIG_COLLECTIVE_TIMEOUT seconds (torch itself has no environment variable for
   this: its defaults are 10 minutes for NCCL and 30 for gloo). A `timeout=` the script passes
   is kept.
2. An error file for every worker. torchrun tells each worker where to write one
   (TORCHELASTIC_ERROR_FILE) but only scripts decorated with `@record` do; an uncaught exception
   here is written in torchrun's format, with its time, so the first failure can be found.

torch is not imported here: the patch is applied when the script itself imports
torch.distributed, so a process that never uses it pays nothing.
"""

import os
import sys


def _timeout_seconds():
    raw = os.environ.get("GPURIG_COLLECTIVE_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def _patch_c10d(module, seconds):
    import datetime
    import functools

    original = getattr(module, "init_process_group", None)
    if original is None or getattr(original, "_gpurig_patched", False):
        return

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        # The third positional parameter is `timeout`.
        if len(args) < 3 and kwargs.get("timeout") is None:
            kwargs["timeout"] = datetime.timedelta(seconds=seconds)
        return original(*args, **kwargs)

    init_process_group._gpurig_patched = True
    module.init_process_group = init_process_group
    # Subgroups (new_group, device meshes) and monitored_barrier ask this private helper for
    # their default; where this torch has it, they get the same timeout.
    if callable(getattr(module, "_get_default_timeout", None)):
        module._get_default_timeout = lambda backend: datetime.timedelta(seconds=seconds)


def _install_timeout_hook(seconds):
    import importlib.abc
    import importlib.machinery

    target = "torch.distributed.distributed_c10d"

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):
            if name != target:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader = spec.loader
            run_module = loader.exec_module

            def exec_module(module):
                run_module(module)
                try:
                    _patch_c10d(module, seconds)
                except Exception as exc:  # never break the user's import over a default
                    print(f"gpurig: could not set the collective timeout: {exc}", file=sys.stderr)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())


def _install_error_file_hook():
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or "LOCAL_RANK" not in os.environ:
        return
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            import json
            import time
            import traceback

            if not os.path.exists(path):  # a script using @record has written a better one
                now = time.time()
                data = {
                    "message": {
                        "message": f"{exc_type.__name__}: {exc}",
                        "extraInfo": {
                            "py_callstack": "".join(traceback.format_exception(exc_type, exc, tb)),
                            "timestamp": str(int(now)),
                            "gpurig_time": now,
                        },
                    }
                }
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                # Written whole or not at all: torchrun stops the other workers when one fails and
                # then reads their error files; one cut off mid-write (empty) made torchrun itself
                # die with a JSONDecodeError instead of reporting which rank failed and how.
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(data, f)
                os.replace(tmp, path)
        except Exception:
            pass  # the traceback still reaches the log below
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook


def _chain_user_sitecustomize():
    """Import the next `sitecustomize` on sys.path (the user's own), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        sys.modules.pop("sitecustomize", None)
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError:
            pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


_seconds = _timeout_seconds()
if _seconds:
    _install_timeout_hook(_seconds)
_install_error_file_hook()
_chain_user_sitecustomize()
