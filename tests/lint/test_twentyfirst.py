"""What the twenty-first round of real scripts taught: a save helper given a file name of the
rank's own writes that rank's file, a development set's sampler is no training order, the same
dataset's files fetched again (its test split) are one mistake with the first fetch, an option the
script sets again (`args.dist_url = f"tcp://{host}:{random port}"`) does not run with its default,
two settings of one Hub id are one fetch, a move to the global rank is named where the device is
chosen, and torch.distributed's own `get_rank()` alone makes no script distributed. Each case is a small script in the shape of the public code it comes from; the expected
findings are what a careful reader says."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def lint(tmp_path, text: str, rules: set[str] | None = None) -> list:
    (tmp_path / "train.py").write_text(textwrap.dedent(text))
    return lint_file(str(tmp_path / "train.py"), select=rules)


def found(tmp_path, text: str, rules: set[str] | None = None) -> list[tuple[str, int]]:
    return sorted((f.id, f.line) for f in lint(tmp_path, text, rules))


# A music-translation trainer: one process per node, each saving its own best and last model
# through a method that joins the name it is given to the experiment folder.
PER_RANK_SAVES = """\
import torch
import torch.distributed as dist
from pathlib import Path


class Trainer:
    def __init__(self, args):
        self.args = args
        self.exp_path = Path(args.out)
        self.model = torch.nn.Linear(2, 2).cuda()

    def train(self):
        for epoch in range(3):
            self.save_model(f"bestmodel_{self.args.rank}.pth")
            self.save_model(NAME)

    def save_model(self, filename):
        save_path = self.exp_path / filename
        torch.save(self.model.state_dict(), save_path)


def main(args):
    dist.init_process_group("nccl")
    Trainer(args).train()
    dist.destroy_process_group()
"""


def test_a_save_helper_given_a_file_name_of_the_rank_writes_that_ranks_file(tmp_path):
    """Only the call that gives the helper a shared name (line 15) is every rank writing one file."""
    assert found(tmp_path, PER_RANK_SAVES.replace("NAME", '"last.pth"'), {"save-on-every-rank"}) == [("save-on-every-rank", 15)]
    (tmp_path / "both").mkdir()
    assert found(tmp_path / "both", PER_RANK_SAVES.replace("NAME", 'f"lastmodel_{self.args.rank}.pth"'), {"save-on-every-rank"}) == []


# A token-classification fine-tuner: the development set's sampler shuffles too (its order only
# changes which rank evaluates what); the training sampler never gets set_epoch.
DEV_SAMPLER = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("nccl")
train_dataset, dev_dataset = torch.arange(10), torch.arange(4)
train_sampler = DistributedSampler(train_dataset, shuffle=True)
dev_sampler = DistributedSampler(dev_dataset, shuffle=True)
train_loader = DataLoader(train_dataset, sampler=train_sampler)
dev_loader = DataLoader(dev_dataset, sampler=dev_sampler)
for epoch in range(3):
    for batch in train_loader:
        pass
    for batch in dev_loader:
        pass
dist.destroy_process_group()
"""


def test_the_development_sets_sampler_is_no_training_order(tmp_path):
    assert found(tmp_path, DEV_SAMPLER, {"sampler-without-set-epoch"}) == [("sampler-without-set-epoch", 7)]


# A normalizing-flow trainer: MNIST's training and test splits fetched into one folder, in every
# rank. torchvision fetches both splits' files at once: the second call finds them, unless another
# rank is still writing them. One mistake, which names both lines.
TWO_SPLITS = """\
import torch.distributed as dist
import torchvision.datasets as dset

dist.init_process_group("nccl")
train_set = dset.MNIST(root="./data", train=True, download=True)
test_set = dset.MNIST(root="./data", train=False, download=True)
other = dset.MNIST(root="./elsewhere", train=False, download=True)
dist.destroy_process_group()
"""


def test_a_datasets_second_split_in_the_same_folder_is_the_same_download(tmp_path):
    findings = lint(tmp_path, TWO_SPLITS, {"download-on-every-rank"})
    assert sorted(f.line for f in findings) == [5, 7]  # (another folder: other files)
    first = next(f for f in findings if f.line == 5)
    assert "train.py:6" in first.related and "again at line 6" in first.title


