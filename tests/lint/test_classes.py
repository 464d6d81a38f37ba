"""`gpurig lint` on classes of pattern met in real scripts while growing the corpus (lint6): each
test is a small script written for it, in the shape of the pattern, never a copy of a corpus
script. Quiet where the script does the right thing; a finding where the mistake is."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import RULES, lint_source

HEAD = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
"""


def found(body: str, path=None, end: str = "\ndist.destroy_process_group()\n") -> list[tuple[str, int]]:
    source = HEAD + textwrap.dedent(body) + end
    return [(f.id, f.line) for f in lint_source(source, str(path or "<script>"), path=path, select=set(RULES))]


def rules(body: str, **kw) -> list[str]:
    return [r for r, _ in found(body, **kw)]


def test_a_rendezvous_default_for_runs_without_a_launcher_is_not_hard_coded():
    body = """
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "29531"
    dist.init_process_group("nccl")
    """
    assert "hard-coded-rendezvous" not in rules(body)
    # in the other branch of `"MASTER_PORT" in os.environ` too
    other = """
    if "MASTER_PORT" in os.environ:
        pass
    else:
        os.environ["MASTER_PORT"] = "29531"
    dist.init_process_group("nccl")
    """
    assert "hard-coded-rendezvous" not in rules(other)
    # set whatever the launcher said: still fixed
    assert "hard-coded-rendezvous" in rules("""
    os.environ["MASTER_PORT"] = "29531"
    dist.init_process_group("nccl")
    """)


def test_a_rendezvous_set_where_no_launcher_set_the_world_is_a_single_process_default():
    # `if "WORLD_SIZE" not in os.environ:` (or RANK, LOCAL_RANK, SLURM_PROCID) holds only in a run
    # nobody launched: the port set there is the local fallback of one process, as for MASTER_PORT.
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "SLURM_PROCID"):
        body = f"""
        if "{key}" not in os.environ:
            os.environ["RANK"] = "0"
            os.environ["WORLD_SIZE"] = "1"
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "1234"
        dist.init_process_group("nccl")
        """
        assert "hard-coded-rendezvous" not in rules(body), key
    # where the launcher did set the world, a fixed port is still fixed
    assert "hard-coded-rendezvous" in rules("""
    if "WORLD_SIZE" in os.environ:
        os.environ["MASTER_PORT"] = "1234"
    dist.init_process_group("nccl")
    """)
    # and a test of some other variable is no launcher's absence
    assert "hard-coded-rendezvous" in rules("""
    if "DEBUG" not in os.environ:
        os.environ["MASTER_PORT"] = "1234"
    dist.init_process_group("nccl")
    """)


def test_a_name_holding_the_local_rank_is_a_fine_device_even_with_a_global_fallback():
    body = """
    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(2, 2).to(rank), device_ids=[rank])
    if "LOCAL_RANK" in os.environ:
        rank = int(os.environ["LOCAL_RANK"])
    elif "RANK" in os.environ:
        rank = int(os.environ["RANK"])
    else:
        rank = 0
    worker(rank, int(os.environ.get("WORLD_SIZE", 1)))
    """
    assert "global-rank-as-device" not in rules(body)
    # the global rank proper is still found
    assert "global-rank-as-device" in rules("""
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(rank)
    """)


def test_the_global_rank_in_a_device_string_or_torch_device():
    body = """
    def evaluate(model, loader, rank):
        for x in loader:
            x = x.to(f"cuda:{rank}")
            y = x.cuda(torch.device("cuda", rank))
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    rank = dist.get_rank()
    evaluate(None, [], rank)
    """
    # one mistake, reported at its first use, which names the second (lint_devices.fold_uses)
    assert [r for r in found(body) if r[0] == "global-rank-as-device"] == [("global-rank-as-device", 11)]
    assert "global-rank-as-device" not in rules(body.replace('f"cuda:{rank}"', 'f"cuda:{local_rank}"').replace(
        'torch.device("cuda", rank)', 'torch.device("cuda", local_rank)'))


def test_set_device_on_the_gpu_branch_of_is_available_covers_what_follows():
    body = """
    def main():
        dist.init_process_group("nccl")
        if not torch.cuda.is_available():
            device = torch.device("cpu")
        else:
            device = torch.device("cuda:0")
            torch.cuda.set_device(device)
        model = DDP(torch.nn.Linear(2, 2).to(device))
        dist.destroy_process_group()
    main()
    """
    assert "ddp-without-device" not in rules(body, end="")
    # a branch on something else still leaves one path without a device
    assert "ddp-without-device" in rules(body.replace("not torch.cuda.is_available()", "args.gpu is None"), end="")


def test_a_from_pretrained_of_the_scripts_own_class_is_reported_once_at_the_download():
    body = """
    class Net(torch.nn.Module):
        @classmethod
        def from_pretrained(cls, name):
            from transformers import AutoModel
            hf = AutoModel.from_pretrained(name)
            return cls()
    dist.init_process_group("nccl")
    model = Net.from_pretrained("gpt2")
    """
    assert [r for r in found(body) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 13)]


def test_no_destroy_is_one_mistake_however_many_starts():
    body = """
    import sys
    def worker(rank, n):
        if sys.platform == "win32":
            dist.init_process_group("gloo", init_method="file:///tmp/x", rank=rank, world_size=n)
        else:
            dist.init_process_group("nccl", init_method="file:///tmp/x", rank=rank, world_size=n)
    """
    assert rules(body, end="").count("no-destroy-process-group") == 1


def test_what_the_parent_does_before_spawning_its_workers_runs_once():
    body = """
    import json
    def worker(rank, n, run_dir):
        dist.init_process_group("nccl", init_method="file:///tmp/rdzv", rank=rank, world_size=n)
        dist.destroy_process_group()
    def main(run_dir, n):
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "options.json"), "w") as f:
            json.dump({}, f)
        mp.spawn(worker, args=(n, run_dir), nprocs=n)
    if __name__ == "__main__":
        with open("launch.log", "a") as f:
            f.write("start")
        mp.spawn(worker, args=(2, "out"), nprocs=2)
    """
    assert "save-on-every-rank" not in rules(body, end="")
    # A script a launcher may start too (it reads WORLD_SIZE): the same lines run in every process.
    assert "save-on-every-rank" in rules(body + "world = int(os.environ['WORLD_SIZE'])\n", end="")


