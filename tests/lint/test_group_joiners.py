"""`gpurig lint` on a script that starts no process group itself: its project's functions do, or
start workers that do (OpenNMT-style `train_ext()` -> `mp.Process(target=run)` -> `multi_init()`).
What those calls reach runs in every rank; what the script does in its other, single-process modes
does not."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import RULES, lint_file


def _write(project, rel: str, text: str) -> None:
    target = project / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))


def _project(tmp_path) -> None:
    _write(tmp_path, "distributed.py", """
        import os
        import torch.distributed as dist
        def multi_init(device_id, world_size):
            dist.init_process_group("nccl", init_method="env://", world_size=world_size, rank=device_id)
            return dist.get_rank()
        """)
    _write(tmp_path, "models/__init__.py", "")
    _write(tmp_path, "models/model_builder.py", """
        import torch
        from transformers import BertModel
        class Bert(torch.nn.Module):
            def __init__(self, temp_dir):
                super().__init__()
                self.model = BertModel.from_pretrained("bert-base-uncased", cache_dir=temp_dir)
        class Summarizer(torch.nn.Module):
            def __init__(self, args):
                super().__init__()
                self.bert = Bert(args.temp_dir)
        """)
    _write(tmp_path, "train_extractive.py", """
        import torch
        import distributed
        from models.model_builder import Summarizer
        def train_multi(args):
            mp = torch.multiprocessing.get_context("spawn")
            procs = [mp.Process(target=run, args=(args, i), daemon=True) for i in range(args.world_size)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        def run(args, device_id):
            distributed.multi_init(device_id, args.world_size)
            train_single(args, device_id)
        def train_single(args, device_id):
            model = Summarizer(args).to(device_id)
            torch.distributed.destroy_process_group()
        def train(args, device_id):
            if args.world_size > 1:
                train_multi(args)
            else:
                train_single(args, device_id)
        def test(args, device_id):
            model = Summarizer(args).to(device_id)
        """)


SCRIPT = """\
import argparse
from train_extractive import test, train
parser = argparse.ArgumentParser()
parser.add_argument("-mode", default="train")
args = parser.parse_args()
if args.mode == "train":
    train(args, 0)
else:
    test(args, 0)
"""


def test_a_download_reached_through_the_workers_a_project_function_starts(tmp_path):
    _project(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    found = [(f.id, f.line, f.related) for f in lint_file(str(tmp_path / "train.py"), select=set(RULES))]
    downloads = [(line, related) for rule, line, related in found if rule == "download-on-every-rank"]
    # at the call of train() (line 7), naming the fetch in the project's module; not at test()
    # (line 9), which runs in one process and joins no group
    assert [line for line, _ in downloads] == [7]
    assert any(r.endswith("model_builder.py:7") for r in downloads[0][1])


def test_a_single_process_project_is_not_told_it_downloads_on_every_rank(tmp_path):
    _project(tmp_path)
    # the same project with no process group anywhere: one process, nothing to race
    text = (tmp_path / "distributed.py").read_text().replace('dist.init_process_group("nccl", init_method="env://", '
                                                              'world_size=world_size, rank=device_id)', "pass")
    (tmp_path / "distributed.py").write_text(text)
    (tmp_path / "train.py").write_text(SCRIPT)
    assert not [f for f in lint_file(str(tmp_path / "train.py"), select=set(RULES)) if f.id == "download-on-every-rank"]


def test_a_trainer_script_whose_trainer_is_built_in_its_project(tmp_path):
    # Vigogne's shape: cli/train.py reads TrainingArguments with HfArgumentParser; train() in the
    # package loads the tokenizer and builds the Trainer in setup_trainer(): all of it runs in
    # every process torchrun starts
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/trainer.py", """
        from transformers import Seq2SeqTrainer, Trainer
        def setup_trainer(cfg, model):
            trainer_cls = Trainer if cfg.decoder else Seq2SeqTrainer
            return trainer_cls(model=model, args=cfg)
        """)
    _write(tmp_path, "pkg/train.py", """
        from transformers import AutoTokenizer
        from pkg.trainer import setup_trainer
        def train(cfg):
            tokenizer = AutoTokenizer.from_pretrained(cfg.model_name_or_path)
            setup_trainer(cfg, None).train()
        """)
    (tmp_path / "run.py").write_text("from transformers import HfArgumentParser, TrainingArguments\n"
                                     "from pkg.train import train\n"
                                     "(cfg,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()\n"
                                     "train(cfg)\n")
    found = [(f.id, f.line) for f in lint_file(str(tmp_path / "run.py"), select=set(RULES))]
    assert ("download-on-every-rank", 4) in found


def test_an_accelerate_project_whose_download_waits_for_a_main_process_flag(tmp_path):
    # denoising-diffusion-pytorch's shape: the Trainer builds the FID scorer (which downloads its
    # Inception weights) only where `self.calculate_fid = calculate_fid and is_main_process`
    _write(tmp_path, "ddpm.py", """
        from accelerate import Accelerator
        from pytorch_fid.inception import InceptionV3
        class Trainer:
            def __init__(self, calculate_fid=True):
                self.accelerator = Accelerator()
                self.calculate_fid = calculate_fid and self.accelerator.is_main_process
                if self.calculate_fid:
                    self.inception = InceptionV3([3])
        """)
    (tmp_path / "train.py").write_text("from ddpm import Trainer\ntrainer = Trainer()\n")
    found = [(f.id, f.line) for f in lint_file(str(tmp_path / "train.py"), select=set(RULES))]
    assert ("download-on-every-rank", 2) not in found
    # without the flag, every process of the Accelerate run builds it
    text = (tmp_path / "ddpm.py").read_text().replace("calculate_fid and self.accelerator.is_main_process", "calculate_fid")
    (tmp_path / "ddpm.py").write_text(text)
    found = [(f.id, f.line) for f in lint_file(str(tmp_path / "train.py"), select=set(RULES))]
    assert ("download-on-every-rank", 2) in found


def test_a_script_that_joins_the_group_through_a_setup_helper_runs_on_every_rank(tmp_path):
    # HydraGNN's / guided-diffusion's shape: `setup_ddp()` of the project calls init_process_group from
    # the launcher's environment; the script that calls it is one of the ranks, and what it then
    # builds (a dataset that downloads) runs in every rank at once.
    _write(tmp_path, "dist_utils.py", """
        import os
        import torch.distributed as dist
        def setup_ddp():
            dist.init_process_group("nccl")
            return dist.get_world_size(), dist.get_rank()
        """)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import dist_utils
        from torchvision.datasets import CIFAR10
        world_size, rank = dist_utils.setup_ddp()
        data = CIFAR10("data", download=True)
        """))
    assert [(f.id, f.line) for f in lint_file(str(script)) if f.id == "download-on-every-rank"] == [("download-on-every-rank", 5)]
    # A helper that only reads the environment starts no group: the script stays a single process.
    _write(tmp_path, "dist_utils.py", """
        import os
        def setup_ddp():
            return int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
        """)
    assert [f.id for f in lint_file(str(script)) if f.id == "download-on-every-rank"] == []


