"""`gpurig launch` refuses bad input before anything runs: exit 2, a message naming the file or flag,
no plan printed, no preflight, no run directory, no process started."""

from __future__ import annotations

import json
import os

import pytest


def _refused(out, tmp_path) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.startswith("gpurig: error: ")
    assert "Traceback" not in out.stderr
    assert "--- workers ---" not in out.stdout and "preflight" not in out.stdout
    assert not (tmp_path / "runs").exists()  # no run directory: torchrun never started


def test_script_with_a_syntax_error_stops_before_launch(run_cli, tmp_path):
    source = "import os\nprint('hello'\n"
    (tmp_path / "syn.py").write_text(source)
    with pytest.raises(SyntaxError) as python_says:
        compile(source, "syn.py", "exec")
    out = run_cli("launch", "--device", "cpu", "syn.py", cwd=tmp_path)
    _refused(out, tmp_path)
    # The file, the line and Python's own words for the error.
    line = out.stderr.strip()
    assert line.startswith("gpurig: error: SCRIPT syn.py: not valid Python (line 2: ")
    assert python_says.value.msg in line and "print('hello'" in line


def test_script_that_is_not_utf8_text_stops_before_launch(run_cli, tmp_path):
    (tmp_path / "latin.py").write_bytes(b"import os\nname = '\xe9t\xe9'\n")
    out = run_cli("launch", "--device", "cpu", "latin.py", cwd=tmp_path)
    _refused(out, tmp_path)
    assert "SCRIPT latin.py: not UTF-8 text (line 2: byte 0xe9)" in out.stderr
    lint = run_cli("lint", "latin.py", cwd=tmp_path)  # `gpurig lint` reads a script the same way
    assert lint.returncode == 2 and lint.stderr == out.stderr
    # Declared as Python allows, the same bytes are a valid script.
    (tmp_path / "declared.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n")
    out = run_cli("launch", "--dry-run", "--device", "cpu", "declared.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_script_stops_before_launch(run_cli, tmp_path):
    script = tmp_path / "secret.py"
    script.write_text("print('hi')\n")
    script.chmod(0)
    out = run_cli("launch", "--device", "cpu", "secret.py", cwd=tmp_path)
    _refused(out, tmp_path)
    assert "SCRIPT secret.py: cannot read it (Permission denied)" in out.stderr


def test_directory_as_script_is_named_a_directory(run_cli, tmp_path):
    (tmp_path / "project").mkdir()
    out = run_cli("launch", "--device", "cpu", "project", cwd=tmp_path)
    _refused(out, tmp_path)
    assert out.stderr.strip() == "gpurig: error: SCRIPT project: is a directory, not a script"
    out = run_cli("launch", "--device", "cpu", "missing.py", cwd=tmp_path)
    _refused(out, tmp_path)
    assert out.stderr.strip() == "gpurig: error: SCRIPT missing.py: no such file (use -m for a module)"


def test_module_is_not_parsed(run_cli, tmp_path):
    (tmp_path / "syn.py").write_text("def f(:\n")
    out = run_cli("launch", "--dry-run", "--json", "--device", "cpu", "-m", "syn", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["plan"]["argv"][-2:] == ["--module", "syn"]


def test_run_dir_that_is_a_file_is_refused_before_preflight(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "taken").write_text("not a folder\n")
    out = run_cli("launch", "--device", "cpu", "--run-dir", "taken", "train.py", cwd=tmp_path)
    _refused(out, tmp_path)
    assert out.stderr.strip() == "gpurig: error: --run-dir taken: exists and is a file, not a folder"
    assert "gpurig launch:" not in out.stdout  # refused before the plan is even printed
    assert (tmp_path / "taken").read_text() == "not a folder\n"


def test_run_dir_under_a_file_is_refused(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "taken").write_text("not a folder\n")
    run_dir = os.path.join("taken", "run1")
    out = run_cli("launch", "--device", "cpu", "--run-dir", run_dir, "train.py", cwd=tmp_path)
    _refused(out, tmp_path)
    assert out.stderr.startswith(f"gpurig: error: --run-dir {run_dir}: taken is a file, not a folder")


def test_run_dir_holding_an_earlier_launch_is_refused_without_force(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    earlier = tmp_path / "run"
    (earlier / "logs" / "none_abc" / "attempt_0" / "0").mkdir(parents=True)
    (earlier / "result.json").write_text('{"result": {"status": "failed"}}\n')
    (earlier / "launcher.log").write_text("the earlier run\n")
    for flags in ([], ["--dry-run"]):
        out = run_cli("launch", *flags, "--device", "cpu", "--run-dir", "run", "train.py", cwd=tmp_path)
        _refused(out, tmp_path)
        assert out.stderr.startswith("gpurig: error: --run-dir run: holds an earlier launch (result.json, launcher.log, logs/)")
        assert "--force" in out.stderr
    # Nothing of the earlier launch was touched.
    assert (earlier / "result.json").read_text() == '{"result": {"status": "failed"}}\n'
    assert (earlier / "launcher.log").read_text() == "the earlier run\n"
    assert (earlier / "logs" / "none_abc" / "attempt_0" / "0").is_dir()


def test_empty_run_dir_is_used(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "run").mkdir()
    out = run_cli("launch", "--dry-run", "--json", "--device", "cpu", "--run-dir", "run", "train.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["plan"]["run_dir"] == "run"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_run_dir_that_cannot_be_created_is_refused_before_preflight(run_cli, tmp_path):
    # /proc grants root every permission and still refuses a new folder: only trying tells.
    (tmp_path / "train.py").write_text("print('hi')\n")
    out = run_cli("launch", "--device", "cpu", "--run-dir", "/proc/gpurig-run", "train.py", cwd=tmp_path)
    _refused(out, tmp_path)
    assert out.stderr.startswith("gpurig: error: --run-dir /proc/gpurig-run: cannot create it")


def test_trying_the_run_dir_leaves_nothing_when_the_launch_stops_early(run_cli, tmp_path):
    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.DataParallel(torch.nn.Linear(1, 1))\n")
    out = run_cli("launch", "--strict", "--no-preflight", "--device", "cpu", "--run-dir", "new/run", "train.py", cwd=tmp_path)
    assert out.returncode == 1 and "--strict" in out.stdout
    assert not (tmp_path / "new").exists()


def test_a_fault_of_the_preflight_lint_never_stops_the_run(monkeypatch, tmp_path):
    # gpurig launch lints the script first; a bug of the linter says so on one line and the plan
    # goes on (here --dry-run, which prints it), instead of a traceback that stops the user's run.
    from typer.testing import CliRunner

    import gpurig.diagnose.lint as lint
    from gpurig.cli import app

    def broken(*args, **kwargs):
        raise KeyError("get_ckpt_path")

    monkeypatch.setattr(lint, "lint_file", broken)
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    out = CliRunner().invoke(app, ["launch", "--dry-run", "--run-dir", str(tmp_path / "run"), str(script)])
    assert out.exit_code == 0, out.output
    assert "preflight lint failed" in out.output and "Traceback" not in out.output