def test_a_dataset_read_from_the_users_own_files_is_not_a_download():
    body = """
    from datasets import load_dataset
    dist.init_process_group("nccl")
    local = load_dataset("json", data_files="train.jsonl")
    hub = load_dataset("some-user/some-dataset")
    """
    assert [r for r in found(body) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 12)]


def test_save_pretrained_on_every_rank():
    body = """
    dist.init_process_group("nccl")
    model.save_pretrained("out")
    if dist.get_rank() == 0:
        tokenizer.save_pretrained("out")
    unwrapped.save_pretrained("out", is_main_process=accelerator.is_main_process, save_function=accelerator.save)
    """
    assert [r for r in found(body) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 10)]


def test_pretrained_weights_named_by_position_to_a_model_factory():
    body = """
    import open_clip
    dist.init_process_group("nccl")
    model, _, _ = open_clip.create_model_and_transforms(args.model, args.pretrained)
    state = torch.load(args.pretrained, map_location="cpu")
    print(args.pretrained)
    """
    assert [r for r in found(body) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 11)]


def test_a_shuffling_sampler_built_by_the_projects_helper(tmp_path):
    project = tmp_path / "project"
    (project / "utils").mkdir(parents=True)
    (project / "utils" / "__init__.py").write_text("from .dist import data_sampler\n")
    (project / "utils" / "dist.py").write_text(textwrap.dedent("""
        from torch.utils.data.distributed import DistributedSampler
        def data_sampler(dataset, shuffle, distributed):
            if distributed:
                return DistributedSampler(dataset, shuffle=shuffle)
        """))
    body = """
    import utils
    dist.init_process_group("nccl")
    sampler = utils.data_sampler(range(10), shuffle=True, distributed=True)
    val = utils.data_sampler(range(10), False, True)
    for epoch in range(3):
        for x in DataLoader(range(10), sampler=sampler):
            pass
    """
    script = project / "train.py"
    script.write_text(HEAD + textwrap.dedent(body))
    assert [r for r in found(body, path=script) if r[0] == "sampler-without-set-epoch"] == [("sampler-without-set-epoch", 11)]
    with_epoch = body + "    sampler.set_epoch(epoch)\n"
    assert "sampler-without-set-epoch" not in rules(with_epoch, path=script)


def test_a_prepared_dataset_loaded_with_torch_load_is_not_a_checkpoint():
    body = """
    dist.init_process_group("nccl")
    train_data = torch.load(os.path.join(data_dir, "train.pt"))
    val_data = torch.load("data/val_tokens.pt")
    state = torch.load(os.path.join(out_dir, "model_best.pt"))
    """
    assert [r for r in found(body) if r[0] == "torch-load-without-map-location"] == [
        ("torch-load-without-map-location", 12)]


def _project(tmp_path, helper: str, body: str):
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text(textwrap.dedent(helper))
    script = project / "train.py"
    script.write_text(HEAD + textwrap.dedent(body))
    return found(body, path=script)


def test_a_helper_that_downloads_through_another_helper(tmp_path):
    helper = """
    import os
    from torchvision.datasets.utils import download_url
    def fetch(name):
        if not os.path.isfile(name):
            download_url("https://example.org/" + name, ".")
    def find_weights(name):
        if name.startswith("pretrained:"):
            return fetch(name)
        return name
    """
    body = """
    from helpers import find_weights
    dist.init_process_group("nccl")
    weights = find_weights(args.ckpt)
    """
    assert ("download-on-every-rank", 11) in _project(tmp_path, helper, body)


def test_rank_first_context_managers_under_their_other_names(tmp_path):
    helper = """
    from torchvision.datasets import CIFAR10
    def get_datasets(path):
        return CIFAR10(path, download=True)
    """
    for manager in ("idist.one_rank_first(local=True)", "fabric.rank_zero_first()",
                    "torch_distributed_zero_first(LOCAL_RANK)", "accelerator.local_main_process_first()"):
        body = f"""
        from helpers import get_datasets
        dist.init_process_group("nccl")
        with {manager}:
            data = get_datasets("data")
        """
        assert "download-on-every-rank" not in [r for r, _ in _project(tmp_path, helper, body)], manager
        (tmp_path / "project").rename(tmp_path / manager.split("(")[0].replace(".", "_"))
    body = """
    from helpers import get_datasets
    dist.init_process_group("nccl")
    data = get_datasets("data")
    """
    assert "download-on-every-rank" in [r for r, _ in _project(tmp_path, helper, body)]


@pytest.mark.parametrize("helper_import", [
    "from pytorch_lightning.loggers import CSVLogger", "from lightning.pytorch.callbacks import ModelCheckpoint",
    "from accelerate.utils import set_seed", "from deepspeed.utils import logger",
    "from pytorch_lightning.loggers.wandb import WandbLogger", "from pytorch_lightning import seed_everything"])
def test_a_script_that_imports_only_a_frameworks_helpers_runs_in_one_process(helper_import):
    # (a DataParallel script that borrows Lightning's CSV logger: one process, its saves are no race)
    script = f"""
    import torch
    {helper_import}
    model = torch.nn.DataParallel(Net()).cuda()
    state = torch.load("last.pth")
    torch.save(model.state_dict(), "best.pth")
    """
    source = textwrap.dedent(script)
    assert [f.id for f in lint_source(source, select=set(RULES))] == ["data-parallel"]
    # the framework itself imported: launched one process per device
    framework = source.replace(helper_import, "import pytorch_lightning as pl")
    assert {f.id for f in lint_source(framework, select=set(RULES))} >= {"save-on-every-rank", "torch-load-without-map-location"}


