"""`gpurig lint` on the files a project writes from every rank: the path a helper builds in its own
variables, a helper imported under another name, rank checks that come after the write, names unique
to each process, and the branches of an option the script refuses in distributed runs. Each test is
a small project in the shape of a pattern met in real repositories (I-JEPA's params file, DINOv2's
config, icefall's batch dumps, YOLOv5's --evolve)."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import RULES, lint_file

SPAWN = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
{imports}

def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    {call}
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
"""


def _project(tmp_path, module: str, imports: str, call: str) -> list:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "__init__.py").write_text("")
    (tmp_path / "src" / "train.py").write_text(textwrap.dedent(module))
    script = tmp_path / "main.py"
    script.write_text(SPAWN.format(imports=imports, call=call))
    return [f for f in lint_file(str(script), select=set(RULES)) if f.id == "save-on-every-rank"]


def test_a_helper_writing_a_file_it_names_in_its_own_variables_is_found(tmp_path):
    found = _project(tmp_path, """
        import os
        import yaml
        def main(args):
            folder = args["logging"]["folder"]
            dump = os.path.join(folder, "params-ijepa.yaml")
            with open(dump, "w") as f:
                yaml.dump(args, f)
        """, "from src.train import main", 'main({"logging": {"folder": "."}})')
    assert [f.line for f in found] == [9]
    assert "params-ijepa.yaml" in found[0].title and "src/train.py:7" in found[0].title


def test_a_file_name_from_a_parameter_default_is_found(tmp_path):
    found = _project(tmp_path, """
        import os
        def write_config(cfg, output_dir, name="config.yaml"):
            saved_cfg_path = os.path.join(output_dir, name)
            with open(saved_cfg_path, "w") as f:
                f.write(str(cfg))
        """, "from src.train import write_config", 'write_config({}, "out")')
    assert [f.line for f in found] == [9] and "config.yaml" in found[0].title


def test_a_helper_imported_under_another_name_is_judged_by_its_body(tmp_path):
    found = _project(tmp_path, """
        import torch
        def main(state, path):
            torch.save(state, path)
        """, "from src.train import main as app_main", 'app_main({}, "ckpt.pt")')
    assert [f.line for f in found] == [9] and found[0].title.startswith("app_main()")


def test_a_rank_check_after_the_write_does_not_guard_it_but_one_before_does(tmp_path):
    after = _project(tmp_path, """
        import logging
        def main(args, rank):
            with open("params.yaml", "w") as f:
                f.write(str(args))
            if rank > 0:
                logging.getLogger().setLevel(logging.ERROR)
        """, "from src.train import main", "main({}, rank)")
    assert [f.line for f in after] == [9]


def test_a_write_after_an_early_return_of_the_other_ranks_is_not_a_finding(tmp_path):
    assert _project(tmp_path, """
        def main(args, rank):
            if rank != 0:
                return
            with open("params.yaml", "w") as f:
                f.write(str(args))
        """, "from src.train import main", "main({}, rank)") == []


def test_a_rank_check_that_only_wraps_a_block_guards_that_block_alone(tmp_path):
    # ECG pretraining's trainer: `if self.device == 0:` around some prints, then, after the epoch loop,
    # torch.save of the final model on every rank (an early return would have guarded it, as above).
    found = _project(tmp_path, """
        import torch
        def main(model, rank):
            if rank == 0:
                print("create the checkpoint folder")
            for epoch in range(2):
                pass
            torch.save(model.state_dict(), "final_total.pth")
        """, "from src.train import main", "main(torch.nn.Linear(2, 2), rank)")
    assert [f.line for f in found] == [9]


def test_a_function_defined_inside_a_helper_runs_where_it_is_called(tmp_path):
    # YOLOv6's calibrate(): the nested save is called only under `if self.main_process:`
    assert _project(tmp_path, """
        import torch
        def calibrate(model, main_process):
            def save_calib_model(m):
                torch.save(m.state_dict(), "calib.pt")
            if main_process:
                save_calib_model(model)
        """, "from src.train import calibrate", "calibrate(torch.nn.Linear(2, 2), rank == 0)") == []


def test_file_names_unique_to_each_process_are_not_one_file(tmp_path):
    assert _project(tmp_path, """
        import os
        import uuid
        import torch
        def dump_batch(batch, exp_dir):
            filename = f"{exp_dir}/batch-{uuid.uuid4()}.pt"
            torch.save(batch, filename)
            torch.save(batch, f"{exp_dir}/pid-{os.getpid()}.pt")
        """, "from src.train import dump_batch", 'dump_batch({}, "exp")') == []


