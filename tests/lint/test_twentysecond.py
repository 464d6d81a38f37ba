"""What the twenty-second round of real scripts taught. About the global rank used as a GPU index:
a name that says "local" but is given the global rank holds the global rank (the group started with
it is numbered by the global rank too), a device string filled in by str.format is a device, and a
worker's parameter given mp.spawn's process index is a GPU of this machine whatever it is called;
a map_location naming one GPU by number piles every rank's copy onto it; and fair-esm's pretrained
models, OmegaConf.save and a model's push_to_hub write or fetch the same files from every rank.
Each case is a small script in the shape of the public code it comes from; the expected findings
are what a careful reader says."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def found(tmp_path, text: str) -> list[tuple[str, int]]:
    (tmp_path / "train.py").write_text(textwrap.dedent(text))
    return sorted((f.id, f.line) for f in lint_file(str(tmp_path / "train.py"), select={"global-rank-as-device"}))


# A Gaussian-splatting trainer: init_distributed_mode stores RANK under the name local_rank (the
# local rank goes to args.gpu), starts the group with it, and train() builds its device from it.
GLOBAL_UNDER_A_LOCAL_NAME = """\
import os
import torch
import torch.distributed as dist


def init_distributed_mode(args):
    args.local_rank = int(os.environ["RANK"])
    args.world_size = int(os.environ["WORLD_SIZE"])
    args.gpu = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.gpu)
    dist.init_process_group("nccl", world_size=args.world_size, rank=args.local_rank)


def train(args):
    device = DEVICE
    model = torch.nn.Linear(2, 2).to(device)
    dist.destroy_process_group()


if __name__ == "__main__":
    args = parse()
    init_distributed_mode(args)
    train(args)
"""


def test_the_global_rank_kept_under_the_name_local_rank_is_the_global_rank(tmp_path):
    for device in ('f"cuda:{args.local_rank}"', '"cuda:{}".format(args.local_rank)', '"cuda:%d" % args.local_rank'):
        assert found(tmp_path, GLOBAL_UNDER_A_LOCAL_NAME.replace("DEVICE", device)) == [("global-rank-as-device", 15)], device


def test_a_name_local_rank_given_the_local_rank_stays_a_fine_gpu(tmp_path):
    text = GLOBAL_UNDER_A_LOCAL_NAME.replace("DEVICE", '"cuda:{}".format(args.local_rank)')
    text = text.replace('args.local_rank = int(os.environ["RANK"])', 'args.local_rank = int(os.environ["LOCAL_RANK"])')
    assert found(tmp_path, text) == []


# An energy-based-model trainer: the spawned worker computes the global rank_idx for the group, but
# hands train() its spawn index `gpu`, which train() calls rank_idx.
SPAWN_INDEX_UNDER_A_RANK_NAME = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(model, flags, rank_idx):
    torch.cuda.set_device(rank_idx)
    dev = torch.device("cuda:{}".format(rank_idx))
    model.to(dev)


def main_single(gpu, flags):
    rank_idx = flags.node_rank * flags.gpus + gpu
    dist.init_process_group("nccl", init_method="env://", world_size=flags.nodes * flags.gpus, rank=rank_idx)
    train(torch.nn.Linear(2, 2), flags, GIVEN)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main_single, nprocs=8, args=(parse(),))
"""


def test_a_parameter_given_the_spawn_index_is_a_gpu_of_this_machine(tmp_path):
    assert found(tmp_path, SPAWN_INDEX_UNDER_A_RANK_NAME.replace("GIVEN", "gpu")) == []


def test_a_parameter_given_the_global_rank_is_still_reported(tmp_path):
    assert found(tmp_path, SPAWN_INDEX_UNDER_A_RANK_NAME.replace("GIVEN", "rank_idx")) == [
        ("global-rank-as-device", 7), ("global-rank-as-device", 8)]


