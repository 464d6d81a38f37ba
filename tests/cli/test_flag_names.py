"""One name for one idea across commands: the same flag where the same thing is meant (the old
spellings still work)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpurig.cli import app


def help_text(*argv: str) -> str:
    result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", [("verify",), ("bench", "comm"), ("bench", "train"), ("train",), ("check",), ("launch",)])
def test_processes_per_node_is_nproc_per_node_everywhere(command):
    text = help_text(*command)
    assert "--nproc-per-node" in text and "--nproc" in text


@pytest.mark.parametrize("command", [("env", "slurm"), ("env", "k8s")])
def test_node_count_is_nnodes_everywhere(command):
    assert "--nnodes" in help_text(*command)


def test_launch_takes_out_like_the_other_commands():
    assert "--out" in help_text("launch")


@pytest.mark.parametrize("command", [("verify",), ("launch",), ("lint",), ("explain",), ("check",)])
def test_flags_read_as_flags_in_help(command):
    text = help_text(*command)
    assert "<bool>" not in text and "--json" in text