def test_a_device_index_compared_with_zero_is_a_rank_check(tmp_path):
    # self.device = LOCAL_RANK; `if self.device == 0:` writes on the first GPU's process only
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist

        class Exp:
            def __init__(self):
                self.device = int(os.environ["LOCAL_RANK"])
                torch.cuda.set_device(self.device)
                dist.init_process_group("nccl")
            def train(self, model):
                if self.device == 0:
                    torch.save(model.state_dict(), "checkpoint.pth")
                torch.save(model.state_dict(), "every.pth")
                dist.destroy_process_group()

        Exp().train(torch.nn.Linear(2, 2))
        """))
    found = [f.line for f in lint_file(str(script), select=set(RULES)) if f.id == "save-on-every-rank"]
    assert found == [14]


def test_the_branch_of_an_option_refused_in_distributed_runs_is_one_process(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import os
        import argparse
        import torch
        import torch.distributed as dist
        LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))

        def main(opt):
            if LOCAL_RANK != -1:
                assert not opt.evolve, "--evolve is not compatible with DDP training"
                torch.cuda.set_device(LOCAL_RANK)
                dist.init_process_group("nccl")
            torch.save({}, "last.pt")
            if opt.evolve:
                torch.save({}, "evolve_population.pt")
            if LOCAL_RANK != -1:
                dist.destroy_process_group()

        if __name__ == "__main__":
            p = argparse.ArgumentParser()
            p.add_argument("--evolve", type=int)
            main(p.parse_args())
        """))
    found = [f.line for f in lint_file(str(script), select=set(RULES)) if f.id == "save-on-every-rank"]
    assert found == [13]  # the training branch's save, not the evolution's table


def test_from_pretrained_of_an_option_whose_default_is_an_absolute_path_reads_files(tmp_path):
    def lint(default: str) -> list[int]:
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(f"""
            import argparse
            import os
            import torch
            import torch.distributed as dist
            from transformers import T5ForConditionalGeneration

            def main(args):
                rank = int(os.environ["LOCAL_RANK"])
                torch.cuda.set_device(rank)
                dist.init_process_group("nccl")
                model = T5ForConditionalGeneration.from_pretrained(args.model_name)
                dist.destroy_process_group()

            if __name__ == "__main__":
                parser = argparse.ArgumentParser()
                parser.add_argument("--model_name", type=str, default="{default}")
                main(parser.parse_args())
            """))
        return [f.line for f in lint_file(str(script), select=set(RULES)) if f.id == "download-on-every-rank"]

    assert lint("/root/data/pretrained/t5") == []
    assert lint("t5-base") == [12]


def test_torchvision_weights_held_in_a_name_are_fetched_by_every_rank(tmp_path):
    # a tutorial's model class: `weights = ResNet50_Weights.IMAGENET1K_V2` then `resnet50(weights=weights)`
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "__init__.py").write_text("")
    (tmp_path / "src" / "train.py").write_text(textwrap.dedent("""
        import torch.nn as nn
        from torchvision.models import resnet50, ResNet50_Weights
        class ResNet50(nn.Module):
            def __init__(self, num_classes=10):
                super().__init__()
                weights = ResNet50_Weights.IMAGENET1K_V2
                self.model = resnet50(weights=weights, progress=False)
        """))
    script = tmp_path / "main.py"
    script.write_text(SPAWN.format(imports="from src.train import ResNet50", call="model = ResNet50().cuda(rank)"))
    found = [f for f in lint_file(str(script), select=set(RULES)) if f.id == "download-on-every-rank"]
    assert [f.line for f in found] == [9] and "src/train.py:8" in found[0].title


def test_a_file_written_in_a_function_of_the_script_nothing_calls_is_no_write(tmp_path):
    # RoMa's training script: test_mega1500(model, name) dumps results/mega1500_<name>.json, but only
    # an `--only_test` path that the script no longer has would call it: nothing runs it. Called after
    # training in every rank, it writes the same file from all of them.
    script = tmp_path / "train.py"
    body = """\
        import json
        import torch.distributed as dist

        def test_mega1500(model, name):
            results = {"auc": 0.5}
            json.dump(results, open(f"results/mega1500_{name}.json", "w"))

        def train():
            dist.init_process_group("nccl")
            {after}
            dist.destroy_process_group()

        if __name__ == "__main__":
            train()
        """
    for after, found in (("pass", []), ('test_mega1500(None, "roma")', [6])):
        script.write_text(textwrap.dedent(body).replace("{after}", after))
        assert [f.line for f in lint_file(str(script)) if f.id == "save-on-every-rank"] == found
