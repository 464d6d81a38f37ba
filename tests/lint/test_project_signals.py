"""What the script's own project says about ranks, ports and processes, as `gpurig lint` reads it:
a flag or a function of the project computed from the rank guards the script's lines, a helper
that lets rank 0 fetch first under another kind of wait, a switch that defaults a branch off, a
setup helper that hands back the global rank or fixes the port through its own parser. Each test is
a small project written for it, in the shape of a pattern met in public training repositories."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import RULES, lint_file

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
"""


def _lint(project, script: str, rule: str | None = None) -> list[tuple[str, int]]:
    path = project / "train.py"
    path.write_text(HEAD + textwrap.dedent(script))
    return [(f.id, f.line) for f in lint_file(str(path), select=set(RULES)) if rule is None or f.id == rule]


def _write(project, rel: str, text: str) -> None:
    target = project / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))


def test_a_flag_the_project_sets_from_the_rank_guards_the_scripts_saves(tmp_path):
    # HybrIK: init_dist sets opt.log = True on the first rank of each node, False elsewhere
    _write(tmp_path, "env.py", """
        import torch.distributed as dist
        def init_dist(opt):
            dist.init_process_group("nccl", init_method="env://")
            if opt.rank % opt.ngpus_per_node == 0:
                opt.log = True
            else:
                opt.log = False
        """)
    script = """
    from env import init_dist
    def main(opt, model):
        init_dist(opt)
        torch.cuda.set_device(opt.gpu)
        if opt.log:
            torch.save(model.state_dict(), "best.pth")
        torch.save(model.state_dict(), "final.pth")
        dist.destroy_process_group()
    main(parse_options(), build_model())
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 12)]


def test_a_flag_true_on_every_rank_of_a_run_guards_nothing(tmp_path):
    # `self.enabled = int(os.environ.get("RANK", -1)) != -1`: "is this a torchrun run", not a pick
    _write(tmp_path, "env.py", """
        import os
        import torch.distributed as dist
        class Env:
            def __init__(self):
                self.enabled = int(os.environ.get("RANK", -1)) != -1
                if self.enabled:
                    dist.init_process_group("nccl")
        """)
    script = """
    from env import Env
    env = Env()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if env.enabled:
        torch.save({}, "ckpt.pt")
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 10)]


def test_a_flag_the_projects_base_class_turns_off_on_other_ranks_guards_the_saves(tmp_path):
    # VL-T5's TrainerBase: `self.verbose = True`, then in `if distributed:` `if gpu != 0: self.verbose = False`
    _write(tmp_path, "trainer_base.py", """
        class TrainerBase:
            def __init__(self, args):
                self.args = args
                self.verbose = True
                if self.args.distributed:
                    if self.args.gpu != 0:
                        self.verbose = False
                    self.quiet = True  # (every rank of a run: no rank check)
        """)
    script = """
    from trainer_base import TrainerBase
    class Trainer(TrainerBase):
        def train(self, model):
            if self.verbose:
                torch.save(model.state_dict(), "best.pth")
            if self.quiet:
                torch.save(model.state_dict(), "last.pth")
    def main_worker(gpu, args):
        args.gpu = gpu
        torch.cuda.set_device(gpu)
        dist.init_process_group("nccl", init_method="env://", rank=gpu, world_size=2)
        Trainer(args).train(build_model())
        dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 12)]
    # a script whose own --verbose option the test reads: the same on every rank, not the project's flag
    script = """
    import argparse
    from trainer_base import TrainerBase
    parser = argparse.ArgumentParser()
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if args.verbose:
        torch.save(build_model().state_dict(), "model.pt")
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 14)]


FIRST_WORKER = """
def is_first_worker():
    return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0
"""


@pytest.mark.parametrize("defined_in", ["the project", "the script"])
def test_a_function_of_the_project_that_returns_a_rank_check_is_one(tmp_path, defined_in):
    # ANCE: `if is_first_worker(): model.save_pretrained(...)`, the function in its utils or in the script
    if defined_in == "the project":
        _write(tmp_path, "util.py", "import torch.distributed as dist\n" + FIRST_WORKER)
    head = "from util import is_first_worker\n" if defined_in == "the project" else FIRST_WORKER
    script = head + textwrap.dedent("""
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if is_first_worker():
        torch.save({}, "ckpt.pt")
    dist.destroy_process_group()
    """)
    assert _lint(tmp_path, script, "save-on-every-rank") == []