def test_a_lightning_run_set_to_one_device_is_one_process():
    script = """
    import lightning as L
    import torch
    from dataclasses import dataclass
    from torchvision.datasets import MNIST

    @dataclass
    class Config:
        devices: int = 1

    config = Config()
    data = MNIST("data", download=True)
    state = torch.load("last.ckpt")
    trainer = L.Trainer(devices=config.devices)
    """
    source = textwrap.dedent(script)
    assert [f.id for f in lint_source(source, select=set(RULES))] == []
    # every GPU it sees (the default "auto", or more than one): one process per device
    for devices in ("", "devices=4", "devices=config.gpus"):
        other = source.replace("devices=config.devices", devices)
        assert {f.id for f in lint_source(other, select=set(RULES))} >= {
            "download-on-every-rank", "torch-load-without-map-location"}, devices


def test_master_port_from_a_parameter_with_a_fixed_default(tmp_path):
    body = """
    def setup(rank, world_size, port=12355):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    setup(0, 1)
    """
    assert ("hard-coded-rendezvous", 11) in found(body)
    # every call passes its own port: nothing fixed
    assert "hard-coded-rendezvous" not in rules(body.replace("setup(0, 1)", "setup(0, 1, port=free_port())"))
    # the same helper in the project's own module: found where the script calls it with the default
    helper = """
    import os
    import torch.distributed as dist
    def init_distributed(port=40112, rank_and_world_size=(None, None)):
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("nccl")
    """
    script = """
    from helpers import init_distributed
    init_distributed()
    """
    assert ("hard-coded-rendezvous", 10) in _project(tmp_path, helper, script)


def test_master_port_from_a_parameter_the_caller_fixes(tmp_path):
    body = """
    def setup(rank, world_size, port):
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    def worker(rank, world_size):
        setup(rank, world_size, 12355)
    mp.spawn(worker, args=(2,), nprocs=2)
    """
    assert ("hard-coded-rendezvous", 10) in found(body)
    assert "hard-coded-rendezvous" not in rules(body.replace("12355)", "args.port)"))
    # a worker given the port in mp.spawn's args (after the process index)
    spawned = """
    def worker(rank, world_size, port):
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    mp.spawn(worker, args=(2, 29511), nprocs=2)
    """
    assert ("hard-coded-rendezvous", 10) in found(spawned)
    assert "hard-coded-rendezvous" not in rules(spawned.replace("29511", "find_free_port()"))
    # the project's helper, given a fixed port by the script (`slurm_param_server_arch(port=23300)`)
    helper = """
    import os
    import torch.distributed as dist
    def init_slurm(port, backend="gloo"):
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group(backend)
    """
    script = """
    from helpers import init_slurm
    init_slurm(port=23300)
    """
    assert ("hard-coded-rendezvous", 10) in _project(tmp_path, helper, script)
    (tmp_path / "given").mkdir()
    assert "hard-coded-rendezvous" not in [r for r, _ in _project(tmp_path / "given", helper, script.replace("23300", "args.port"))]


def test_an_options_class_that_writes_opt_txt_on_every_rank_names_the_file(tmp_path):
    # pix2pix's BaseOptions.parse() writes opt.txt: said by its file name, not a cut-off expression
    helper = """
    import argparse
    import os
    class BaseOptions:
        def parse(self):
            self.opt = argparse.ArgumentParser().parse_args()
            with open(os.path.join(os.path.join(self.opt.checkpoints_dir, self.opt.name), "opt.txt"), "wt") as f:
                f.write(str(vars(self.opt)))
            return self.opt
    class TrainOptions(BaseOptions):
        pass
    """
    script = """
    from helpers import TrainOptions
    opt = TrainOptions().parse()
    dist.init_process_group("nccl")
    """
    (project := tmp_path / "project").mkdir()
    (project / "helpers.py").write_text(textwrap.dedent(helper))
    (project / "train.py").write_text(HEAD + textwrap.dedent(script) + "\ndist.destroy_process_group()\n")
    found = [f for f in lint_source((project / "train.py").read_text(), str(project / "train.py"), path=project / "train.py",
                                    select=set(RULES)) if f.id == "save-on-every-rank"]
    assert [f.line for f in found] == [10]
    assert "a write of 'opt.txt' at helpers.py:7" in found[0].title


def test_a_subclass_of_data_parallel_in_the_script_is_data_parallel():
    # (CompressAI's example: `class CustomDataParallel(nn.DataParallel)` to reach the module's methods)
    script = """
    import torch
    import torch.nn as nn
    class CustomDataParallel(nn.DataParallel):
        def __getattr__(self, key):
            return super().__getattr__(key)
    net = nn.Linear(2, 2).cuda()
    if torch.cuda.device_count() > 1:
        net = CustomDataParallel(net)
    """
    source = textwrap.dedent(script)
    assert [(f.id, f.line) for f in lint_source(source, select=set(RULES))] == [("data-parallel", 9)]
    assert lint_source(source.replace("(nn.DataParallel)", "(nn.Module)"), select=set(RULES)) == []


def test_a_tcp_address_on_the_port_of_an_option_with_a_fixed_default(tmp_path):
    # OpenPCDet's shape: the launcher's init function picked by name, given --tcp_port (default 18888)
    helper = """
    import torch.distributed as dist
    def init_dist_slurm(tcp_port, local_rank, backend="nccl"):
        dist.init_process_group(backend=backend)
    def init_dist_pytorch(tcp_port, local_rank, backend="nccl"):
        dist.init_process_group(
            backend=backend,
            init_method="tcp://127.0.0.1:%d" % tcp_port,
        )
    """
    script = """
    import argparse
    import helpers
    parser = argparse.ArgumentParser()
    parser.add_argument("--launcher", default="none")
    parser.add_argument("--tcp_port", type=int, default=18888)
    args = parser.parse_args()
    getattr(helpers, "init_dist_%s" % args.launcher)(args.tcp_port, 0, backend="nccl")
    """
    assert ("hard-coded-rendezvous", 15) in _project(tmp_path, helper, script)
    # the port left to the user (no default), or the address left to the launcher: nothing fixed
    # ... or the script or the function sets it again (a free port, the launcher's MASTER_PORT)
    for where, (old, new) in {"required": ("default=18888", "required=True"),
                              "env": ('init_method="tcp://127.0.0.1:%d" % tcp_port,', ""),
                              "reset": ("args = parser.parse_args()", "args = parser.parse_args()\n    args.tcp_port = free_port()"),
                              "launcher": ("        dist.init_process_group(\n", "        tcp_port = int(os.environ.get('MASTER_PORT', tcp_port))\n"
                                           "        dist.init_process_group(\n")}.items():
        (tmp_path / where).mkdir()
        changed = (helper.replace(old, new), script) if where in ("env", "launcher") else (helper, script.replace(old, new))
        assert changed != (helper, script), where
        assert "hard-coded-rendezvous" not in [r for r, _ in _project(tmp_path / where, *changed)], where


