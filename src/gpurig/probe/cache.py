"""The framework probes' answers, kept between runs so that a repeated `gpurig doctor` needs no import.

Importing PyTorch and TensorFlow is most of the doctor's time (seconds), yet their answers change
only when something they depend on changes. An answer is kept in the user's cache folder under a
key made of everything that can change it, all read without importing anything:

- the interpreter (its real path and version);
- the packages installed where it imports from (every `*.dist-info` / `*.egg-info` name: an install,
  upgrade or removal of any package, the NVIDIA library wheels included, changes the key), and the
  modification times of `torch/version.py` and TensorFlow's `build_info.py` (source builds);
- the environment that decides what a framework finds (`CUDA_*`, `NVIDIA_*`, `LD_*`, `PYTHON*`,
  `TF_*`, `TORCH_*`, `PYTORCH_*`, `XLA_*`, `HIP_*`, `ROCR_*`);
- the driver and the GPUs: the kernel module's version line, the NVIDIA devices on the PCI bus and
  the driver bound to each, the `/dev/nvidia*` nodes, and the boot id (so the first doctor after a
  reboot probes again).

Only answers without a probe error are kept. `gpurig doctor --refresh` ignores (and rewrites) the
cache; `GPURIG_CACHE_DIR` moves it (default `$XDG_CACHE_HOME/gpurig`, else `~/.cache/gpurig`). A
cache that cannot be read or written is simply not used.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

_ENV_PREFIXES = ("CUDA_", "NVIDIA_", "LD_", "PYTHON", "TF_", "TORCH_", "PYTORCH_", "XLA_", "HIP_", "ROCR_")
_KEEP = 8  # cache files kept; older ones are removed when a new one is written
SCHEMA = 1


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("GPURIG_CACHE_DIR"):
        return Path(env["GPURIG_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpurig"


def _mtime(path: str | os.PathLike) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _installed_names(paths: list[str]) -> list[str]:
    names: list[str] = []
    for entry in paths:
        if entry in ("", ".") or not os.path.isdir(entry):
            continue  # the working folder (which may hold a million data files) and zip archives
        try:
            with os.scandir(entry) as it:
                names.extend(f"{entry}/{d.name}" for d in it
                             if d.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth")))
        except OSError:
            continue
    return sorted(names)


def _package_files(paths: list[str]) -> dict[str, int | None]:
    """Modification times of the files that hold a framework's build facts, where present."""
    out: dict[str, int | None] = {}
    for rel in ("torch/version.py", "tensorflow/python/platform/build_info.py"):
        for entry in paths:
            p = os.path.join(entry or ".", rel)
            m = _mtime(p)
            if m is not None:
                out[rel] = m
                break
    return out


def _hardware(root: str | os.PathLike) -> dict[str, object]:
    """The driver and the GPUs as the probe reads them anyway (kernel module, PCI functions), the
    device nodes, and the boot id."""
    from gpurig.probe.pci import read_kernel_module, read_pci_devices

    base = Path(root)
    try:
        nodes = sorted(n for n in os.listdir(base / "dev") if n.startswith("nvidia"))
    except OSError:
        nodes = []
    return {
        "module": list(read_kernel_module(root)),
        "pci": [[d.slot, d.device_id, d.kind, d.driver] for d in read_pci_devices(root) or []],
        "dev": nodes,
        "boot": _boot_id(base),
    }


def _boot_id(base: Path) -> str:
    try:
        return (base / "proc" / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def probe_key(python: str, environ: Mapping[str, str] | None = None, root: str | os.PathLike = "/",
              paths: list[str] | None = None) -> dict[str, object]:
    """Everything that can change what the framework probes answer, read without importing them."""
    env = os.environ if environ is None else environ
    paths = list(sys.path if paths is None else paths)
    return {
        "schema": SCHEMA,
        "python": [os.path.realpath(python), sys.version],
        "installed": _installed_names(paths),
        "files": _package_files(paths),
        "env": {k: v for k, v in sorted(env.items()) if k.startswith(_ENV_PREFIXES)},
        "hardware": _hardware(root),
    }


def _file_for(key: Mapping[str, object], environ: Mapping[str, str] | None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir(environ) / f"frameworks-{digest}.json"


def load(key: Mapping[str, object], environ: Mapping[str, str] | None = None) -> tuple[dict, str] | None:
    """(answers, when written) for this key, or None."""
    path = _file_for(key, environ)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != json.loads(json.dumps(key)):
        return None
    answers = data.get("answers")
    if not isinstance(answers, dict) or not all(isinstance(v, dict) for v in answers.values()):
        return None
    return answers, str(data.get("written") or "")


def store(key: Mapping[str, object], answers: Mapping[str, dict], environ: Mapping[str, str] | None = None) -> Path | None:
    """Keep answers for this key (atomically); None when the cache folder cannot be written."""
    path = _file_for(key, environ)
    doc = {"key": key, "answers": dict(answers),
           "written": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return None
    _prune(path.parent)
    return path


def _prune(folder: Path) -> None:
    try:
        files = sorted(folder.glob("frameworks-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in files[_KEEP:]:
        try:
            old.unlink()
        except OSError:
            pass
