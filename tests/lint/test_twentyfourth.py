"""What the twenty-fourth round of real scripts taught. A launcher of the project that runs Python
again per GPU (`subprocess.Popen(["python3", *argv])`, ByteTrack's vendored YOLOX) owns the process
group it starts, as one that spawns does. A `--master_port` option nothing reads is no fixed port,
even where a local variable has its name. Fetches on two paths of which one runs are one mistake
when one of them sits in an inner `elif`. A method name several classes define, only one of them
loading a checkpoint, stands for that one only where the script builds its class; a class imported
from a module the lint did not read is none of the project's helpers. A project's own wrapper of
the global rank (`distributed_rank()`) made the GPU index is the global rank. A dataset class built
three times over one root (PyG's QM9 train, valid and test parts) downloads once. Each case is a
small script in the shape of the public code it comes from (tracking, translation, text
classification and molecule repositories); the expected findings are what a careful reader says."""

from __future__ import annotations

from tests.lint.lintcase import found

# ByteTrack's tools/train.py over its copy of YOLOX's launcher.
LAUNCHER = {"yolox/__init__.py": "", "yolox/core/__init__.py": "from .launch import launch\n", "yolox/core/launch.py": """\
import os
import subprocess
import sys

import torch
import torch.distributed as dist


def launch(main_func, num_gpus, dist_url=None, args=()):
    if num_gpus > 1:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            _distributed_worker(int(os.environ["LOCAL_RANK"]), main_func, num_gpus, dist_url, args)
            exit()
        launch_by_subprocess(sys.argv, num_gpus, dist_url)
    else:
        main_func(*args)


def launch_by_subprocess(raw_argv, num_gpus, dist_url):
    for local_rank in range(num_gpus):
        env = dict(os.environ, LOCAL_RANK=str(local_rank), WORLD_SIZE=str(num_gpus))
        SPAWN
        subprocess.Popen(cmd, env=env).wait()


def _distributed_worker(local_rank, main_func, world_size, dist_url, args):
    dist.init_process_group(backend="nccl", init_method=dist_url, world_size=world_size, rank=local_rank)
    torch.cuda.set_device(local_rank)
    main_func(*args)
"""}

LAUNCHED = """\
from yolox.core import launch


def main(exp, args):
    exp.get_trainer(args).train()


if __name__ == "__main__":
    launch(main, 8, dist_url="auto", args=(None, None))
"""


def test_a_project_launcher_that_runs_python_again_per_gpu_owns_the_group(tmp_path):
    files = {**LAUNCHER, "yolox/core/launch.py": LAUNCHER["yolox/core/launch.py"].replace(
        "SPAWN", 'cmd = ["python3", *raw_argv]')}
    assert found(tmp_path, LAUNCHED, "no-destroy-process-group", files) == []
    # A launcher that only starts the group in this process (torchrun started it) and calls main:
    # the script's run still ends without destroy_process_group.
    files["yolox/core/launch.py"] = files["yolox/core/launch.py"].replace(
        'cmd = ["python3", *raw_argv]', 'cmd = ["echo", "node"]')
    assert found(tmp_path, LAUNCHED, "no-destroy-process-group", files) == [("no-destroy-process-group", 1)]


# MT-DNN's train.py: a --master_port option nobody reads, and its own getenv default.
UNREAD_PORT = """\
import argparse
import os
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--master_port", type=str, default="6600")
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
opt = vars(args)
READ


def initialize_distributed(args):
    master_port = os.getenv("MASTER_PORT", "6600")
    dist.init_process_group(backend="nccl", init_method="tcp://localhost:" + master_port,
                            world_size=int(os.environ["WORLD_SIZE"]), rank=args.local_rank)


initialize_distributed(args)
dist.destroy_process_group()
"""


def test_an_option_nothing_reads_is_no_fixed_port_whatever_local_variable_has_its_name(tmp_path):
    assert found(tmp_path, UNREAD_PORT.replace("READ", ""), "hard-coded-rendezvous") == []
    for read in ('os.environ["MASTER_PORT"] = args.master_port', 'os.environ["MASTER_PORT"] = opt["master_port"]',
                 "run(**opt)"):
        assert found(tmp_path, UNREAD_PORT.replace("READ", read), "hard-coded-rendezvous") == [
            ("hard-coded-rendezvous", 6)], read


# MT-DNN again: the encoder's config fetched in an inner elif and in the outer else.
NESTED_BRANCHES = """\
import os
import torch.distributed as dist
from transformers import AutoConfig

dist.init_process_group("nccl")
if os.path.exists(init_model):
    if encoder == "bert":
        state = load_local(init_model)
    elif encoder == "roberta":
        config = AutoConfig.from_pretrained(arch)
else:
    config = AutoConfig.from_pretrained(init_model)
SECOND
dist.destroy_process_group()
"""


