"""The device set in the body of `if config.distributed:` (with the process group started there) is set
for everything after it that runs on several ranks: the path around that `if` is a run of one process.
So a DDP built after it (apex's `DDP(model, delay_allreduce=True)`, which takes no device_ids) is
not built without a device. Where the body sets the device on one of its own paths only (`if args.gpu
is not None:` inside), or the `if` tests something other than a distributed flag, it still is.
Each script is written for the test."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import argparse

import torch
import torch.distributed as dist
from apex.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--distributed", action="store_true")
    config = parser.parse_args()
    if {test}:
{body}
        dist.init_process_group(backend="nccl", init_method="env://")
    model = torch.nn.Linear(4, 4).cuda()
    model = DDP(model, delay_allreduce=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

SET = "        torch.cuda.set_device(config.local_rank)"


def _no_device(tmp_path, test: str, body: str) -> list[str]:
    script = tmp_path / "search.py"
    script.write_text(SCRIPT.format(test=test, body=body))
    return [f.code for f in lint_file(str(script)) if f.id == "ddp-without-device"]


def test_the_device_set_where_the_run_is_distributed_covers_the_ddp_after_it(tmp_path):
    assert _no_device(tmp_path, "config.distributed", SET) == []


def test_a_device_set_on_one_path_of_that_branch_only_does_not(tmp_path):
    body = "        if config.local_rank is not None:\n    " + SET
    assert _no_device(tmp_path, "config.distributed", body) == ["model = DDP(model, delay_allreduce=True)"]


def test_a_branch_on_something_else_does_not(tmp_path):
    assert _no_device(tmp_path, "config.local_rank > 0", SET) == ["model = DDP(model, delay_allreduce=True)"]


NESTED = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args):
    if args.use_gpu and args.distributed:
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
    model = torch.nn.Linear(4, 4).cuda()
    if args.use_gpu:
        if {inner}:
            model = DDP(model)
    dist.destroy_process_group()
"""


def test_every_part_of_the_test_that_set_the_device_holding_around_the_ddp(tmp_path):
    # (`if use_gpu and distributed: set_device(...)`, then `if use_gpu:` / `if distributed:` around the DDP)
    script = tmp_path / "train.py"
    script.write_text(NESTED.format(inner="args.distributed"))
    assert [f.id for f in lint_file(str(script)) if f.id == "ddp-without-device"] == []


def test_one_part_alone_does_not(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(NESTED.format(inner="args.fp16"))
    assert [f.code for f in lint_file(str(script)) if f.id == "ddp-without-device"] == ["model = DDP(model)"]
