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
    if not _same_interpreter(python, env):
        return None
    return importlib.util.find_spec(module) is not None


def _same_interpreter(python: str, env: Mapping[str, str]) -> bool:
    """Whether a child `python` with `env` imports from where this process does."""
    return (os.path.realpath(python) == os.path.realpath(sys.executable)
            and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"))


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
    """Running framework probes; `result()` waits for them (so other facts can be read meanwhile).

    With `cached` (answers and when they were written) no probe runs and `result()` gives those;
    with `cache_key`, answers without an error are kept under it for the next run.
    """

    def __init__(self, probes: list[_Probe], timeout: float, known: dict[str, bool], *,
                 cached: tuple[dict, str] | None = None, cache_key: dict | None = None,
                 environ: Mapping[str, str] | None = None):
        self.probes = probes
        self.timeout = timeout
        self.known = known
        self.cached = cached
        self.cache_key = cache_key
        self.environ = environ

    def close(self) -> None:
        """Kill any probe still running (after `result()` there is none)."""
        for p in self.probes:
            if p.proc is not None and p.proc.poll() is None:
                _kill(p.proc)
                p.proc.communicate()

    def result(self) -> FrameworkFacts:
        if self.cached is not None:
            answers, written = self.cached
            facts = self._facts(answers)
            facts.from_cache = written or "unknown"
            return facts
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
        if self.cache_key is not None and not any(a.get("error") for a in answers.values()):
            from gpurig.probe import cache

            cache.store(self.cache_key, answers, self.environ)
        return self._facts(answers)

    def _facts(self, answers: dict[str, dict]) -> FrameworkFacts:
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
                           scripts: Mapping[str, str] | None = None, *,
                           use_cache: bool = False, refresh: bool = False,
                           root: str | os.PathLike = "/") -> FrameworkProbes:
    """Start the probes and return at once; call `.result()` for the facts.

    use_cache: answer from the cache (`gpurig.probe.cache`) when everything the answers depend on is
      unchanged, and keep fresh answers there; refresh: probe anyway and rewrite the cache. The cache
      is used only for this interpreter with this PYTHONPATH and the real probe scripts.
    """
    python = python or sys.executable
    env = _child_env(environ)
    chosen = {"torch": TORCH_SCRIPT, "tensorflow": TF_SCRIPT}
    chosen.update(scripts or {})
    key = None
    if use_cache and not scripts and _same_interpreter(python, env):
        from gpurig.probe import cache

        key = cache.probe_key(python, environ, root)
        hit = None if refresh else cache.load(key, environ)
        if hit is not None:
            return FrameworkProbes([], timeout, {}, cached=hit)
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
    return FrameworkProbes(probes, timeout, known, cache_key=key, environ=environ)


def cached_framework_answers(environ: Mapping[str, str] | None = None,
                             root: str | os.PathLike = "/") -> FrameworkProbes | None:
    """The cached answers for this interpreter and machine, without probing; None when there are none."""
    env = _child_env(environ)
    if not _same_interpreter(sys.executable, env):
        return None
    from gpurig.probe import cache

    hit = cache.load(cache.probe_key(sys.executable, environ, root), environ)
    return None if hit is None else FrameworkProbes([], 0.0, {}, cached=hit)


def _assignments(path: str) -> dict[str, object]:
    """Top-level `NAME = literal` lines of a Python file, without running it."""
    import ast

    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, object] = {}
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            if isinstance(value, ast.Call) and value.args:  # build_info = OrderedDict([...])
                value = value.args[0]
            try:
                out[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return out


def read_framework_files(paths: list[str] | None = None) -> FrameworkFacts:
    """Versions and CUDA builds from the packages' own files (`torch/version.py`, TensorFlow's
    `build_info.py` and its distribution metadata), importing neither: what `--fast` can say.

    `probed` stays False: whether CUDA works in them is not known without importing them. The
    packages are looked up on `paths` (default sys.path), never in sys.modules.
    """
    from importlib import metadata
    from importlib.machinery import PathFinder

    facts = FrameworkFacts(probed=False)
    spec = PathFinder.find_spec("torch", paths)
    if spec is not None:
        facts.torch.installed = True
        for loc in spec.submodule_search_locations or ():
            got = _assignments(os.path.join(loc, "version.py"))
            if got:
                facts.torch.version = got.get("__version__") if isinstance(got.get("__version__"), str) else None
                facts.torch.cuda_build = got.get("cuda") if isinstance(got.get("cuda"), str) else None
                break
    spec = PathFinder.find_spec("tensorflow", paths)
    if spec is not None:
        facts.tensorflow.installed = True
        for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-gpu"):
            found = list(metadata.distributions(name=dist, **({} if paths is None else {"path": paths})))
            if found:
                facts.tensorflow.version = found[0].version
                break
        for loc in spec.submodule_search_locations or ():
            info = _assignments(os.path.join(loc, "python", "platform", "build_info.py")).get("build_info")
            if isinstance(info, (list, tuple)):
                try:
                    info = dict(info)
                except (TypeError, ValueError):
                    info = None
            if isinstance(info, dict):
                cuda = info.get("cuda_version")
                facts.tensorflow.cuda_build = cuda if isinstance(cuda, str) else None
                cudnn = info.get("cudnn_version")
                facts.tensorflow.cudnn_build = cudnn if isinstance(cudnn, str) else None
                facts.tensorflow.built_with_cuda = bool(info.get("is_cuda_build"))
                break
    return facts