def test_a_helper_that_lets_rank_0_fetch_then_waits_in_a_collective_goes_first(tmp_path):
    # AnyCost GAN: rank 0 downloads, hvd.broadcast holds the others, then every rank reads the cache
    _write(tmp_path, "torch_utils.py", """
        import torch
        import horovod.torch as hvd
        def safe_load_state_dict_from_url(url):
            if hvd.size() == 1:
                return torch.hub.load_state_dict_from_url(url)
            else:
                if hvd.rank() == 0:
                    torch.hub.load_state_dict_from_url(url)
                hvd.broadcast(torch.tensor(0), root_rank=0, name="dummy")
                return torch.hub.load_state_dict_from_url(url)
        def plain_load(url):
            return torch.hub.load_state_dict_from_url(url)
        """)
    script = """
    from torch_utils import safe_load_state_dict_from_url, plain_load
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = safe_load_state_dict_from_url("https://example.org/inception.pth")
    b = plain_load("https://example.org/vgg.pth")
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 10)]


def test_a_switch_that_defaults_true_keeps_the_other_branch_off(tmp_path):
    # pytorch-fid's InceptionV3(use_fid_inception=True): the torchvision download is the else branch
    _write(tmp_path, "inception.py", """
        import torch
        from torchvision import models
        def fid_inception_v3():
            return torch.load("weights/pt_inception.pth", map_location="cpu")
        class InceptionV3(torch.nn.Module):
            def __init__(self, use_fid_inception=True):
                super().__init__()
                if use_fid_inception:
                    self.net = fid_inception_v3()
                else:
                    self.net = models.inception_v3(pretrained=True)
        class Backbone(torch.nn.Module):
            def __init__(self, pretrained=False):
                super().__init__()
                self.net = models.resnet50()
                if pretrained:
                    self.net = models.resnet50(pretrained=True)
        """)
    script = """
    from inception import InceptionV3, Backbone
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inception = InceptionV3()
    backbone = Backbone(pretrained=True)
    dist.destroy_process_group()
    """
    # (a switch defaulting False is what callers turn on: Backbone(pretrained=True) still downloads)
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 10)]


@pytest.mark.parametrize("given, found", [("pretrained=False", []), ("", []), ("pretrained=True", [9]), ("True", [9])])
def test_a_pretrained_switch_handed_on_to_the_library_downloads_only_where_a_caller_turns_it_on(tmp_path, given, found):
    # SimCLR's get_resnet(name, pretrained=False) builds torchvision's resnet18(pretrained=pretrained):
    # a caller that leaves it off fetches nothing; one that turns it on fetches in every rank
    _write(tmp_path, "resnet.py", """
        import torchvision
        def get_resnet(name, pretrained=False):
            resnets = {"resnet18": torchvision.models.resnet18(pretrained=pretrained)}
            return resnets[name]
        """)
    script = f"""
    from resnet import get_resnet
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    encoder = get_resnet("resnet18"{", " if given else ""}{given})
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", n) for n in found]


def test_accelerate_save_state_hooks_run_where_save_state_runs(tmp_path):
    # ddpo-pytorch: register_save_state_pre_hook(save_model_hook); save_state only on the main process
    script = """
    from accelerate import Accelerator
    accelerator = Accelerator()
    def save_model_hook(models, weights, output_dir):
        models[0].save_pretrained(os.path.join(output_dir, "unet"))
        weights.pop()
    accelerator.register_save_state_pre_hook(save_model_hook)
    for epoch in range(10):
        if accelerator.is_main_process:
            accelerator.save_state()
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == []
    script = script.replace("        if accelerator.is_main_process:\n            accelerator.save_state()", "        accelerator.save_state()")
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 9)]


def test_a_part_of_a_pipeline_fetched_before_is_read_from_the_cache(tmp_path):
    script = """
    from accelerate import Accelerator
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel
    accelerator = Accelerator()
    pipeline = StableDiffusionPipeline.from_pretrained(MODEL)
    unet = UNet2DConditionModel.from_pretrained(MODEL, subfolder="unet")
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 9)]
    # a pipeline fetched on one branch only (an option's path) leaves the later parts to fetch
    script = """
    from accelerate import Accelerator
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel
    accelerator = Accelerator()
    if args.with_prior_preservation:
        pipeline = StableDiffusionPipeline.from_pretrained(MODEL)
    unet = UNet2DConditionModel.from_pretrained(MODEL, subfolder="unet")
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 10), ("download-on-every-rank", 11)]


def test_a_script_sharding_with_fully_shard_runs_on_every_rank(tmp_path):
    # FSDP2 starts the process group itself (torchrun, no init_process_group in the script)
    script = """
    from torch.distributed.fsdp import fully_shard
    def main(model):
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        train(model)
        torch.save(model.state_dict(), "checkpoints/final.pt")
    main(build_model())
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 12)]


