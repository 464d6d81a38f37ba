"""Without PyTorch (`pip install gpurig`, the plain install), the commands that run PyTorch stop
before starting any process, with one line that says what to install; the doctor calls it an error."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import gpurig.errors
from gpurig.cli import app, main


def run(argv, capsys):
    """The real entry point in this process: (exit code, stdout + stderr)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    out = capsys.readouterr()
    return done.value.code, out.out + out.err


@pytest.fixture
def no_torch(monkeypatch):
    real = gpurig.errors.framework_installed
    monkeypatch.setattr(gpurig.errors, "framework_installed", lambda m: False if m == "torch" else real(m))
    started = []
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or pytest.fail(f"a process was started: {a}"))
    return started


@pytest.mark.parametrize("argv", [
    ["verify", "--device", "cpu"],
    ["bench", "comm", "--device", "cpu"],
    ["bench", "train", "--device", "cpu"],
    ["train", "--device", "cpu"],
    ["launch", "--device", "cpu", "train.py"],
])
def test_commands_that_run_pytorch_stop_with_one_line(no_torch, argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    code, output = run(argv, capsys)
    assert code == 1, output
    assert output.count("PyTorch is not installed") == 1 and "pip install 'gpurig[torch]'" in output
    assert "Traceback" not in output and no_torch == []


def test_launch_dry_run_shows_the_plan_without_pytorch(no_torch, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    result = CliRunner().invoke(app, ["launch", "--dry-run", "--device", "cpu", "train.py"])
    assert result.exit_code == 0, result.output


def test_the_doctor_calls_a_missing_pytorch_an_error_on_any_host():
    import json
    from pathlib import Path

    from gpurig.diagnose.rules import judge
    from gpurig.probe.facts import RigFacts, TorchFacts

    rigs = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"
    for name in ("laptop_no_gpu", "h200x2"):
        facts = RigFacts.from_dict(json.loads((rigs / f"{name}.json").read_text()))
        facts.frameworks.probed = True
        facts.frameworks.torch = TorchFacts(installed=False)
        (finding,) = [f for f in judge(facts) if f.id == "torch-not-installed"]
        assert finding.severity == "error" and "gpurig[torch]" in finding.fix, name