def test_a_script_whose_own_class_is_built_on_the_projects_engine_is_a_rank(tmp_path):
    # Betty's examples: `class ReweightingEngine(Engine)` in the script, where the project's Engine
    # starts the group as it is built; the data the script builds first (CIFAR10 with download=True)
    # is fetched in every rank that torchrun started. A class built on something else is no rank.
    _write(tmp_path, "engine.py", """
        import torch.distributed as dist
        class Engine:
            def __init__(self, problems, strategy="distributed"):
                self.problems = problems
                self.initialize()
            def initialize(self):
                dist.init_process_group(backend="nccl")
            def run(self):
                dist.destroy_process_group()
        class Recorder:
            def __init__(self, problems):
                self.problems = problems
        """)
    script = tmp_path / "main.py"
    body = """
        from torchvision.datasets import CIFAR10
        from engine import {base}
        data = CIFAR10("data", download=True)
        class ReweightingEngine({base}):
            def train_step(self):
                pass
        engine = ReweightingEngine(problems=[data])
        """
    script.write_text(textwrap.dedent(body.format(base="Engine")))
    assert [(f.id, f.line) for f in lint_file(str(script)) if f.id == "download-on-every-rank"] == [("download-on-every-rank", 4)]
    script.write_text(textwrap.dedent(body.format(base="Recorder")))
    assert [f.id for f in lint_file(str(script)) if f.id == "download-on-every-rank"] == []
