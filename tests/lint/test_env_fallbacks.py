"""A rendezvous port set only where the launcher left none (`if not os.getenv("MASTER_PORT"):`,
`if os.environ.get("MASTER_PORT") is None:`, as `if "MASTER_PORT" not in os.environ:`) is a fallback
for a run of one process, not a fixed port; set unconditionally, or where the variable is already set,
it is. Each script is written for the test."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import os

import torch
import torch.distributed as dist


def main():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
{set_port}
    dist.init_process_group(backend="nccl")
    dist.destroy_process_group()


main()
"""


def _ports(tmp_path, set_port: str) -> list[int]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(set_port=set_port))
    return [f.line for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]


@pytest.mark.parametrize("test", ['not os.getenv("MASTER_PORT")', 'os.environ.get("MASTER_PORT") is None',
                                  '"MASTER_PORT" not in os.environ'])
def test_a_port_set_only_where_the_launcher_left_none_is_a_fallback(tmp_path, test):
    assert _ports(tmp_path, f'    if {test}:\n        os.environ["MASTER_PORT"] = "24501"') == []


@pytest.mark.parametrize("set_port", ['    os.environ["MASTER_PORT"] = "24501"',
                                      '    if os.getenv("MASTER_PORT"):\n        os.environ["MASTER_PORT"] = "24501"'])
def test_a_port_set_anyway_is_fixed(tmp_path, set_port):
    assert _ports(tmp_path, set_port) != []
