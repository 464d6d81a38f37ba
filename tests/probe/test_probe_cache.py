"""The framework probes' cache: a repeated doctor imports nothing, and any change that could alter
an answer (a package installed, the driver, the GPUs, the environment) makes it probe again.

The probe scripts are replaced by stand-ins that answer at once and count their runs, so these
tests see exactly when a child process is started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpurig.probe import cache
from gpurig.probe import frameworks as fw


def _stand_in(counter: Path, torch_version: str = "2.99.0", fail: bool = False) -> str:
    body = f"""
import json
with open({str(counter)!r}, "a") as fh:
    fh.write("x")
{"raise SystemExit('libcudart.so.13: cannot open shared object file')" if fail else ""}
print({fw._MARK!r} + json.dumps({{"installed": True, "version": {torch_version!r}, "cuda_build": "13.0",
                                 "cuda_available": False, "device_count": 0}}), flush=True)
"""
    return body


@pytest.fixture
def probes(tmp_path, monkeypatch):
    """Stand-in probes that count their runs; a private cache folder and a private package folder."""
    counter = tmp_path / "runs"
    counter.write_text("")
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("GPURIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fw, "TORCH_SCRIPT", _stand_in(counter))
    monkeypatch.setattr(fw, "TF_SCRIPT", _stand_in(counter, "2.21.0"))
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    root = tmp_path / "root"
    (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (root / "proc" / "driver" / "nvidia" / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05\n")

    class P:
        def run(self, **kw):
            kw.setdefault("root", root)
            kw.setdefault("use_cache", True)
            return fw.start_framework_probes(timeout=60, **kw).result()

        def runs(self) -> int:
            return len(counter.read_text())

    p = P()
    p.counter, p.site, p.root = counter, site, root
    return p


def test_a_second_run_answers_from_the_cache_without_starting_a_process(probes, monkeypatch):
    first = probes.run()
    assert first.from_cache is None and first.torch.version == "2.99.0"
    ran = probes.runs()
    assert ran >= 1

    def no_process(*a, **kw):
        raise AssertionError("a probe process was started although the answers were cached")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    second = probes.run()
    assert probes.runs() == ran
    assert second.from_cache and second.probed is True
    assert second.torch.version == "2.99.0" and second.torch.cuda_build == "13.0"
    assert second.tensorflow == first.tensorflow


def test_refresh_probes_again_and_rewrites_the_answers(probes, monkeypatch, tmp_path):
    probes.run()
    ran = probes.runs()
    monkeypatch.setattr(fw, "TORCH_SCRIPT", _stand_in(probes.counter, "3.0.0"))
    fresh = probes.run(refresh=True)
    assert probes.runs() > ran and fresh.torch.version == "3.0.0" and fresh.from_cache is None
    assert probes.run().torch.version == "3.0.0"  # the refreshed answer is the one kept


@pytest.mark.parametrize("change", ["package installed", "package upgraded", "environment", "driver", "a GPU added"])
def test_anything_that_could_change_an_answer_makes_it_probe_again(probes, change):
    (probes.site / "nccl_pkg-2.27.0.dist-info").mkdir()
    probes.run()
    ran = probes.runs()
    kw = {}
    if change == "package installed":
        (probes.site / "flash_attn-2.8.0.dist-info").mkdir()
    elif change == "package upgraded":  # e.g. pip install -U nvidia-nccl-cu13 under the same torch
        (probes.site / "nccl_pkg-2.27.0.dist-info").rename(probes.site / "nccl_pkg-2.28.9.dist-info")
    elif change == "environment":
        kw["environ"] = {**os.environ, "CUDA_VISIBLE_DEVICES": "1"}
    elif change == "driver":
        (probes.root / "proc" / "driver" / "nvidia" / "version").write_text(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.10.01\n")
    else:
        dev = probes.root / "sys" / "bus" / "pci" / "devices" / "0000:1b:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
    facts = probes.run(**kw)
    assert probes.runs() > ran, f"{change}: the cached answer was used"
    assert facts.from_cache is None


def test_an_answer_with_an_error_is_never_kept(probes, monkeypatch):
    monkeypatch.setattr(fw, "TORCH_SCRIPT", _stand_in(probes.counter, fail=True))
    broken = probes.run()
    assert "libcudart.so.13" in broken.torch.error
    ran = probes.runs()
    again = probes.run()
    assert probes.runs() > ran and again.from_cache is None  # probed again, the error is live


def test_a_damaged_or_unwritable_cache_is_not_used(probes, monkeypatch, tmp_path):
    probes.run()
    for f in (tmp_path / "cache").glob("frameworks-*.json"):
        f.write_text('{"key": ')  # cut short
    ran = probes.runs()
    assert probes.run().from_cache is None and probes.runs() > ran
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("GPURIG_CACHE_DIR", str(blocker))
    assert probes.run().torch.version == "2.99.0"  # answers anyway, keeps nothing


def test_without_the_cache_asked_for_nothing_is_read_or_kept(probes, tmp_path):
    probes.run(use_cache=False)
    probes.run(use_cache=False)
    assert probes.runs() >= 2
    assert not (tmp_path / "cache").exists()


def test_the_cache_folder_follows_the_conventions(monkeypatch, tmp_path):
    assert cache.cache_dir({"GPURIG_CACHE_DIR": "/x/y"}) == Path("/x/y")
    assert cache.cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/gpurig")
    assert cache.cache_dir({"HOME": str(tmp_path)}).name == "gpurig"


def test_fast_reads_versions_from_the_packages_files_without_importing_them(tmp_path):
    site = tmp_path / "site"
    torch = site / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (torch / "version.py").write_text("from typing import Optional\n__version__ = '2.14.1+cu130'\n"
                                      "cuda: Optional[str] = '13.0'\ngit_version = 'abc'\n")
    tf = site / "tensorflow"
    (tf / "python" / "platform").mkdir(parents=True)
    (tf / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (tf / "python" / "platform" / "build_info.py").write_text(
        "import collections\nbuild_info = collections.OrderedDict([('cuda_version', '12.5.1'), "
        "('cudnn_version', '9'), ('is_cuda_build', True)])\n")
    meta = site / "tensorflow-2.20.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow\nVersion: 2.20.0\n")
    facts = fw.read_framework_files([str(site)])
    assert facts.probed is False
    assert (facts.torch.installed, facts.torch.version, facts.torch.cuda_build) == (True, "2.14.1+cu130", "13.0")
    t = facts.tensorflow
    assert (t.installed, t.version, t.cuda_build, t.cudnn_build, t.built_with_cuda) == (True, "2.20.0", "12.5.1", "9", True)
    empty = fw.read_framework_files([str(tmp_path / "nothing")])
    assert not empty.torch.installed and not empty.tensorflow.installed


def test_doctor_refresh_cannot_go_with_a_saved_snapshot(run_cli, tmp_path):
    facts = tmp_path / "rig.json"
    facts.write_text(json.dumps({"gpus": []}))
    r = run_cli("doctor", "--facts", str(facts), "--refresh")
    assert r.returncode == 2
    assert "--refresh" in r.stderr


def test_a_second_doctor_uses_the_cache_and_says_so(run_cli, tmp_path):
    env = {"GPURIG_CACHE_DIR": str(tmp_path / "cache")}
    first = json.loads(run_cli("doctor", "--json", env=env).stdout)
    second = run_cli("doctor", env=env)
    again = json.loads(run_cli("doctor", "--json", env=env).stdout)
    assert first["facts"]["frameworks"]["from_cache"] is None
    assert again["facts"]["frameworks"]["from_cache"]
    for name in ("torch", "tensorflow"):
        assert again["facts"]["frameworks"][name] == first["facts"]["frameworks"][name]
    assert "--refresh probes again" in second.stdout
    fresh = json.loads(run_cli("doctor", "--json", "--refresh", env=env).stdout)
    assert fresh["facts"]["frameworks"]["from_cache"] is None
