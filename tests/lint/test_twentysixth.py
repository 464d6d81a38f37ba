"""What the twenty-fifth and twenty-sixth rounds of real scripts taught. An init_method that picks a
fixed address on one path (`"tcp://localhost:23456" if nodes == 1 else "env://"`, a face-landmark
trainer's) is a fixed rendezvous on that path, in the script or in the project's trainer it calls;
one that falls back to a fixed address only where the launcher's variables are absent is not. A
model built through a table of the project's classes (`meta_arch = _ARCHITECTURES[cfg.arch];
meta_arch(cfg)`, a detection toolkit's builder) fetches what those classes fetch when built. Each
case is a small script in the shape of the public code it comes from; the expected findings are what
a careful reader says."""

from __future__ import annotations

from tests.lint.lintcase import found

TRAINER = {"trainer.py": """\
import torch
import torch.distributed as dist


def train(rank, world_size, nodes_size):
    if world_size > 1:
        dist.init_process_group(backend="nccl", init_method="tcp://localhost:23456" if nodes_size == 1 else "env://",
                                rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
    dist.destroy_process_group()
"""}


def test_a_fixed_address_on_the_single_node_path_of_the_projects_trainer(tmp_path):
    script = """\
    import torch.multiprocessing as mp
    from trainer import train

    if __name__ == "__main__":
        mp.spawn(train, args=(4, 1), nprocs=4)
    """
    assert found(tmp_path, script, "hard-coded-rendezvous", TRAINER) == [("hard-coded-rendezvous", 5)]


def test_a_fixed_address_on_one_path_of_the_script_itself(tmp_path):
    script = """\
    import torch.distributed as dist

    def main(rank, world_size, nodes):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:12345" if nodes == 1 else "env://",
                                rank=rank, world_size=world_size)
        dist.destroy_process_group()
    """
    assert found(tmp_path, script, "hard-coded-rendezvous") == [("hard-coded-rendezvous", 4)]


def test_a_fixed_address_only_where_the_launcher_set_nothing_is_no_mistake(tmp_path):
    script = """\
    import os
    import torch.distributed as dist

    def main():
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500" if "MASTER_ADDR" not in os.environ else "env://")
        dist.destroy_process_group()
    """
    assert found(tmp_path, script, "hard-coded-rendezvous") == []


DETECTOR = {"detector/__init__.py": """\
from transformers import AutoTokenizer

from .heads import build_head


class GeneralizedRCNN:
    def __init__(self, cfg):
        self.head = build_head(cfg)


class GeneralizedVLRCNN:
    def __init__(self, cfg):
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer_type)


_ARCHITECTURES = {"GeneralizedRCNN": GeneralizedRCNN, "GeneralizedVLRCNN": GeneralizedVLRCNN}


def build_detection_model(cfg):
    meta_arch = _ARCHITECTURES[cfg.meta_architecture]
    return meta_arch(cfg)
""", "detector/heads.py": """\
def build_head(cfg):
    return None
"""}

BUILT = """\
import torch
import torch.distributed as dist
from detector import build_detection_model


def main(cfg, local_rank):
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = build_detection_model(cfg)
    dist.destroy_process_group()
"""


def test_a_model_built_through_a_table_of_the_projects_classes_fetches_what_they_fetch(tmp_path):
    assert found(tmp_path, BUILT, "download-on-every-rank", DETECTOR) == [("download-on-every-rank", 9)]


def test_a_table_called_directly_and_a_table_of_classes_that_fetch_nothing(tmp_path):
    direct = {**DETECTOR, "detector/__init__.py": DETECTOR["detector/__init__.py"].replace(
        "    meta_arch = _ARCHITECTURES[cfg.meta_architecture]\n    return meta_arch(cfg)",
        "    return _ARCHITECTURES[cfg.meta_architecture](cfg)")}
    assert found(tmp_path, BUILT, "download-on-every-rank", direct) == [("download-on-every-rank", 9)]
    quiet = {**DETECTOR, "detector/__init__.py": DETECTOR["detector/__init__.py"].replace(
        "AutoTokenizer.from_pretrained(cfg.tokenizer_type)", "None")}
    assert found(tmp_path, BUILT, "download-on-every-rank", quiet) == []
