"""Checkpoints: atomic writes survive a crash mid-write; corrupt files are named; fallback works."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from gpurig.errors import BadInput
from gpurig.train.torch import checkpoint as ckpt

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((4,), float(step))}, "step": step, "optimizer": {}, "sampler": {"epoch": 0}}


def test_save_prunes_and_loads_the_newest(tmp_path):
    for step in (10, 20, 30):
        ckpt.save_checkpoint(_state(step), tmp_path, step, keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000000020.pt", "step-000000030.pt"]
    path, state = ckpt.load_latest(tmp_path)
    assert path.name == "step-000000030.pt" and state["step"] == 30
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))


def test_a_write_torn_by_a_crash_leaves_the_previous_checkpoint(tmp_path):
    ckpt.save_checkpoint(_state(10), tmp_path, 10)
    # A child process starts writing step 20 and dies half-way through (os._exit inside torch.save).
    code = textwrap.dedent(f"""
        import os, sys, torch
        sys.path.insert(0, {str(ROOT / "src")!r})
        from gpurig.train.torch import checkpoint as ckpt
        real = torch.save
        def torn(obj, fh, *a, **k):
            fh.write(b"PK\\x03\\x04 half a zip file")
            fh.flush()
            os._exit(9)
        torch.save = torn
        ckpt.save_checkpoint({{"model": {{}}, "step": 20}}, {str(tmp_path)!r}, 20)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000000010.pt"]
    path, state = ckpt.load_latest(tmp_path)
    assert state["step"] == 10 and torch.equal(state["model"]["w"], torch.full((4,), 10.0))


def test_corrupt_newest_is_named_and_fallback_uses_the_previous(tmp_path, capsys):
    ckpt.save_checkpoint(_state(10), tmp_path, 10)
    newest = ckpt.save_checkpoint(_state(20), tmp_path, 20)
    newest.write_bytes(newest.read_bytes()[:100])  # torn by something outside gpurig
    with pytest.raises(BadInput, match=r"step-000000020\.pt is corrupt.*--resume-fallback"):
        ckpt.load_latest(tmp_path)
    path, state = ckpt.load_latest(tmp_path, fallback=True)
    assert state["step"] == 10
    assert "step-000000020.pt" in capsys.readouterr().err


def test_loading_refuses_pickled_code(tmp_path):
    import os

    bad = ckpt.checkpoint_path(tmp_path, 5)
    bad.parent.mkdir(parents=True)
    torch.save({"model": {}, "step": 5, "evil": os.system}, bad)  # weights_only=True must refuse this
    with pytest.raises(BadInput, match="step-000000005.pt"):
        ckpt.load_checkpoint_file(bad)
