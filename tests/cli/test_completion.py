"""Shell completion, as typer provides it: `gpurig --install-completion` / `--show-completion`."""

from __future__ import annotations


def test_bash_completion_script_names_gpurig(run_cli):
    out = run_cli("--show-completion", "bash")
    assert out.returncode == 0, out.stderr
    assert "_gpurig_completion" in out.stdout and "complete" in out.stdout