def test_master_port_from_a_parameter_the_environment_sets_first():
    # `port = os.environ.get("PORT", port)`: the default is a fallback the environment overrides
    body = """
    def init_dist(backend="nccl", port=29500):
        port = os.environ.get("PORT", port)
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group(backend=backend)
    init_dist()
    """
    assert "hard-coded-rendezvous" not in rules(body)
    assert ("hard-coded-rendezvous", 10) in found(body.replace('        port = os.environ.get("PORT", port)\n', ""))


def test_a_check_true_on_every_rank_but_one_does_not_pick_one_rank():
    body = """
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank != 0:
        torch.save({}, "ckpt.pt")
    else:
        torch.save({}, "best.pt")
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        torch.save({}, "last.pt")
    """
    assert [r for r in found(body) if r[0] == "save-on-every-rank"] == [
        ("save-on-every-rank", 12), ("save-on-every-rank", 17)]


def test_a_save_into_memory_or_in_a_function_nothing_uses():
    body = """
    import io
    def unused_export(model, path):
        torch.save(model.state_dict(), path)
    dist.init_process_group("nccl")
    with io.BytesIO() as f:
        torch.save({}, f)
        blob = f.getvalue()
    buf = io.BytesIO()
    torch.save({}, buf)
    """
    assert "save-on-every-rank" not in rules(body)
    # the same function, called: its save runs on every rank
    assert "save-on-every-rank" in rules(body + "unused_export(model, 'model.pt')\n")


def test_only_the_default_group_ended_on_every_rank_counts():
    subgroup = """
    dist.init_process_group("nccl")
    pg = dist.new_group(backend="gloo")
    dist.destroy_process_group(pg)
    """
    assert "no-destroy-process-group" in rules(subgroup, end="")
    under_check = """
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank in [-1, 0]:
        print("done")
    else:
        dist.destroy_process_group()
    """
    assert "no-destroy-process-group" in rules(under_check, end="")
    everywhere = """
    dist.init_process_group("nccl")
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        dist.destroy_process_group()
    """
    assert "no-destroy-process-group" not in rules(everywhere, end="")


def test_ddp_of_a_model_already_on_this_processs_gpu():
    body = """
    def main(local_rank, args):
        dist.init_process_group("nccl")
        device = torch.device("cuda", local_rank)
        model = torch.nn.Linear(2, 2).to(device)
        model = DDP(model)
        net = torch.nn.Linear(2, 2)
        if args.gpu is not None:
            net.cuda(args.gpu)
            net = DDP(net)
        else:
            net.cuda()
            net = DDP(net)
        dist.destroy_process_group()
    """
    # only the branch whose model went to the default GPU (cuda:0 on every rank)
    assert [r for r in found(body, end="") if r[0] == "ddp-without-device"] == [("ddp-without-device", 20)]
    # the global rank is no GPU of this process
    global_rank = body.replace('torch.device("cuda", local_rank)', 'torch.device("cuda", dist.get_rank())').replace(
        "def main(local_rank, args):", "def main(local_rank, args):\n        rank = dist.get_rank()").replace(
        "dist.get_rank())", "rank)")
    assert ("ddp-without-device", 14) in found(global_rank, end="")


def test_a_sampler_over_evaluation_data_needs_no_epoch():
    body = """
    dist.init_process_group("nccl")
    val_sampler = DistributedSampler(val_dataset)
    test_sampler = DistributedSampler(dataset=testset)
    train_sampler = DistributedSampler(train_dataset)
    for epoch in range(3):
        pass
    """
    assert [r for r in found(body) if r[0] == "sampler-without-set-epoch"] == [("sampler-without-set-epoch", 12)]
    # datasets kept in a dict by split: {"train": ..., "val": ...}
    by_split = body.replace("val_dataset)", 'datasets["val"])').replace("train_dataset)", 'datasets["train"])')
    assert [r for r in found(by_split) if r[0] == "sampler-without-set-epoch"] == [("sampler-without-set-epoch", 12)]


def test_a_download_under_a_file_lock_runs_once():
    body = """
    from filelock import FileLock
    from torchvision import datasets
    dist.init_process_group("nccl")
    with FileLock(os.path.expanduser("~/.data.lock")):
        train = datasets.MNIST("data", download=True)
    test = datasets.MNIST("data", train=False, download=True)
    """
    assert [r for r in found(body) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 14)]


def test_a_rank_check_in_a_conditional_expression():
    body = """
    import io
    dist.init_process_group("nccl")
    saved = torch.save(model, "model.pt") if dist.get_rank() == 0 else None
    other = None if dist.get_rank() == 0 else torch.save(model, "model.pt")
    """
    assert [r for r in found(body) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 12)]


def test_a_file_named_once_in_a_variable_is_that_file():
    body = """
    import pathlib
    def main(out):
        dist.init_process_group("nccl")
        log_csv = os.path.join(out, "metrics.csv")
        with open(log_csv, "a") as f:
            f.write("epoch,loss\\n")
        results = pathlib.Path(out) / "results.txt"
        results.write_text("done")
        with open(os.path.join(out, "main.log"), "w") as f:
            pass
        per_rank = f"{out}/log_{dist.get_rank()}.txt"
        with open(per_rank, "a") as f:
            f.write("x")
        dist.destroy_process_group()
    main("out")
    """
    assert [r for r in found(body, end="") if r[0] == "save-on-every-rank"] == [
        ("save-on-every-rank", 13), ("save-on-every-rank", 16)]


