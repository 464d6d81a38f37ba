"""A device set by the project's own code before the DDP: a class the script enters (TorchSemiSeg's
`with Engine(custom_parser=parser) as engine:`, whose `__init__` calls torch.cuda.set_device), or a
set-up function of its utils (`setup(rank)`). The DDP after it finds its GPU without device_ids; one
after a helper that sets no device, or before the helper is called, does not. A big (streamed)
script reads the same."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import lint_file

ENGINE = """
import os
import torch
import torch.distributed as dist

class Engine:
    def __init__(self, local_rank):
        self.distributed = "WORLD_SIZE" in os.environ
        if self.distributed:
            torch.cuda.set_device(local_rank)
            dist.init_process_group(backend="nccl", init_method="env://")
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        dist.destroy_process_group()

def setup(rank):
    _init(rank)

def _init(rank):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")

def seed_all(seed):
    torch.manual_seed(seed)
"""


def _devices(tmp_path, script: str) -> list[int]:
    (tmp_path / "engine.py").write_text(ENGINE)
    (tmp_path / "train.py").write_text("import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
                                       "from engine import Engine, setup, seed_all\n" + textwrap.dedent(script))
    return [f.line for f in lint_file(str(tmp_path / "train.py"), select={"ddp-without-device"})]


SCRIPTS = {
    "entered": ("""\
        with Engine(int(0)) as engine:
            model = torch.nn.Linear(2, 2).cuda()
            if engine.distributed:
                model = DistributedDataParallel(model)
        """, []),
    "set up through a helper": ("""\
        def main(rank):
            setup(rank)
            model = DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        main(0)
        """, []),
    "a helper that sets none": ("""\
        import torch.distributed as dist
        seed_all(0)
        dist.init_process_group("nccl")
        model = DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
        """, [7]),
    "the helper called after it": ("""\
        model = DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        setup(0)
        """, [4]),
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_device_the_projects_helper_sets_is_set_for_the_ddp_after_it(tmp_path, name):
    script, found = SCRIPTS[name]
    assert _devices(tmp_path, script) == found


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_streamed_script_reads_the_helpers_the_same(tmp_path, monkeypatch, name):
    import gpurig.diagnose.lint as L
    from gpurig.diagnose import lint_stream

    script, found = SCRIPTS[name]
    monkeypatch.setattr(L, "STREAM_BYTES", 0)
    monkeypatch.setattr(lint_stream, "_CHUNK_BYTES", 64)
    assert _devices(tmp_path, script) == found
