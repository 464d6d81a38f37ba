"""Shell completion, as typer provides it: `gpurig --install-completion` / `--show-completion`."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bash_completion_script_names_gpurig():
    # typer finds the shell from the process tree (shellingham): run it from bash, as a user does.
    # (`; true` keeps bash from exec-ing the command, so bash stays its parent.)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -m gpurig --show-completion; true"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert "_gpurig_completion" in out.stdout and "complete" in out.stdout, out.stderr