# A SAM fine-tuning script: every rank loads the checkpoint with map_location='cuda:0', a fixed GPU,
# directly or through the project's builder; each process works on its own GPU.
FIXED_GPU_LOAD = """\
import os
import torch
import torch.distributed as dist
from build import build_sam

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
state = torch.load("sam_vit_b.pth", map_location=LOCATION)
sam = build_sam("sam_vit_b.pth")
dist.destroy_process_group()
"""

BUILDER = """\
import torch


def build_sam(checkpoint):
    with open(checkpoint, "rb") as f:
        return torch.load(f, map_location=LOCATION)
"""


def test_a_checkpoint_loaded_onto_one_gpu_named_by_number_in_every_rank(tmp_path):
    for location in ("'cuda:0'", "torch.device('cuda:1')", "torch.device('cuda', 0)"):
        (tmp_path / "build.py").write_text(BUILDER.replace("LOCATION", location))
        findings = [f for f in lint_file(str(_write(tmp_path, FIXED_GPU_LOAD.replace("LOCATION", location))))
                    if f.id == "torch-load-without-map-location"]
        assert [f.line for f in findings] == [9, 10], location
        assert "onto that one GPU" in findings[0].title and "build.py:6" in findings[1].title, location


def test_a_checkpoint_loaded_onto_the_processs_own_gpu_or_the_cpu_is_fine(tmp_path):
    (tmp_path / "build.py").write_text(BUILDER.replace("LOCATION", "'cpu'"))
    for location in ("'cpu'", "f'cuda:{local_rank}'", "'cuda'", "torch.device('cuda', local_rank)"):
        findings = [f for f in lint_file(str(_write(tmp_path, FIXED_GPU_LOAD.replace("LOCATION", location))))
                    if f.id == "torch-load-without-map-location"]
        assert findings == [], location


def _write(tmp_path, text: str):
    (tmp_path / "train.py").write_text(text)
    return tmp_path / "train.py"


# A protein language model trained under Accelerate, a geospatial benchmark with Hydra configs and a
# small LM pretraining loop that pushes to the Hub: each rank does what only one should.
EVERY_RANK_WRITES = """\
import os
import esm
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
esm_model, alphabet = esm.pretrained.esm2_t33_650M_UR50D()
OmegaConf.save(cfg, "runs/config.yaml")
train(model)
model.push_to_hub("me/my-lm")
tokenizer.push_to_hub("me/my-lm")
trainer.push_to_hub()
dist.destroy_process_group()
"""


def test_fair_esm_weights_a_hydra_config_and_a_hub_push_on_every_rank(tmp_path):
    findings = {(f.id, f.line) for f in lint_file(str(_write(tmp_path, EVERY_RANK_WRITES)))}
    assert ("download-on-every-rank", 10) in findings  # esm.pretrained fetches into torch hub's cache
    assert ("save-on-every-rank", 11) in findings  # OmegaConf.save of one file
    assert ("save-on-every-rank", 13) in findings  # the first push of the run's block
    assert ("save-on-every-rank", 14) not in findings  # (the same push, said once)
    assert ("save-on-every-rank", 15) not in findings  # a Trainer pushes from its main process itself
    push = next(f for f in lint_file(str(tmp_path / "train.py")) if f.line == 13)
    assert "push the same files" in push.title and push.fix.startswith("Push from one rank")


def test_the_same_writes_on_one_rank_are_fine(tmp_path):
    guarded = EVERY_RANK_WRITES.replace("esm_model, alphabet = esm.pretrained.esm2_t33_650M_UR50D()\n", "")
    for line in ('OmegaConf.save(cfg, "runs/config.yaml")', 'model.push_to_hub("me/my-lm")', 'tokenizer.push_to_hub("me/my-lm")'):
        guarded = guarded.replace(line, f"if dist.get_rank() == 0:\n    {line}")
    assert [f for f in lint_file(str(_write(tmp_path, guarded))) if f.id in ("save-on-every-rank", "download-on-every-rank")] == []
