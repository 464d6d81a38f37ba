"""`gpurig lint` on a script deep inside its own package, importing the package by its full name
(`from recsys.models.train.utils import setup` in recsys/models/train/), and on a cleanup that
only an exception handler calls: the shapes met in real repositories that hid a process group
never destroyed."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import RULES, lint_file

UTILS = """
import torch.distributed as dist

def setup(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)

def cleanup():
    dist.destroy_process_group()
"""


def _write(root, rel: str, text: str):
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))
    return target


def _ids(script) -> list[str]:
    return [f.id for f in lint_file(str(script), select=set(RULES))]


@pytest.mark.parametrize(("last", "reported"), [("pass", True), ("cleanup()", False)])
def test_a_group_started_by_a_module_of_the_scripts_own_package_three_folders_up(tmp_path, last, reported):
    # recsys/models/train/train.py imports recsys.models.train.utils by its full name: the module is
    # found from the folder above recsys/, and the group it starts is ended there or not.
    _write(tmp_path, "recsys/__init__.py", "")
    _write(tmp_path, "recsys/models/train/utils.py", UTILS)
    script = tmp_path / "recsys/models/train/train.py"
    script.write_text("from recsys.models.train.utils import setup, cleanup\n\n"
                      "def main(rank, world_size):\n"
                      "    setup(rank, world_size)\n"
                      "    for step in range(10):\n"
                      "        pass\n"
                      f"    {last}\n")
    assert ("no-destroy-process-group" in _ids(script)) is reported


@pytest.mark.parametrize(("ending", "reported"), [
    # only when training failed: a run that ends normally never ends its group
    ("except Exception as e:\n        cleanup()\n        raise", True),
    ("finally:\n        cleanup()", False),  # every run
])
def test_a_cleanup_in_an_exception_handler_or_in_finally(tmp_path, ending, reported):
    _write(tmp_path, "utils.py", UTILS)
    script = tmp_path / "train.py"
    script.write_text("from utils import setup, cleanup\n\n"
                      "def main(rank, world_size):\n"
                      "    setup(rank, world_size)\n"
                      "    try:\n"
                      "        for step in range(10):\n"
                      "            pass\n"
                      f"    {ending}\n")
    assert ("no-destroy-process-group" in _ids(script)) is reported


def test_a_projects_class_naming_a_map_location_from_the_rank_it_was_given(tmp_path):
    # The script hands the global rank to the project's trainer as `local_rank`; the trainer builds
    # its torch.load map_location from it in a variable first (`'cuda:%d' % self.local_rank`).
    _write(tmp_path, "trainer.py", """
        import torch

        class Trainer:
            def __init__(self, config, local_rank=0):
                self.local_rank = local_rank

            def load_checkpoint(self, path):
                map_location = 'cuda:%d' % self.local_rank
                return torch.load(path, map_location={'cuda:0': map_location})
    """)
    script = _write(tmp_path, "train.py", """
        import torch
        import torch.distributed as dist
        from trainer import Trainer

        dist.init_process_group("nccl")
        rank = dist.get_rank()
        trainer = Trainer({}, local_rank=rank)
        trainer.load_checkpoint("last.pth")
        dist.destroy_process_group()
    """)
    findings = [f for f in lint_file(str(script), select=set(RULES)) if f.id == "global-rank-as-device"]
    assert findings and "trainer.py:9" in findings[0].related
