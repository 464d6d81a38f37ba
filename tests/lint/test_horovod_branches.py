"""The `else` of `if <the run is distributed>:` is a run of one process, however the flag is named
and read: `args.horovod`, `use_hvd`, or a config read as a dict (`args["horovod"]`,
`cfg["distributed"]`). A save there is written once; a flag that says nothing of the run is no
such branch. Each script is written for the test."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import lint_source

SCRIPT = """\
import torch
import horovod.torch as hvd

hvd.init()
torch.cuda.set_device(hvd.local_rank())
args = {{"horovod": True, "save": True}}
net = torch.nn.Linear(2, 2).cuda()
for epoch in range(3):
    if {flag}:
        if hvd.rank() == 0:
            torch.save(net.state_dict(), "a.pth")
    else:
        torch.save(net.state_dict(), "b.pth")
"""


def _saves(flag):
    return [f.line for f in lint_source(SCRIPT.format(flag=flag), "train.py") if f.id == "save-on-every-rank"]


@pytest.mark.parametrize("flag", ['args["horovod"]', "args.horovod", "use_hvd", 'cfg["distributed"]', "args.distributed"])
def test_the_else_of_a_distributed_flag_is_one_process(flag):
    assert _saves(flag) == []


@pytest.mark.parametrize("flag", ['args["save"]', "args.save_every"])
def test_the_else_of_another_flag_runs_on_every_rank(flag):
    assert _saves(flag) == [13]