def test_fetches_in_an_inner_elif_and_the_outer_else_are_one_mistake(tmp_path):
    assert found(tmp_path, NESTED_BRANCHES.replace("SECOND", ""), "download-on-every-rank") == [("download-on-every-rank", 10)]
    # (a fetch after the if runs on every path: a mistake of its own)
    assert found(tmp_path, NESTED_BRANCHES.replace("SECOND", 'tokenizer = AutoConfig.from_pretrained("t5-base")'),
                 "download-on-every-rank") == [("download-on-every-rank", 10), ("download-on-every-rank", 13)]


# Sockeye's and MT-DNN's `load` methods: one reads a checkpoint, the others do not.
LOADERS = {"data_io.py": """\
import json
import torch


class ParallelDataSet:
    @staticmethod
    def load(fname):
        return torch.load(fname)


class Batch:
    def load(self, device):
        return {k: v.to(device) for k, v in self.items()}
""", "model.py": """\
import torch


class Model:
    def load(self, path):
        self.state = torch.load(path)
"""}

LOADS = """\
import os
import torch
import torch.distributed as dist
from config import Config
from data_io import ParallelDataSet
from model import Model

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
info = Config.load("data.info")
batch = iterator.next().load(device="cuda")
BUILD
dist.destroy_process_group()
"""


def test_a_method_name_several_classes_define_is_the_loading_one_only_where_the_script_builds_its_class(tmp_path):
    assert found(tmp_path, LOADS.replace("BUILD", ""), "torch-load-without-map-location", LOADERS) == []
    built = "model = Model()\nmodel.load(args.ckpt)"
    assert found(tmp_path, LOADS.replace("BUILD", built), "torch-load-without-map-location", LOADERS) == [
        ("torch-load-without-map-location", 13)]


# MeMOTR's main.py: the project's own name for dist.get_rank().
RANK_WRAPPER = {"utils.py": """\
import torch.distributed


def distributed_rank():
    if not torch.distributed.is_initialized():
        return 0
    return torch.distributed.get_rank()
"""}

SET_DEVICE = """\
import torch
import torch.distributed
from utils import distributed_rank

torch.distributed.init_process_group("nccl")
torch.cuda.set_device(WHICH())
torch.distributed.destroy_process_group()
"""


def test_a_projects_own_wrapper_of_the_global_rank_is_the_global_rank(tmp_path):
    assert found(tmp_path, SET_DEVICE.replace("WHICH", "distributed_rank"), "global-rank-as-device", RANK_WRAPPER) == [
        ("global-rank-as-device", 6)]
    wrapper = {"utils.py": RANK_WRAPPER["utils.py"] + "\n\ndef local_rank():\n    return 0\n"}
    assert found(tmp_path, SET_DEVICE.replace("WHICH", "local_rank").replace("distributed_rank", "local_rank"),
                 "global-rank-as-device", wrapper) == []


# Equiformer's main_qm9.py: PyG's QM9 built for three parts over one root.
PARTS = """\
import os
import torch
import torch.distributed as dist
from torch_geometric.datasets import QM9

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
train_dataset = QM9(args.data_path, "train")
val_dataset = QM9(args.data_path, "valid")
test_dataset = QM9(OTHER, "test")
dist.destroy_process_group()
"""


def test_a_dataset_class_built_again_over_one_root_downloads_once(tmp_path):
    assert found(tmp_path, PARTS.replace("OTHER", "args.data_path"), "download-on-every-rank") == [("download-on-every-rank", 8)]
    assert found(tmp_path, PARTS.replace("OTHER", "args.other_path"), "download-on-every-rank") == [
        ("download-on-every-rank", 8), ("download-on-every-rank", 10)]


# LLM-MIL's train_ddp.py: a resume load in the if, and three loads one after the other in the else.
RESUME_OR_PRETRAINED = """\
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
if args.resume:
    if args.gpu is None:
        checkpoint = torch.load(args.resume)
    else:
        checkpoint = torch.load(args.resume, map_location=f"cuda:{args.gpu}")
else:
    if args.ct:
        ct = torch.load(args.ct_path)
    if args.pathology:
        pathology = torch.load(args.pathology_path)
dist.destroy_process_group()
"""


def test_loads_one_after_the_other_in_a_branch_stay_two_beside_the_other_path(tmp_path):
    found_lines = found(tmp_path, RESUME_OR_PRETRAINED, "torch-load-without-map-location")
    # (the resume path's load and one of the else's are one of two paths; the else's second runs with its first)
    assert found_lines == [("torch-load-without-map-location", 7), ("torch-load-without-map-location", 14)]