def test_a_save_helper_of_the_projects_own_module_called_on_every_rank(tmp_path):
    helper = """
    import io
    import torch
    import torch.distributed as dist
    def save_model(model, path):
        torch.save(model.state_dict(), path)
    def save_on_master(*args):
        if dist.get_rank() == 0:
            torch.save(*args)
    def snapshot(obj):
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()
    """
    body = """
    from helpers import save_model, save_on_master, snapshot
    dist.init_process_group("nccl")
    blob = snapshot({})
    save_on_master({}, "ckpt.pt")
    if dist.get_rank() == 0:
        save_model(model, "best.pt")
    save_model(model, "last.pt")
    """
    assert [r for r in _project(tmp_path, helper, body) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 15)]


def test_the_projects_package_two_folders_up(tmp_path):
    root = tmp_path / "repo"
    (root / "src" / "utils").mkdir(parents=True)
    (root / "src" / "__init__.py").write_text("")
    (root / "src" / "utils" / "__init__.py").write_text("")
    (root / "src" / "utils" / "distributed.py").write_text(textwrap.dedent("""
        import torch.distributed as dist
        def init_distributed():
            dist.init_process_group("nccl")
        """))
    script = root / "app" / "vision" / "train.py"
    script.parent.mkdir(parents=True)
    source = "from src.utils.distributed import init_distributed\ninit_distributed()\n"
    script.write_text(source)
    assert [f.id for f in lint_source(source, str(script), path=script)] == ["no-destroy-process-group"]


def test_a_file_writing_helper_of_the_project_called_on_every_rank(tmp_path):
    helper = """
    import yaml
    def yaml_save(file, data):
        with open(file, "w") as f:
            yaml.safe_dump(data, f)
    """
    body = """
    from helpers import yaml_save
    dist.init_process_group("nccl")
    yaml_save(save_dir / "hyp.yaml", hyp)
    yaml_save(save_dir / "opt.yaml", vars(opt))
    yaml_save(f"run_{dist.get_rank()}.yaml", {})
    if dist.get_rank() == 0:
        yaml_save(save_dir / "data.yaml", {})
    """
    assert [r for r in _project(tmp_path, helper, body) if r[0] == "save-on-every-rank"] == [
        ("save-on-every-rank", 11), ("save-on-every-rank", 12)]


def test_a_rank_first_context_manager_the_script_defines_itself():
    # Defined after its use, under a name no library uses: what makes it rank-first is its body
    # (a rank check around the yield, a barrier). The helper called inside it is covered too.
    body = """
    from contextlib import contextmanager
    from transformers import AutoConfig
    import datasets

    def main():
        dist.init_process_group("nccl")
        with rank_ordered(should_go_first=int(os.environ["LOCAL_RANK"]) == 0):
            config = AutoConfig.from_pretrained("gpt2")
        with rank_ordered(should_go_first=int(os.environ["LOCAL_RANK"]) == 0):
            data = load_data()

    def load_data():
        return datasets.load_dataset("wikitext")

    @contextmanager
    def rank_ordered(*, should_go_first):
        if should_go_first:
            yield
        dist.barrier()
        if not should_go_first:
            yield
        dist.barrier()

    main()
    """
    assert "download-on-every-rank" not in rules(body)
    # A context manager without a barrier orders nothing: the downloads race.
    unordered = body.replace("        dist.barrier()\n", "        pass\n")
    assert [line for r, line in found(unordered) if r == "download-on-every-rank"] == [16, 21]


def test_a_helper_called_outside_the_rank_first_section_too_still_downloads_everywhere():
    body = """
    from contextlib import contextmanager
    import datasets

    @contextmanager
    def rank0_first():
        if dist.get_rank() == 0:
            yield
        dist.barrier()
        if dist.get_rank() > 0:
            yield

    def load_data():
        return datasets.load_dataset("wikitext")

    dist.init_process_group("nccl")
    with rank0_first():
        train = load_data()
    again = load_data()
    """
    assert ("download-on-every-rank", 21) in found(body)


def test_a_loop_over_a_dicts_items_inside_a_loop_is_no_epoch_loop():
    # One pass over the loader, then a report that walks a dict of dicts: no epoch to reshuffle for.
    body = """
    dist.init_process_group("nccl")
    data = list(range(100))
    loader = DataLoader(data, sampler=DistributedSampler(data))
    for batch in loader:
        pass
    for name, stats in timings.items():
        for key, value in sorted(stats.items()):
            print(name, key, value)
    """
    assert "sampler-without-set-epoch" not in rules(body)
    with_epochs = body.replace("    for batch in loader:\n        pass",
                               "    for step in range(10):\n        for batch in loader:\n            pass")
    assert "sampler-without-set-epoch" in rules(with_epochs)


def test_keras_datasets_in_every_horovod_process():
    script = """
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf
    from tensorflow.keras.datasets import mnist

    hvd.init()
    (x, y), _ = mnist.load_data()
    (x2, y2), _ = tf.keras.datasets.cifar10.load_data()
    (x3, y3), _ = tf.keras.datasets.mnist.load_data(path="mnist-%d.npz" % hvd.rank())
    """
    got = [(f.id, f.line) for f in lint_source(textwrap.dedent(script), "<script>", select=set(RULES))]
    assert [line for r, line in got if r == "download-on-every-rank"] == [7, 8]
    # One process (no Horovod): nothing races.
    alone = textwrap.dedent(script).replace("hvd.init()", "").replace("import horovod.tensorflow.keras as hvd", "")
    assert not [f for f in lint_source(alone, "<script>", select=set(RULES)) if f.id == "download-on-every-rank"]