def test_a_helper_setting_master_port_from_the_projects_parser_default(tmp_path):
    # VDVAE: hps.py gives --port default 29500; setup_mpi writes it into MASTER_PORT for every run
    _write(tmp_path, "hps.py", """
        def add_arguments(parser):
            parser.add_argument("--port", type=int, default=29500)
            parser.add_argument("--lr", type=float, default=1e-4)
            return parser
        """)
    _write(tmp_path, "train_helpers.py", """
        import argparse, os
        import torch.distributed as dist
        from hps import add_arguments
        def setup_mpi(H):
            os.environ["MASTER_PORT"] = str(H.port)
            dist.init_process_group(backend="nccl", init_method="env://")
        def set_up_hyperparams():
            H = add_arguments(argparse.ArgumentParser()).parse_args()
            setup_mpi(H)
            return H
        """)
    script = """
    from train_helpers import set_up_hyperparams
    H = set_up_hyperparams()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "hard-coded-rendezvous") == [("hard-coded-rendezvous", 7)]


def test_a_tcp_address_built_from_the_projects_port_option(tmp_path):
    # AOT-GAN: utils/option.py gives --port default 22334; the script builds f"tcp://127.0.0.1:{args.port}"
    _write(tmp_path, "utils/option.py", """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--port", type=int, default=22334)
        parser.add_argument("--seed", type=int, default=2021)
        args = parser.parse_args()
        """)
    script = """
    import torch.multiprocessing as mp
    from utils.option import args
    def main_worker(gpu, ngpus, args):
        torch.cuda.set_device(gpu)
        dist.init_process_group("nccl", init_method=args.init_method, world_size=ngpus, rank=gpu)
        dist.destroy_process_group()
    args.init_method = f"tcp://127.0.0.1:{args.port}"
    args.free = f"tcp://127.0.0.1:{args.seed}"
    mp.spawn(main_worker, nprocs=2, args=(2, args))
    """
    assert _lint(tmp_path, script, "hard-coded-rendezvous") == [("hard-coded-rendezvous", 12)]
    # the port set again to a free one before the workers start: not fixed
    free = script.replace("    mp.spawn(", "    args.port = find_free_port()\n    mp.spawn(")
    assert _lint(tmp_path, free, "hard-coded-rendezvous") == []
    # the script's own --port (no default) and an unrelated port in a shipped config: not fixed
    _write(tmp_path, "utils/option.py", "import argparse\n")
    _write(tmp_path, "config.json", '{"visdom": {"server": "http://localhost", "port": 8097}}')
    own = script.replace("from utils.option import args", "import argparse\n    parser = argparse.ArgumentParser()\n"
                         "    parser.add_argument('--port', type=int, default=None)\n    args = parser.parse_args()")
    assert _lint(tmp_path, own, "hard-coded-rendezvous") == []


def test_the_global_rank_a_setup_helper_hands_back_as_a_device(tmp_path):
    # EfficientMoE: `rank, device, seed = setup_ddp0(config)` with rank = dist.get_rank()
    _write(tmp_path, "utils.py", """
        import torch
        import torch.distributed as dist
        def setup_ddp0(args):
            dist.init_process_group("nccl")
            rank = dist.get_rank()
            device = rank % torch.cuda.device_count()
            seed = args.seed * dist.get_world_size() + rank
            return rank, device, seed
        """)
    script = """
    from utils import setup_ddp0
    def main(config, model):
        rank, device, seed = setup_ddp0(config)
        torch.cuda.set_device(device)
        model = DDP(model.to(device), device_ids=[rank])
        dist.destroy_process_group()
    main(parse_config(), build_model())
    """
    assert _lint(tmp_path, script, "global-rank-as-device") == [("global-rank-as-device", 10)]


def test_data_parallel_of_another_library_is_not_torchs(tmp_path):
    # pipegoose / Paddle: `DataParallel` is data parallelism over one process per GPU
    script = """
    from paddle import DataParallel
    import paddle.distributed as pd
    model = DataParallel(model)
    model = pd.DataParallel(model)
    """
    assert _lint(tmp_path, script, "data-parallel") == []
    script = """
    from torch.nn import DataParallel
    from torch import nn
    model = DataParallel(model)
    model = nn.DataParallel(model)
    """
    assert _lint(tmp_path, script, "data-parallel") == [("data-parallel", 8), ("data-parallel", 9)]


def test_a_helper_copying_a_file_into_the_folder_it_is_given(tmp_path):
    # speech-resynthesis: build_env copies the config into the checkpoint folder, in every rank
    _write(tmp_path, "utils.py", """
        import os, shutil
        def build_env(config, config_name, path):
            os.makedirs(path, exist_ok=True)
            shutil.copyfile(config, os.path.join(path, config_name))
        """)
    script = """
    from utils import build_env
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    build_env(args.config, "config.json", args.checkpoint_path)
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "save-on-every-rank") == [("save-on-every-rank", 9)]


