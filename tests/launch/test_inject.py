"""The start-up hook `gpurig launch` puts in front of every worker (launch/inject/sitecustomize.py):
a default collective timeout, an error file per worker, and the user's own sitecustomize kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpurig.launch.plan import INJECT_DIR


def _python(code: str, env: dict, tmp_path) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GPURIG_", "TORCHELASTIC_"))}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_collective_timeout_applies_to_groups_without_their_own(tmp_path):
    code = (
        "import datetime, torch.distributed as dist\n"
        "import torch.distributed.distributed_c10d as c10d\n"
        "dist.init_process_group('gloo', rank=0, world_size=1, store=dist.HashStore())\n"
        "print(dist.init_process_group._gpurig_patched, c10d._get_default_timeout('gloo').total_seconds(),"
        " c10d._get_default_timeout('nccl').total_seconds())\n"
        "dist.destroy_process_group()\n"
    )
    out = _python(code, {"PYTHONPATH": INJECT_DIR, "GPURIG_COLLECTIVE_TIMEOUT": "7"}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "7.0", "7.0"]


def test_without_the_variable_torch_is_untouched(tmp_path):
    code = "import torch.distributed as dist\nprint(hasattr(dist.init_process_group, '_gpurig_patched'))\n"
    out = _python(code, {"PYTHONPATH": INJECT_DIR}, tmp_path)
    assert out.stdout.strip() == "False"


def test_uncaught_exception_writes_torchruns_error_file(tmp_path):
    error_file = tmp_path / "attempt_0" / "1" / "error.json"
    out = _python("raise KeyError('missing column')", {
        "PYTHONPATH": INJECT_DIR, "TORCHELASTIC_ERROR_FILE": str(error_file), "LOCAL_RANK": "1",
    }, tmp_path)
    assert out.returncode == 1 and "KeyError: 'missing column'" in out.stderr  # the traceback still prints
    data = json.loads(error_file.read_text())
    assert data["message"]["message"] == "KeyError: 'missing column'"
    assert "Traceback" in data["message"]["extraInfo"]["py_callstack"]
    assert float(data["message"]["extraInfo"]["gpurig_time"]) > 0


def test_an_error_file_cut_off_mid_write_is_never_left_for_torchrun(tmp_path):
    """torchrun stops the other workers when one fails, then reads their error files: a file cut off
    mid-write made torchrun itself die with a JSONDecodeError. It is written whole or not at all."""
    error_file = tmp_path / "attempt_0" / "0" / "error.json"
    cut = ("import json\n"
           "def dump(obj, f, **kw):\n    f.write('{\"mess')\n    raise OSError('stopped mid-write')\n"
           "json.dump = dump\n"
           "raise RuntimeError('peer gone')\n")
    out = _python(cut, {"PYTHONPATH": INJECT_DIR, "TORCHELASTIC_ERROR_FILE": str(error_file), "LOCAL_RANK": "0"}, tmp_path)
    assert out.returncode == 1 and "RuntimeError: peer gone" in out.stderr
    assert not error_file.exists()


def test_users_own_sitecustomize_still_runs(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    out = _python("import builtins; print(getattr(builtins, 'USER_SITE_RAN', False))", {
        "PYTHONPATH": INJECT_DIR + os.pathsep + str(mine), "GPURIG_COLLECTIVE_TIMEOUT": "5",
    }, tmp_path)
    assert out.stdout.strip() == "True", out.stderr
