"""What the twentieth round of real scripts taught: `model.train()` is no call of the script's own
`train()`, a model built by `from_pretrained` handed on as `pretrained=` is no download switch, a
temporary file is no other rank's, a fixed address is named where it is written, the same use of
the global rank as a device is one mistake, a file named once in an attribute (`args.log_file`) is
that file, and OpenAI CLIP's own `clip._download` fetches. Each case is a small script in the shape of the
public code it comes from; the expected findings are what a careful reader says."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def lint(tmp_path, files: dict[str, str]) -> list:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return lint_file(str(tmp_path / "train.py"))  # the rules on by default


def found(tmp_path, files: dict[str, str]) -> list[tuple[str, int]]:
    return sorted((f.id, f.line) for f in lint(tmp_path, files))


# A sentence-embedding trainer: `--ddp` spawns the workers, otherwise main() trains in its own
# single process. Both paths call `model.train()`, which is a method of the model, not the script's
# `train()`: that function runs only in the parent, once.
SPAWN_OR_ONE = """\
import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoModel

parser = argparse.ArgumentParser()
parser.add_argument("--base", default="bert-base-uncased")
parser.add_argument("--ddp", default="True")
args = parser.parse_args()


def train(device):
    model = AutoModel.from_pretrained(args.base).to(device)
    model.train()
    torch.save(model.state_dict(), "model.pt")


def train_ddp(rank, world_size):
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = AutoModel.from_pretrained(args.base).to(rank)
    model.train()
    if rank == 0:
        torch.save(model.state_dict(), "model.pt")
    dist.destroy_process_group()


def main():
    world_size = torch.cuda.device_count()
    if args.ddp == "True" and world_size >= 2:
        mp.spawn(train_ddp, args=(world_size,), nprocs=world_size, join=True)
        return
    train(torch.device("cuda:0"))


if __name__ == "__main__":
    main()