def test_a_project_helper_or_class_that_loads_a_checkpoint_without_map_location(tmp_path):
    helper = """
    import torch
    def load_encoder(name):
        return torch.load(f"ckpts/{name}.pth")
    class Teacher:
        def __init__(self, path):
            self.state = torch.load(path)
    def load_cached_data(train_fname, eval_fname):
        return torch.load(train_fname), torch.load(eval_fname)
    def load_safely(name):
        return torch.load(f"ckpts/{name}.pth", map_location="cpu")
    """
    body = """
    from helpers import Teacher, load_cached_data, load_encoder, load_safely
    dist.init_process_group("nccl")
    encoder = load_encoder("dino")
    teacher = Teacher("teacher.pth")
    data = load_cached_data("a", "b")
    safe = load_safely("dino")
    """
    got = [line for r, line in _project(tmp_path, helper, body) if r == "torch-load-without-map-location"]
    assert got == [11, 12]  # the helper and the class; not prepared data, not a load with map_location
    (tmp_path / "project").rename(tmp_path / "first")
    guarded = body.replace('encoder = load_encoder("dino")', 'encoder = load_encoder("dino") if dist.get_rank() == 0 else None')
    assert [line for r, line in _project(tmp_path, helper, guarded) if r == "torch-load-without-map-location"] == [12]


def test_the_function_workers_run_is_every_rank_even_with_a_one_gpu_call_of_it():
    body = """
    def run(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        state = torch.load("last.pt")
        dist.destroy_process_group()

    def main(world_size):
        if world_size == 1:
            run(0, 1)
            return
        mp.spawn(run, args=(world_size,), nprocs=world_size)

    main(torch.cuda.device_count())
    """
    got = found(body, end="")
    assert ("torch-load-without-map-location", 11) in got
    assert "no-destroy-process-group" not in [r for r, _ in got]


def test_from_pretrained_of_a_local_folder_is_no_download():
    body = """
    from diffusers import UNet2DModel
    dist.init_process_group("nccl")
    def load_model_hook(models, input_dir):
        a = UNet2DModel.from_pretrained(input_dir, subfolder="unet")
        b = UNet2DModel.from_pretrained(os.path.join(input_dir, "unet_ema"))
    accelerator.register_load_state_pre_hook(load_model_hook)
    hub = UNet2DModel.from_pretrained(args.pretrained_model_name_or_path, subfolder="unet")
    """
    assert [line for r, line in found(body) if r == "download-on-every-rank"] == [15]


def test_a_function_nothing_calls_is_not_run():
    body = """
    dist.init_process_group("nccl")
    def load_model_checkpoint(path):
        return torch.load(path)
    def resume(path):
        return torch.load(path)
    state = resume("last.pt")
    """
    assert [line for r, line in found(body) if r == "torch-load-without-map-location"] == [13]


def test_datasets_that_download_when_built_in_every_rank():
    # OGB and PyG datasets fetch into their root when it lacks the files.
    every_rank = """
    from ogb.nodeproppred import PygNodePropPredDataset
    dist.init_process_group("nccl")
    dataset = PygNodePropPredDataset(name="ogbn-products")
    """
    assert ("download-on-every-rank", 11) in found(every_rank)
    # Rank 0 builds it, the others after a barrier: `if rank != 0` comes after rank 0's download.
    rank_first = """
    from torch_geometric.datasets import Reddit
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank == 0:
        dataset = Reddit("data/Reddit")
    dist.barrier()
    if rank != 0:
        dataset = Reddit("data/Reddit")
    """
    assert "download-on-every-rank" not in rules(rank_first)
    # Built by the parent before it spawns the workers, which build it again from the files.
    parent_first = """
    from ogb.graphproppred import PygGraphPropPredDataset
    def run(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        dataset = PygGraphPropPredDataset("ogbg-molhiv")
    if __name__ == "__main__":
        PygGraphPropPredDataset("ogbg-molhiv")
        mp.spawn(run, args=(2,), nprocs=2)
    """
    assert "download-on-every-rank" not in rules(parent_first)


