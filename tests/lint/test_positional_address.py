"""hard-coded-rendezvous where init_process_group is given its address positionally,
`init_process_group('nccl', 'tcp://127.0.0.1:12347', ...)` (its second parameter is init_method):
a literal in the script, a project helper that starts the group so, and a setting handed so."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def _rendezvous(tmp_path, script: str, **helpers: str) -> list[int]:
    for name, source in helpers.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    return [f.line for f in lint_file(path) if f.id == "hard-coded-rendezvous"]


SPAWNED = """\
import torch.distributed as dist
import torch.multiprocessing as mp

def run(rank, world):
    dist.init_process_group('nccl', {address}, world_size=world, rank=rank)
    dist.destroy_process_group()

mp.spawn(run, args=(2,), nprocs=2)
"""


def test_a_literal_address_given_positionally(tmp_path):
    assert _rendezvous(tmp_path, SPAWNED.format(address="'tcp://127.0.0.1:12347'")) == [5]


def test_env_given_positionally_is_fine(tmp_path):
    assert _rendezvous(tmp_path, SPAWNED.format(address="'env://'")) == []


def test_a_setting_the_project_fixes_given_positionally(tmp_path):
    found = _rendezvous(tmp_path, "from config import cfg\n" + SPAWNED.format(address="cfg.dist_url"),
                        config="class cfg:\n    dist_url = 'tcp://localhost:54321'\n")
    assert found == [6]


def test_a_project_helper_that_starts_the_group_on_a_fixed_address_positionally(tmp_path):
    helper = """\
    import torch.distributed as dist

    def setup(rank, world):
        dist.init_process_group("gloo", "tcp://localhost:10000", rank=rank, world_size=world)
    """
    script = """\
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from dist_utils import setup

    def run(rank, world):
        setup(rank, world)
        dist.destroy_process_group()

    mp.spawn(run, args=(2,), nprocs=2)
    """
    assert _rendezvous(tmp_path, script, dist_utils=helper) == [6]