"""


def test_an_objects_train_method_is_no_call_of_the_scripts_train(tmp_path):
    # only the workers' fetch; the one-process path's fetch and save run once, in the parent
    assert found(tmp_path, {"train.py": SPAWN_OR_ONE}) == [("download-on-every-rank", 22)]
    # a worker that really calls the script's train() makes it run on every rank
    worker_calls = SPAWN_OR_ONE.replace("    model = AutoModel.from_pretrained(args.base).to(rank)\n"
                                        "    model.train()\n", "    train(rank)\n")
    assert ("download-on-every-rank", 14) in found(tmp_path / "w", {"train.py": worker_calls})


def test_a_model_built_by_from_pretrained_is_no_pretrained_switch(tmp_path):
    script = """\
    import os
    import torch
    import torch.distributed as dist
    from transformers import AutoModel
    from models import SupervisedSimCSE

    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    if rank != 0:
        dist.barrier()
    pretrained = AutoModel.from_pretrained("bert-base-uncased").to(rank)
    if rank == 0:
        dist.barrier()
    model = SupervisedSimCSE(pretrained=pretrained).to(rank)
    dist.destroy_process_group()
    """
    models = "class SupervisedSimCSE:\n    def __init__(self, pretrained):\n        self.lm = pretrained\n"
    assert found(tmp_path, {"train.py": script, "models.py": models}) == []
    # a switch (`pretrained = args.pretrained`) still fetches in every rank
    switch = script.replace('pretrained = AutoModel.from_pretrained("bert-base-uncased").to(rank)', "pretrained = True")
    assert found(tmp_path / "s", {"train.py": switch, "models.py": models}) == [("download-on-every-rank", 15)]


def test_a_temporary_file_is_no_other_ranks(tmp_path):
    # CrossViT's helper: fvcore's Checkpointer wants a file, so each process writes its own temporary one
    utils = """\
    import tempfile
    import torch


    def load_checkpoint(model, state_dict):
        tmp_path = tempfile.NamedTemporaryFile("w+b")
        torch.save({"model": state_dict}, tmp_path.name)
        model.load_state_dict(torch.load(tmp_path.name, map_location="cpu")["model"])
    """
    script = """\
    import os
    import tempfile
    import torch
    import torch.distributed as dist
    import utils

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(4, 4).cuda()
    utils.load_checkpoint(model, model.state_dict())
    with tempfile.TemporaryDirectory() as scratch:
        torch.save(model.state_dict(), os.path.join(scratch, "probe.pt"))
    fd, name = tempfile.mkstemp(suffix=".pt")
    torch.save(model.state_dict(), name)
    dist.destroy_process_group()
    """
    assert found(tmp_path, {"train.py": script, "utils.py": utils}) == []
    # the same helper writing a named file of the run is every rank's
    shared = utils.replace("tmp_path.name)\n", '"last.pth")\n', 1)
    assert found(tmp_path / "n", {"train.py": script, "utils.py": shared}) == [("save-on-every-rank", 11)]


def test_a_fixed_address_is_named_where_it_is_written(tmp_path):
    # PreSumm / BertSum: multi_init keeps the address in a local name before starting the group
    helper = """\
    import torch


    def multi_init(device_id, world_size, gpu_ranks):
        dist_init_method = 'tcp://localhost:10000'
        torch.distributed.init_process_group(
            backend='nccl', init_method=dist_init_method,
            world_size=world_size, rank=gpu_ranks[device_id])
        return torch.distributed.get_rank()
    """
    script = """\
    import torch
    import torch.distributed as dist
    import distributed


    def run(device_id, world_size):
        torch.cuda.set_device(device_id)
        distributed.multi_init(device_id, world_size, list(range(world_size)))
        dist.destroy_process_group()


    if __name__ == "__main__":
        torch.multiprocessing.spawn(run, args=(2,), nprocs=2)
    """
    findings = lint(tmp_path, {"train.py": script, "distributed.py": helper})
    assert [(f.id, f.line) for f in findings] == [("hard-coded-rendezvous", 8)]
    assert findings[0].related == ["distributed.py:5"] and "at distributed.py:5" in findings[0].title


def test_the_same_use_of_the_global_rank_is_one_finding(tmp_path):
    # Simple-CCReID: three models wrapped with device_ids=[local_rank], local_rank being dist.get_rank()
    script = """\
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("nccl", init_method="env://")
    local_rank = dist.get_rank()
    torch.cuda.set_device(local_rank)
    model, classifier, clothes = nn.Linear(4, 4).cuda(), nn.Linear(4, 2).cuda(), nn.Linear(4, 3).cuda()
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    classifier = nn.parallel.DistributedDataParallel(classifier, device_ids=[local_rank])
    clothes = nn.parallel.DistributedDataParallel(clothes, device_ids=[local_rank])
    dist.destroy_process_group()
    """
    findings = lint(tmp_path, {"train.py": script})
    assert [(f.id, f.line) for f in findings] == [("global-rank-as-device", 7), ("global-rank-as-device", 9)]
    assert findings[1].related == ["train.py:10", "train.py:11"] and "2 more times" in findings[1].title



def test_a_file_named_once_in_an_attribute_is_that_file(tmp_path):
    # A course's run_glue.py: main() names the results file in `args`, train() appends to it every step
    script = """\
    import argparse
    import os
    import torch.distributed as dist


    def train(args):
        for step in range(100):
            with open(args.output_train_file, "a") as writer:
                writer.write(f"{step}\\n")


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--output_dir", default="out")
        parser.add_argument("--rank", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("gloo", init_method="env://")
        output_train_file = os.path.join(args.output_dir, "train_results.txt")
        args.output_train_file = output_train_file
        train(args)
        dist.destroy_process_group()


    main()
    """
    assert found(tmp_path, {"train.py": script}) == [("save-on-every-rank", 8)]
    # a name per rank, or an attribute given two paths (which one is written is not known): nothing said
    per_rank = script.replace('"train_results.txt")', 'f"train_results_{args.rank}.txt")')
    assert found(tmp_path / "r", {"train.py": per_rank}) == []
    twice = script.replace("        train(args)\n", '        train(args)\n        args.output_train_file = "other.txt"\n')
    assert found(tmp_path / "t", {"train.py": twice}) == []



def test_openai_clips_own_downloader_is_a_fetch(tmp_path):
    # X-CLIP's models/xclip.py: load() fetches the CLIP weights with clip._download when no path is given
    helper = """\
    import clip
    import torch


    def load(model_path, name):
        if model_path is None:
            model_path = clip._download(clip._MODELS[name])
        return torch.jit.load(model_path, map_location="cpu")
    """
    script = """\
    import os
    import torch
    import torch.distributed as dist
    from models import xclip

    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = xclip.load(None, "ViT-B/32")
    dist.destroy_process_group()
    """
    files = {"train.py": script, "models/__init__.py": "", "models/xclip.py": helper}
    assert found(tmp_path, files) == [("download-on-every-rank", 8)]