def test_a_rendezvous_fixed_in_the_projects_settings_or_shipped_configs(tmp_path):
    helper = """
    def create_hparams():
        return dict(dist_backend="nccl", dist_url="tcp://localhost:54321", epochs=500)
    """
    body = """
    from helpers import create_hparams
    hparams = create_hparams()
    dist.init_process_group(backend="nccl", init_method=hparams.dist_url, world_size=2, rank=0)
    """
    assert ("hard-coded-rendezvous", 11) in _project(tmp_path, helper, body)
    # A JSON config beside the script: fixed in every config that names it, or left to the user.
    import json

    folder = tmp_path / "json"
    folder.mkdir()
    script = folder / "train.py"
    script.write_text(HEAD + textwrap.dedent("""
    h = load_config(args.config)
    dist.init_process_group(backend="nccl", init_method=h.dist_config["dist_url"], world_size=2, rank=0)
    dist.destroy_process_group()
    """))
    for name in ("config_v1.json", "config_v2.json"):
        (folder / name).write_text(json.dumps({"dist_config": {"dist_url": "tcp://localhost:54321"}}))
    from gpurig.diagnose.lint import lint_file

    assert [f.line for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"] == [10]
    (folder / "config_v3.json").write_text(json.dumps({"dist_config": {"dist_url": "env://"}}))
    assert not [f for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]


def test_a_launcher_of_the_project_that_runs_the_scripts_main_owns_the_group(tmp_path):
    helper = """
    import torch.distributed as dist
    import torch.multiprocessing as mp
    def _worker(rank, main_func, world_size, args):
        dist.init_process_group("nccl", init_method="env://", world_size=world_size, rank=rank)
        main_func(*args)
    def launch(main_func, num_gpus, args=()):
        mp.start_processes(_worker, nprocs=num_gpus, args=(main_func, num_gpus, args), start_method="spawn")
    def init_distributed():
        dist.init_process_group("nccl")
    """
    launched = """
    from helpers import launch
    def main(cfg):
        pass
    launch(main, 8, args=({},))
    """
    _project(tmp_path, helper, launched)
    script = tmp_path / "project" / "train.py"
    assert "no-destroy-process-group" not in rules(launched, path=script, end="")
    # A setup helper the script calls itself: the script runs the training and must end the group.
    set_up = """
    from helpers import init_distributed
    def main(cfg):
        init_distributed()
    main({})
    """
    assert "no-destroy-process-group" in rules(set_up, path=script, end="")


def test_a_project_helper_that_makes_the_global_rank_the_gpu_index(tmp_path):
    helper = """
    import os
    import torch
    import torch.distributed as dist
    def setup(args):
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
    def setup_local(args):
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    """
    body = """
    from helpers import setup, setup_local
    setup(args)
    setup_local(args)
    """
    assert [line for r, line in _project(tmp_path, helper, body) if r == "global-rank-as-device"] == [10]


def test_what_a_trainer_class_does_on_every_rank_and_on_rank_zero():
    # The rank kept in a settings dict guards the interval saves; the save after training runs on
    # every rank through an object of the class; set_epoch through a dict of samplers counts.
    body = """
    class Trainer:
        def __init__(self, config, sampler):
            self.config, self.sampler = config, sampler
        def save_checkpoint(self, path):
            torch.save({"steps": 1}, path)
        def train_epoch(self, epoch):
            self.sampler["train"].set_epoch(epoch)
            if self.config["rank"] == 0:
                self.save_checkpoint("checkpoint-interval.pkl")

    dist.init_process_group("nccl")
    data = list(range(10))
    sampler = {"train": DistributedSampler(data, shuffle=True)}
    trainer = Trainer({"rank": dist.get_rank()}, sampler)
    for epoch in range(3):
        trainer.train_epoch(epoch)
    trainer.save_checkpoint("checkpoint-final.pkl")
    """
    got = found(body)
    assert [line for r, line in got if r == "save-on-every-rank"] == [25]
    assert "sampler-without-set-epoch" not in [r for r, _ in got]


def test_a_per_rank_file_name_held_in_a_variable():
    body = """
    dist.init_process_group("nccl")
    def save(optimizer, out):
        opt_state_fn = f"optimizer.{dist.get_rank():05d}-of-{dist.get_world_size():05d}.pth"
        torch.save(optimizer.state_dict(), os.path.join(out, opt_state_fn))
        name = "optimizer.pth"
        torch.save(optimizer.state_dict(), os.path.join(out, name))
    save(opt, "ckpt")
    """
    assert [line for r, line in found(body) if r == "save-on-every-rank"] == [15]  # at the call of the save helper


def test_a_project_helper_that_lets_rank_zero_download_first(tmp_path):
    helper = """
    import torch
    from torchvision import datasets
    def get_loader(args):
        if args.local_rank not in [-1, 0]:
            torch.distributed.barrier()
        train = datasets.CIFAR10("./data", train=True, download=True)
        if args.local_rank == 0:
            torch.distributed.barrier()
        return train
    def get_raw(args):
        return datasets.CIFAR10("./data", train=True, download=True)
    """
    body = """
    from helpers import get_loader, get_raw
    dist.init_process_group("nccl")
    loader = get_loader(args)
    raw = get_raw(args)
    """
    assert [line for r, line in _project(tmp_path, helper, body) if r == "download-on-every-rank"] == [12]


def test_a_helper_re_exported_by_a_package_and_its_subpackage(tmp_path):
    # `from mypkg import create_dataloader`, where mypkg/__init__.py takes it from its datasets
    # subpackage, which takes it from datasets/dataloader.py.
    project = tmp_path / "proj"
    files = {
        "mypkg/__init__.py": "from .datasets import create_dataloader\n",
        "mypkg/datasets/__init__.py": "from .dataloader import create_dataloader\n",
        "mypkg/datasets/dataloader.py": "import torchvision\n\ndef create_dataloader(root):\n"
                                        "    return torchvision.datasets.CIFAR10(root, download=True)\n",
    }
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    script = project / "train.py"
    body = """
    from mypkg import create_dataloader
    dist.init_process_group("nccl")
    loader = create_dataloader("data")
    """
    script.write_text(HEAD + textwrap.dedent(body))
    assert ("download-on-every-rank", 11) in found(body, path=script)


def test_a_project_helper_that_wraps_the_model_in_data_parallel(tmp_path):
    helper = """
    import torch
    def create_model(opt):
        model = build(opt)
        if len(opt.gpu_ids):
            model = torch.nn.DataParallel(model, device_ids=opt.gpu_ids)
        return model
    def create_plain(opt):
        return build(opt)
    """
    body = """
    from helpers import create_model, create_plain
    model = create_model(opt)
    plain = create_plain(opt)
    """
    assert [line for r, line in _project(tmp_path, helper, body) if r == "data-parallel"] == [10]


def test_torchvisions_weights_argument_fetches_pretrained_weights():
    body = """
    from torchvision import models
    from torchvision.models import ResNet50_Weights
    from torch.utils.data import WeightedRandomSampler
    dist.init_process_group("nccl")
    a = models.resnet50(weights=ResNet50_Weights.IMAGENET1K_V2)
    b = models.swin_v2_b(weights="DEFAULT")
    c = models.resnet18(weights=None)
    d = WeightedRandomSampler(weights=[0.1, 0.9], num_samples=10)
    """
    assert [r for r in found(body) if r[0] == "download-on-every-rank"] == [
        ("download-on-every-rank", 13), ("download-on-every-rank", 14)]


def test_a_fixed_address_is_reported_at_its_own_line_in_a_call_over_several():
    body = """
    dist.init_process_group(
        backend="nccl",
        init_method="tcp://127.0.0.1:33271",
        world_size=torch.cuda.device_count(),
    )
    """
    assert [r for r in found(body) if r[0] == "hard-coded-rendezvous"] == [("hard-coded-rendezvous", 11)]


def test_get_rank_of_a_group_numbered_by_local_rank_is_a_gpu_of_this_machine():
    body = """
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend="nccl", init_method="env://", rank=local_rank)
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    x = torch.zeros(1).cuda(rank)
    """
    assert "global-rank-as-device" not in rules(body)
    numbered_globally = body.replace("rank=local_rank)", "rank=int(os.environ['RANK']))")
    assert "global-rank-as-device" in rules(numbered_globally)


def test_a_rendezvous_option_whose_default_is_a_number():
    body = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--master_port", type=int, default=8964)
    parser.add_argument("--epochs", type=int, default=29500)
    parser.add_argument("--use_amp", default=True)
    args = parser.parse_args()
    os.environ["MASTER_PORT"] = str(args.master_port)
    dist.init_process_group("nccl")
    """
    assert [r for r in found(body) if r[0] == "hard-coded-rendezvous"] == [("hard-coded-rendezvous", 11)]


def test_a_hugging_face_trainer_script_runs_on_every_rank():
    script = """
import transformers
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

def train():
    parser = HfArgumentParser((TrainingArguments,))
    (training_args,) = parser.parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-1.4b-deduped")
    Trainer(model=model, args=training_args).train()

if __name__ == "__main__":
    train()
"""
    lint = lambda text: [(f.id, f.line) for f in lint_source(text, "<script>", select=set(RULES))]  # noqa: E731
    assert lint(script) == [("download-on-every-rank", 8)]
    # a notebook-style Trainer run with its arguments written in the script: nothing says it is launched N times
    assert lint(script.replace("HfArgumentParser, ", "").replace(
        "parser = HfArgumentParser((TrainingArguments,))\n    (training_args,) = parser.parse_args_into_dataclasses()",
        "training_args = TrainingArguments('out')")) == []


def test_the_parent_of_spawned_workers_runs_once_even_when_they_use_env_rendezvous():
    body = """
    import torch.multiprocessing as mp

    def run(rank, n):
        os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "localhost")
        dist.init_process_group("nccl", init_method="env://", world_size=n, rank=rank)
        torch.cuda.set_device(rank)
        dist.destroy_process_group()

    def main():
        torch.save({"config": 1}, "logs/config.pt")
        mp.spawn(run, args=(2,), nprocs=2)

    if __name__ == "__main__":
        main()
    """
    assert "save-on-every-rank" not in rules(body, end="")


def test_a_check_of_the_machine_that_raises_is_no_rank_guard():
    body = """
    local_rank = int(os.environ["LOCAL_RANK"])
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError("more processes than GPUs")
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    dist.destroy_process_group()
    """
    assert "no-destroy-process-group" not in rules(body, end="")
    # `if rank != 0: raise SystemExit` still leaves every rank but one out of what follows
    one_rank = body.replace("local_rank >= torch.cuda.device_count()", "dist.get_rank() != 0").replace(
        'raise RuntimeError("more processes than GPUs")', "raise SystemExit(0)")
    assert "no-destroy-process-group" in rules(one_rank, end="")


def test_a_rank_flag_handed_to_a_function_guards_what_the_function_does_under_it():
    # a graph-network simulator's shape: `verbose = dist.get_rank() == 0` in main, passed to train(),
    # which saves under `if verbose:`: one rank saves.
    body = """
    def train(rank, flags, world_size, verbose):
        for step in range(10):
            if verbose:
                torch.save({"step": step}, "train_state.pt")

    def main():
        dist.init_process_group("nccl")
        verbose = dist.get_rank() == 0
        train(0, {}, 2, verbose)
        train(0, {}, 2, verbose=dist.get_rank() == 0)

    main()
    """
    assert "save-on-every-rank" not in rules(body)
    # a call that passes something else (here the rank itself: true on every rank but 0) leaves it unguarded
    assert "save-on-every-rank" in rules(body.replace("train(0, {}, 2, verbose)", "train(0, {}, 2, dist.get_rank())"))
    # and so does a flag true everywhere
    assert "save-on-every-rank" in rules(body.replace("train(0, {}, 2, verbose)", "train(0, {}, 2, True)"))


def test_a_model_loaded_with_local_files_only_is_read_from_this_machine_with_its_tokenizer():
    # An LLM fine-tuning script's shape: the model is loaded with local_files_only=True (the Hub is
    # never asked), so its name is a folder of this machine, and the config and tokenizer read from
    # the same name read that folder too.
    body = """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    dist.init_process_group("nccl")
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path if resume is None else resume, local_files_only=True, config=config)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, use_fast=False)
    """
    assert "download-on-every-rank" not in rules(body)
    # without it, each of the three asks the Hub in every rank: the config and the tokenizer of the
    # one name are one mistake, the model (of a name that may be another) a second
    online = found(body.replace(", local_files_only=True", ""))
    assert [r for r, _ in online].count("download-on-every-rank") == 2


def test_a_sampler_a_function_of_the_script_builds_is_named_where_it_is_built(tmp_path):
    # A GAN training script's shape: data_sampler(dataset, shuffle, distributed) builds the
    # DistributedSampler; the loader asks it to shuffle and loops for iterations without set_epoch.
    # The finding is at the call that asks for shuffling and names the line that builds the sampler.
    body = """
    def data_sampler(dataset, shuffle, distributed):
        if distributed:
            return DistributedSampler(dataset, shuffle=shuffle)
        return None
    dist.init_process_group("nccl")
    loader = DataLoader(dataset, sampler=data_sampler(dataset, shuffle=True, distributed=True))
    for epoch in range(100):
        for batch in loader:
            pass
    """
    path = tmp_path / "train.py"
    source = HEAD + textwrap.dedent(body) + "\ndist.destroy_process_group()\n"
    path.write_text(source)
    [finding] = [f for f in lint_source(source, str(path), path=str(path), select=set(RULES)) if f.id == "sampler-without-set-epoch"]
    built = len(HEAD.splitlines()) + 4
    assert finding.line == len(HEAD.splitlines()) + 7
    assert f"train.py:{built}" in finding.related and f"train.py:{built}" in finding.title


def test_a_host_and_port_option_default_is_a_fixed_rendezvous():
    # A SimCLR reimplementation's shape: --dist_address defaults to '127.0.0.1:1234' and the script
    # starts the group on 'tcp://%s' % args.dist_address.
    body = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument('--dist_address', default='127.0.0.1:1234', type=str)
    args = parser.parse_args()
    dist.init_process_group('nccl', init_method='tcp://%s' % args.dist_address, rank=0, world_size=2)
    """
    assert ("hard-coded-rendezvous", len(HEAD.splitlines()) + 4) in found(body)
    # an address alone is no port: nothing collides on it
    assert "hard-coded-rendezvous" not in rules(body.replace("'127.0.0.1:1234'", "'127.0.0.1'").replace(
        "'tcp://%s' % args.dist_address", "'tcp://%s:%s' % (args.dist_address, os.environ['PORT'])"))
