"""A finished worker leaves with os._exit after flushing: its last words and logs are kept."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import atexit, logging, sys
from gpurig.train.torch.worker import exit_now
atexit.register(lambda: print('finalization ran'))  # skipped: no interpreter finalization
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
logging.getLogger('w').info('logged')
print('last words', end='')
sys.stderr.write('on stderr')
exit_now(3)
"""


def test_exit_now_flushes_and_skips_finalization():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stdout == "last words"  # flushed, and no atexit hook ran
    assert "logged" in proc.stderr and "on stderr" in proc.stderr
