"""`gpurig verify` stopped from outside: SIGTERM (`kill`, a scheduler) and Ctrl-C end the whole
command, its torchrun agent and every worker, with one line and 143/130."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from tests.conftest import ROOT, assert_no_process_left

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig, code, words", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_stopped_verify_leaves_nothing_running(tmp_path, sig, code, words):
    out = tmp_path / "verify"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "gpurig", "verify", "--device", "cpu", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the workers are up
            workers = [p for p in psutil.process_iter(["cmdline"]) if "gpurig.comm.workers.worker" in
                       " ".join(p.info["cmdline"] or []) and str(out) in " ".join(p.info["cmdline"] or [])]
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert len(workers) >= 2, "the verify workers did not start"
        if sig == signal.SIGTERM:
            proc.send_signal(sig)  # to gpurig alone, as `kill PID` does
        else:
            os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: the whole foreground group
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stdout[-2000:] + stderr[-2000:]
    assert f"gpurig: stopped by {words}" in stderr and "Traceback" not in stdout + stderr
    assert_no_process_left(str(out))
