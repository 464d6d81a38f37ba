"""`gpurig lint` on a script deep inside its own package, importing the package by its full name
(`from recsys.models.train.utils import setup` in recsys/models/train/), and on a cleanup that
only an exception handler calls: the shapes met in real repositories that hid a process group
never destroyed."""

from __future__ import annotations

import textwrap

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


def _deep_project(root, body: str):
    _write(root, "recsys/__init__.py", "")
    _write(root, "recsys/models/train/utils.py", UTILS)
    return _write(root, "recsys/models/train/train.py", "from recsys.models.train.utils import setup, cleanup\n" + textwrap.dedent(body))


def test_a_group_started_by_a_module_of_the_scripts_own_package_three_folders_up(tmp_path):
    script = _deep_project(tmp_path, """
        def main(rank, world_size):
            setup(rank, world_size)
            for step in range(10):
                pass
    """)
    assert "no-destroy-process-group" in _ids(script)


def test_the_same_package_ending_its_group_is_quiet(tmp_path):
    script = _deep_project(tmp_path, """
        def main(rank, world_size):
            setup(rank, world_size)
            for step in range(10):
                pass
            cleanup()
    """)
    assert "no-destroy-process-group" not in _ids(script)


def test_a_cleanup_called_only_when_training_failed_does_not_end_a_run_that_ends_normally(tmp_path):
    _write(tmp_path, "utils.py", UTILS)
    script = _write(tmp_path, "train.py", """
        from utils import setup, cleanup

        def main(rank, world_size):
            setup(rank, world_size)
            try:
                for step in range(10):
                    pass
            except Exception as e:
                cleanup()
                raise
    """)
    assert "no-destroy-process-group" in _ids(script)


def test_a_cleanup_in_finally_ends_every_run(tmp_path):
    _write(tmp_path, "utils.py", UTILS)
    script = _write(tmp_path, "train.py", """
        from utils import setup, cleanup

        def main(rank, world_size):
            setup(rank, world_size)
            try:
                for step in range(10):
                    pass
            finally:
                cleanup()
    """)
    assert "no-destroy-process-group" not in _ids(script)
