"""A loader re-iterated by an endless iterator (`cycle(loader)`) is read for more than one epoch:
a shuffling DistributedSampler under it needs set_epoch, though no loop in the script says 'epoch'."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_source

ENDLESS = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from utils import {helper}

dist.init_process_group("nccl")
data = torch.utils.data.TensorDataset(torch.randn(64, 2))
loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
{use}
for step in range(10000):
    batch = next(batches)
dist.destroy_process_group()
"""


def test_an_endless_iterator_over_the_loader_is_an_epoch_loop():
    """`cycle(loader)` re-iterates the loader forever: every pass over the data is an epoch, and a
    shuffling sampler without set_epoch repeats its order, though no loop says 'epoch'."""
    for helper in ("cycle", "inf_iterator", "infinite_loader"):
        source = ENDLESS.format(helper=helper, use=f"batches = {helper}(loader)")
        assert [f.line for f in lint_source(source, "train.py") if f.id == "sampler-without-set-epoch"] == [8], helper
    # One pass: no next epoch to reshuffle for (a tensor's repeat() is no endless iterator).
    once = ENDLESS.format(helper="chain", use="batches = iter(loader)\nscale = torch.ones(2).repeat(3)")
    assert not [f for f in lint_source(once, "train.py") if f.id == "sampler-without-set-epoch"]