# An audio-visual localisation trainer in the ImageNet example's shape: `--dist_url` defaults to a
# fixed tcp:// address, but main() always builds it again on a random port.
SET_AGAIN = """\
import argparse
import random
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--node", type=str, default="localhost")
parser.add_argument("--port", type=int, default=12345)
parser.add_argument("--dist_url", type=str, default="tcp://localhost:12345")
args = parser.parse_args()
AGAIN
dist.init_process_group("nccl", init_method=args.dist_url, world_size=2, rank=0)
dist.destroy_process_group()
"""


def test_a_rendezvous_option_the_script_sets_again_does_not_run_with_its_default(tmp_path):
    again = 'args.port = random.randint(10000, 20000)\nargs.dist_url = f"tcp://{args.node}:{args.port}"'
    assert found(tmp_path, SET_AGAIN.replace("AGAIN", again), {"hard-coded-rendezvous"}) == []
    (tmp_path / "kept").mkdir()
    assert ("hard-coded-rendezvous", 8) in found(tmp_path / "kept", SET_AGAIN.replace("AGAIN", ""), {"hard-coded-rendezvous"})


# A hand-written GRPO trainer: the policy and the frozen reference come from two options that
# default to one Hub id. The second fetch finds the files the first wrote in this process.
POLICY_AND_REF = """\
import argparse
import torch.distributed as dist
from transformers import AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--model_id", type=str, default="Qwen/Qwen3-0.6B")
p.add_argument("--ref_id", type=str, default=REF)
args = p.parse_args()
dist.init_process_group("nccl")
policy = AutoModelForCausalLM.from_pretrained(args.model_id)
ref = AutoModelForCausalLM.from_pretrained(args.ref_id)
dist.destroy_process_group()
"""


def test_two_settings_of_one_hub_id_are_one_fetch(tmp_path):
    assert found(tmp_path, POLICY_AND_REF.replace("REF", '"Qwen/Qwen3-0.6B"'), {"download-on-every-rank"}) == [
        ("download-on-every-rank", 10)]
    (tmp_path / "two").mkdir()
    assert found(tmp_path / "two", POLICY_AND_REF.replace("REF", '"Qwen/Qwen3-1.7B"'), {"download-on-every-rank"}) == [
        ("download-on-every-rank", 10), ("download-on-every-rank", 11)]


# A flow-matching trainer: the model moved to the global rank, then wrapped with it as its device.
# One mistake: where the device is chosen (the DDP line), naming the move above it.
MOVED_THEN_WRAPPED = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
rank = int(os.environ["RANK"])
net = torch.nn.Linear(2, 2).to(rank)
net = DistributedDataParallel(net, device_ids=[rank])
dist.destroy_process_group()
"""


def test_a_move_to_the_global_rank_is_named_where_the_device_is_chosen(tmp_path):
    findings = lint(tmp_path, MOVED_THEN_WRAPPED, {"global-rank-as-device"})
    assert [(f.line, f.related) for f in findings] == [(9, ["train.py:8"])]
    assert "at line 8" in findings[0].title


# An audio classifier trained in one process (DataParallel); a `--use_ddp` flag left from an older
# version asks torch.distributed for the rank, but nothing ever starts a process group.
VESTIGIAL_DDP = """\
import argparse
import torch
ASK_IMPORT

parser = argparse.ArgumentParser()
parser.add_argument("--use_ddp", action="store_true")
args = parser.parse_args()
net = torch.nn.DataParallel(torch.nn.Linear(2, 2).cuda())
for step in range(10):
    if not args.use_ddp or ASK == 0:
        print(step)
torch.save(net.state_dict(), "model.pt")
"""


def test_torch_distributeds_own_get_rank_alone_makes_no_distributed_script(tmp_path):
    """Only the DataParallel is said; the save runs in the one process there is. A project's own
    `get_rank()` (its distributed utilities may start the group) still makes the script one every rank runs."""
    text = VESTIGIAL_DDP.replace("ASK_IMPORT", "").replace("ASK", "torch.distributed.get_rank()")
    assert found(tmp_path, text, {"data-parallel", "save-on-every-rank"}) == [("data-parallel", 8)]
    (tmp_path / "own").mkdir()
    own = VESTIGIAL_DDP.replace("ASK_IMPORT", "from utils.distributed import get_rank").replace("ASK", "get_rank()")
    assert ("save-on-every-rank", 12) in found(tmp_path / "own", own, {"data-parallel", "save-on-every-rank"})
