"""Framework probes: the real torch here, and stand-in packages that are missing, crash or hang.

The stand-ins are packages named `torch` / `tensorflow` placed first on the child's PYTHONPATH, so
the real probe scripts run unchanged and meet exactly what a user's broken install would give them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpurig.probe.frameworks import probe_frameworks


def shadow(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    """An environment whose Python finds `name` in tmp_path first, with `body` as its __init__."""
    pkg = tmp_path / "shadow" / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(body)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tmp_path / "shadow") + os.pathsep + env.get("PYTHONPATH", "")
    return env


MISSING = "raise ModuleNotFoundError(\"No module named '{0}'\", name='{0}')\n"


def test_the_installed_torch_is_found(tmp_path):
    env = shadow(tmp_path, "tensorflow", MISSING.format("tensorflow"))  # keep this test to torch alone
    facts = probe_frameworks(timeout=120, environ=env)
    t = facts.torch
    assert facts.probed is True
    assert t.installed is True and t.error is None
    assert t.version.startswith("2.")
    assert isinstance(t.cuda_available, bool) and isinstance(t.device_count, int)
    if t.cuda_build:  # a CUDA build lists its compiled GPU architectures even without a GPU
        assert t.arch_list and all(a.startswith(("sm_", "compute_")) for a in t.arch_list)
        assert t.nccl_version and t.nccl_version.count(".") == 2
    assert facts.tensorflow.installed is False and facts.tensorflow.error is None


def test_a_missing_package_is_installed_false_not_an_error(tmp_path):
    env = shadow(tmp_path, "torch", MISSING.format("torch"))
    shadow(tmp_path, "tensorflow", MISSING.format("tensorflow"))
    facts = probe_frameworks(timeout=60, environ=env)
    assert facts.torch.installed is False and facts.torch.error is None and facts.torch.version is None
    assert facts.tensorflow.installed is False


def test_an_import_that_crashes_is_reported_with_its_message(tmp_path):
    env = shadow(tmp_path, "torch", "raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    shadow(tmp_path, "tensorflow", "import os\nos.abort()\n")
    facts = probe_frameworks(timeout=60, environ=env)
    assert facts.torch.installed is True
    assert "exit code 1" in facts.torch.error and "libcudart.so.13: cannot open shared object file" in facts.torch.error
    assert "SIGABRT" in facts.tensorflow.error


def test_a_hanging_import_is_killed_and_reported_as_a_timeout(tmp_path):
    # Both imports hang, so the outcome does not depend on how fast a loaded machine starts Python.
    env = shadow(tmp_path, "torch", "import time\ntime.sleep(600)\n")
    shadow(tmp_path, "tensorflow", "import time\ntime.sleep(600)\n")
    facts = probe_frameworks(timeout=3.0, environ=env)
    for fw in (facts.torch, facts.tensorflow):
        assert fw.installed is True
        assert "did not finish within 3 s" in fw.error and "killed" in fw.error
    # (the autouse fixture fails this test if a hung child were left running)


def test_a_probe_that_prints_no_answer_is_an_error(tmp_path):
    env = shadow(tmp_path, "tensorflow", MISSING.format("tensorflow"))
    facts = probe_frameworks(timeout=30, environ=env, scripts={"torch": "print('hello')"})
    assert facts.torch.error and "exit code 0" in facts.torch.error


@pytest.mark.tf
def test_the_installed_tensorflow_is_found(tmp_path):
    env = shadow(tmp_path, "torch", MISSING.format("torch"))  # keep this test to TensorFlow alone
    facts = probe_frameworks(timeout=120, environ=env)
    tf = facts.tensorflow
    assert tf.installed is True and tf.error is None
    assert tf.version.startswith("2.")
    assert isinstance(tf.built_with_cuda, bool)
    assert isinstance(tf.gpus, list)
    if not tf.built_with_cuda:
        assert tf.cuda_build is None and tf.gpus == []


def test_the_warning_torch_gives_when_cuda_cannot_start_is_kept(tmp_path):
    # A stand-in torch whose CUDA check warns the way a too-old driver makes the real one warn.
    body = (
        "import warnings\n"
        "__version__ = '2.9.0+cu130'\n"
        "class version:\n    cuda = '13.0'\n"
        "class _C:\n    @staticmethod\n    def _cuda_getArchFlags():\n        return 'sm_80 sm_90'\n"
        "class backends:\n    class cudnn:\n        @staticmethod\n        def version():\n            return 91002\n"
        "class cuda:\n"
        "    class nccl:\n        @staticmethod\n        def version():\n            return (2, 27, 7)\n"
        "    @staticmethod\n    def is_available():\n"
        "        warnings.warn('CUDA initialization: The NVIDIA driver on your system is too old (found version 12020).')\n"
        "        return False\n"
        "    @staticmethod\n    def device_count():\n        return 0\n"
    )
    env = shadow(tmp_path, "torch", body)
    shadow(tmp_path, "tensorflow", MISSING.format("tensorflow"))
    t = probe_frameworks(timeout=60, environ=env).torch
    assert (t.version, t.cuda_build, t.cudnn_version, t.nccl_version) == ("2.9.0+cu130", "13.0", "9.10.2", "2.27.7")
    assert t.arch_list == ["sm_80", "sm_90"] and t.cuda_available is False
    assert "driver on your system is too old (found version 12020)" in t.cuda_warning
