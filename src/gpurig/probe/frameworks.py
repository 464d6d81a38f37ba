"""PyTorch and TensorFlow as a training script would see them, probed in child processes.

The parent never imports either framework: importing TensorFlow or touching `torch.cuda` would
initialise CUDA here (pinning memory on GPU 0, breaking fork, hiding the real error). Each probe is
a few lines run as `python -c`, printing one JSON line; both run at once, each with a timeout. A
missing package is `installed=False`; a crash or a hang is the probe's `error`, never the doctor's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gpurig.probe.facts import FrameworkFacts, TensorFlowFacts, TorchFacts

_MARK = "GPURIG_PROBE_JSON "

# Everything is read without running a kernel. torch._C._cuda_getArchFlags() gives the compiled
# architectures even where CUDA is unusable (torch.cuda.get_arch_list() returns [] then), which is
# exactly when they matter to the diagnosis.
TORCH_SCRIPT = f"""
import json
out = {{"installed": False}}
try:
    import torch
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
else:
    out["installed"] = True
    out["version"] = torch.__version__
    out["cuda_build"] = torch.version.cuda
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    arch = flags() if flags else None
    out["arch_list"] = arch.split() if arch else None
    try:
        v = torch.backends.cudnn.version()
    except Exception:
        v = None
    if v:
        out["cudnn_version"] = f"{{v // 10000}}.{{v % 10000 // 100}}.{{v % 100}}" if v >= 90000 else f"{{v // 1000}}.{{v % 1000 // 100}}.{{v % 100}}"
    if torch.version.cuda:
        try:
            out["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:
            pass
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count())
    said = [str(w.message).strip() for w in caught if "cuda" in str(w.message).lower()]
    out["cuda_warning"] = said[0] if said else None
print({_MARK!r} + json.dumps(out), flush=True)
"""

# Keras is kept out of the TensorFlow probe: `import tensorflow` loads it eagerly (and Keras pulls in
# scikit-learn and SciPy when they are installed), which doubles the probe's time, and nothing asked
# here needs it. With sys.modules["keras"] = None, TensorFlow's own `try: import keras...` simply
# skips it. So a broken Keras install is not caught by this probe.
TF_SCRIPT = f"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.modules.setdefault("keras", None)
out = {{"installed": False}}
try:
    import tensorflow as tf
except ModuleNotFoundError as exc:
    if exc.name != "tensorflow":
        raise
else:
    out["installed"] = True
    out["version"] = tf.__version__
    info = dict(tf.sysconfig.get_build_info())
    out["cuda_build"] = info.get("cuda_version")
    out["cudnn_build"] = info.get("cudnn_version")
    out["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
    out["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
print({_MARK!r} + json.dumps(out), flush=True)
"""


@dataclass
class _Probe:
    name: str  # import name
    script: str
    proc: subprocess.Popen | None = None
    started: float = 0.0


def _child_env(environ: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    # Quiet TensorFlow's C++ start-up logging (and its cost); the user's own value wins.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def _installed(module: str, python: str, env: Mapping[str, str]) -> bool | None:
    """Whether `module` can be imported by the child; None when only the child can tell.

    Looking it up here saves a process for a framework that is not installed, but only holds when
    the child is this interpreter with this PYTHONPATH.
    """
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return None
    if env.get("PYTHONPATH") != os.environ.get("PYTHONPATH"):
        return None
    return importlib.util.find_spec(module) is not None


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the probe runs in its own session: take any children too
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _parse(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARK):
            try:
                data = json.loads(line[len(_MARK):])
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _failure(name: str, rc: int, stderr: str) -> str:
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        head = f"`import {name}` was killed by {sig}"
    elif rc == 0:
        head = f"the {name} probe printed no answer (exit code 0)"
    else:
        head = f"`import {name}` failed (exit code {rc})"
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    # The last line of a traceback is the exception; keep a little context before it.
    tail = " | ".join(lines[-3:]) if lines else "no error output"
    return f"{head}: {tail[-600:]}"


def probe_frameworks(timeout: float = 20.0, python: str | None = None,
                     environ: Mapping[str, str] | None = None,
                     scripts: Mapping[str, str] | None = None) -> FrameworkFacts:
    """Probe torch and TensorFlow in parallel child processes, each allowed `timeout` seconds.

    `scripts` replaces a probe's script (tests use it to simulate a hang or a crash).
    """
    handle = start_framework_probes(timeout=timeout, python=python, environ=environ, scripts=scripts)
    return handle.result()


class FrameworkProbes:
    """Running framework probes; `result()` waits for them (so other facts can be read meanwhile)."""

    def __init__(self, probes: list[_Probe], timeout: float, known: dict[str, bool]):
        self.probes = probes
        self.timeout = timeout
        self.known = known

    def close(self) -> None:
        """Kill any probe still running (after `result()` there is none)."""
        for p in self.probes:
            if p.proc is not None and p.proc.poll() is None:
                _kill(p.proc)
                p.proc.communicate()

    def result(self) -> FrameworkFacts:
        answers: dict[str, dict] = {}
        for p in self.probes:
            assert p.proc is not None
            left = max(0.0, p.started + self.timeout - time.monotonic())
            try:
                out, err = p.proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                _kill(p.proc)
                p.proc.communicate()
                answers[p.name] = {"installed": True,
                                   "error": f"`import {p.name}` did not finish within {self.timeout:g} s "
                                            "(a hung driver call or a very slow file system); killed"}
                continue
            data = _parse(out)
            if p.proc.returncode == 0 and data is not None:
                answers[p.name] = data
            else:
                answers[p.name] = {"installed": True, "error": _failure(p.name, p.proc.returncode, err)}
        facts = FrameworkFacts(probed=True)
        facts.torch = _build(TorchFacts, answers.get("torch"), self.known.get("torch", False))
        facts.tensorflow = _build(TensorFlowFacts, answers.get("tensorflow"), self.known.get("tensorflow", False))
        return facts


def _build(cls, data: dict | None, installed: bool):
    if data is None:
        return cls(installed=installed)
    known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
    return cls(**known)


def start_framework_probes(timeout: float = 20.0, python: str | None = None,
                           environ: Mapping[str, str] | None = None,
                           scripts: Mapping[str, str] | None = None) -> FrameworkProbes:
    """Start the probes and return at once; call `.result()` for the facts."""
    python = python or sys.executable
    env = _child_env(environ)
    chosen = {"torch": TORCH_SCRIPT, "tensorflow": TF_SCRIPT}
    chosen.update(scripts or {})
    probes, known = [], {}
    for name, script in chosen.items():
        installed = _installed(name, python, env) if not (scripts and name in scripts) else None
        if installed is False:
            known[name] = False  # not importable here: no child process needed
            continue
        p = _Probe(name=name, script=script, started=time.monotonic())
        p.proc = subprocess.Popen([python, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
        probes.append(p)
    return FrameworkProbes(probes, timeout, known)
