"""Shared test fixtures: markers that skip without hardware, and guards against leaks.

Tests never leave a process, an environment variable or a process group behind.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored in every
# process started from it: the tests that press Ctrl-C on gpurig would send it to processes that
# cannot receive it. A Python handler is not inherited (exec resets it to the default), so this
# gives the processes the tests start the disposition a terminal gives them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RIGS = FIXTURES / "rigs"


def _cuda_gpu_count() -> int:
    # Ask a child process, so the test process itself never initialises CUDA.
    if importlib.util.find_spec("torch") is None:
        return 0
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"],
            capture_output=True, text=True, timeout=120,
        )
        return int(out.stdout.strip() or 0)
    except Exception:
        return 0


_GPU_COUNT: int | None = None


def cuda_gpu_count() -> int:
    global _GPU_COUNT
    if _GPU_COUNT is None:
        _GPU_COUNT = _cuda_gpu_count() if shutil.which("nvidia-smi") or os.path.exists("/dev/nvidia0") else 0
    return _GPU_COUNT


# Figures a test measured (`record_property("explain_rates", json)`), printed at the end of the
# run. The property travels in the test's report, so this works across xdist workers too.
_MEASURED: dict[str, str] = {}


def pytest_runtest_logreport(report):
    if report.when == "call":
        for name, value in getattr(report, "user_properties", ()):
            if name in ("explain_rates", "lint_rates"):
                _MEASURED[name] = value


def pytest_terminal_summary(terminalreporter):
    import json

    if "explain_rates" in _MEASURED:
        rates = json.loads(_MEASURED["explain_rates"])
        terminalreporter.section("gpurig explain on real logs")
        for part in ("dev", "test"):
            r = rates[part]
            terminalreporter.write_line(
                f"{part:4s} ({r['cases']} threads): first answer right {r['first_right']:.1%}, within three "
                f"{r['top3_right']:.1%}, confidently wrong {r['confidently_wrong']:.1%}, nothing said {r['nothing']:.1%}")
    if "lint_rates" in _MEASURED:
        rates = json.loads(_MEASURED["lint_rates"])
        terminalreporter.section("gpurig lint on real scripts")
        for part in ("dev", "test"):
            r = rates[part]
            terminalreporter.write_line(f"{part:4s} ({r['scripts']} scripts): precision {r['precision']:.1%} "
                                        f"({r['findings']} findings), recall {r['recall']:.1%} ({r['mistakes']} judged mistakes)")


_CACHE_MADE: str | None = None


def pytest_configure(config):
    # The doctor keeps framework answers in the user's cache folder: the suite keeps its own, so
    # it neither reads a developer's cache nor writes into their home.
    global _CACHE_MADE
    if not os.environ.get("GPURIG_CACHE_DIR"):
        import tempfile

        _CACHE_MADE = tempfile.mkdtemp(prefix="gpurig-test-cache-")
        os.environ["GPURIG_CACHE_DIR"] = _CACHE_MADE


def pytest_unconfigure(config):
    if _CACHE_MADE:
        shutil.rmtree(_CACHE_MADE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    has_tf = importlib.util.find_spec("tensorflow") is not None
    gpu_items = [i for i in items if "gpu" in i.keywords]
    gpus = cuda_gpu_count() if gpu_items else 0
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("gpu"))  # one at a time on the machine's GPUs
        else:
            # Tests sharing a module-scoped fixture (a reference training run) go to one test
            # process, so the fixture is built once rather than once per process.
            info = getattr(item, "_fixtureinfo", None)
            shared = sorted(name for name, defs in (info.name2fixturedefs.items() if info else ())
                            if defs and defs[-1].scope == "module" and name in item.fixturenames)
            if shared:
                item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{shared[0]}"))
        if "gpu" in item.keywords and gpus == 0:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "tf" in item.keywords and not has_tf:
            item.add_marker(pytest.mark.skip(reason="needs TensorFlow (pip install 'gpurig[tf]')"))


@pytest.fixture(autouse=True)
def _no_env_leak():
    """Fail a test that leaves an environment variable changed."""
    before = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    yield
    after = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    if before != after:
        changed = sorted(set(before.items()) ^ set(after.items()))
        current = os.environ.get("PYTEST_CURRENT_TEST")
        os.environ.clear()
        os.environ.update(before)
        if current is not None:
            os.environ["PYTEST_CURRENT_TEST"] = current
        pytest.fail(f"test leaked environment changes: {changed[:5]}")


@pytest.fixture(autouse=True)
def _no_child_leak():
    """Fail a test that leaves a child process running."""
    yield
    try:
        import psutil  # optional; present on most machines that run the suite
    except ImportError:
        return
    children = [c for c in psutil.Process().children(recursive=True) if c.is_running() and c.status() != "zombie"]
    if children:
        for c in children:
            c.kill()
        pytest.fail(f"test left processes behind: {[c.pid for c in children]}")


@pytest.fixture
def run_cli():
    """Run the real entry point (`python -m gpurig ...`) in a child process; returns CompletedProcess."""

    def _run(*args: str, env: dict | None = None, timeout: float = 300, input: str | None = None, cwd=None):
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.setdefault("COLUMNS", "120")
        if env:
            full_env.update(env)
        return subprocess.run(
            [sys.executable, "-m", "gpurig", *args],
            capture_output=True, text=True, timeout=timeout, env=full_env, input=input, cwd=cwd,
        )

    return _run


def assert_no_process_left(marker: str, wait: float = 15.0) -> None:
    """No process anywhere whose command line mentions `marker` (the run directory), within `wait`
    seconds (a stopped worker may still be exiting)."""
    import time

    import psutil

    deadline = time.monotonic() + wait
    while True:
        left = []
        for p in psutil.process_iter(["cmdline", "status"]):
            try:
                if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                    left.append(p)
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, [p.info["cmdline"] for p in left]



def signal_after(proc: subprocess.Popen, needle: str, send, limit: float = 180, settle: float = 0.0,
                 wait: float = 120) -> str:
    """Read `proc`'s output until a line holds `needle` (or `limit` seconds pass), wait `settle`
    seconds, call `send()` (the signal, as a terminal or a scheduler would send it), and return
    everything it printed. The process is killed if it outlives `wait` seconds after that."""
    import time

    lines, deadline = [], time.monotonic() + limit
    try:
        for line in proc.stdout:
            lines.append(line)
            if needle in line or time.monotonic() > deadline:
                break
        time.sleep(settle)
        send()
        rest, _ = proc.communicate(timeout=wait)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return "".join(lines) + rest