def test_workers_started_with_spawn_fn_keyword(tmp_path):
    # PVDM: torch.multiprocessing.spawn(fn=first_stage, ...); the worker builds a loss that downloads
    _write(tmp_path, "exps.py", """
        import torch
        import torch.distributed as dist
        from torchvision import models
        def first_stage(rank, args):
            dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=args.n_gpus)
            torch.cuda.set_device(rank)
            vgg = models.vgg16(pretrained=True)
            dist.destroy_process_group()
        """)
    script = """
    from exps import first_stage
    if __name__ == "__main__":
        torch.multiprocessing.spawn(fn=first_stage, args=(args,), nprocs=args.n_gpus)
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 8)]


def test_a_scheduler_config_fetched_with_from_config_and_a_subfolder(tmp_path):
    script = """
    from accelerate import Accelerator
    from diffusers import DDPMScheduler
    accelerator = Accelerator()
    scheduler = DDPMScheduler.from_config(args.pretrained_model_name_or_path, subfolder="scheduler")
    other = DDPMScheduler.from_config(scheduler.config)
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 9)]


def test_pretrained_given_a_file_of_this_machine_is_no_download(tmp_path):
    # MNCDV3: ViTAdapter(..., pretrained="/bigdata/.../deit_base_patch16_224.pth") reads a local file
    _write(tmp_path, "model.py", """
        import torch
        from adapter import ViTAdapter
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = ViTAdapter(embed_dim=768, pretrained="/data/weights/deit_base_patch16_224.pth")
        class Hub(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = ViTAdapter(embed_dim=768, pretrained=True)
        """)
    script = """
    import timm
    from model import Model, Hub
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = Model()
    net = timm.create_model("deit_base_patch16_224", pretrained="./weights/deit.pth")
    hub = Hub()
    dist.destroy_process_group()
    """
    assert _lint(tmp_path, script, "download-on-every-rank") == [("download-on-every-rank", 12)]


def test_a_script_importing_itself_is_said_once(tmp_path):
    # R3M's hydra main: `from train_representation import Workspace as W` inside the script itself
    path = tmp_path / "train_representation.py"
    path.write_text(textwrap.dedent("""
        import torch
        def make_network(model):
            return torch.nn.DataParallel(model)
        class Workspace:
            def __init__(self, cfg):
                self.model = make_network(cfg.model)
        def main(cfg):
            from train_representation import Workspace as W
            workspace = W(cfg)
        if __name__ == "__main__":
            main(load_config())
        """))
    assert [(f.id, f.line) for f in lint_file(str(path), select=set(RULES))] == [("data-parallel", 4)]
