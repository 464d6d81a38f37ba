"""Signals in the script itself that `gpurig lint` reads: a switch set True on every rank and False
under a rank check, a library call named like one of the script's functions, the script's own option
defaulting to a fixed port, a Hugging Face Trainer given a DeepSpeed config. Each fixture is a small
script in the shape of a pattern met in public training scripts."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import RULES, lint_file, lint_source

HEAD = """\
import os
import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
"""


def _lint(body: str, rule: str) -> list[int]:
    return [f.line for f in lint_source(HEAD + textwrap.dedent(body), select=set(RULES)) if f.id == rule]


def _lint_file(folder, name: str, body: str, rule: str) -> list:
    """The findings of `rule` for the script written as folder/name (their `related` places name the file)."""
    (folder / name).write_text(HEAD + textwrap.dedent(body))
    return [f for f in lint_file(str(folder / name), select=set(RULES)) if f.id == rule]


def test_a_switch_turned_off_on_the_other_ranks_guards_what_it_gates():
    # T5+CL: self.verbose = True; if distributed and dist.get_rank() != 0: self.verbose = False
    body = """
    class Trainer:
        def __init__(self, args):
            self.verbose = True
            if args.distributed:
                if dist.get_rank() != 0:
                    self.verbose = False
        def save(self, name):
            torch.save(self.model.state_dict(), f"{name}.pth")
        def train(self):
            for epoch in range(10):
                if self.verbose:
                    self.save("BEST")
            if self.verbose:
                self.save("LAST")
            torch.save({}, "every_rank.pth")
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    Trainer(args).train()
    dist.destroy_process_group()
    """
    assert _lint(body, "save-on-every-rank") == [21]


def test_a_switch_set_the_same_on_every_rank_is_no_guard():
    body = """
    verbose = True
    if args.quiet:
        verbose = False
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if verbose:
        torch.save({}, "ckpt.pth")
    dist.destroy_process_group()
    """
    assert _lint(body, "save-on-every-rank") == [13]


def test_master_port_from_the_scripts_own_option_default():
    # BRIO: main() sets MASTER_PORT from -p/--port (default 12355) before mp.spawn
    body = """
    def run(rank, args):
        dist.init_process_group("nccl", rank=rank, world_size=2)
        torch.cuda.set_device(rank)
        dist.destroy_process_group()
    def main(args):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = f"{args.port}"
        mp.spawn(run, args=(args,), nprocs=2)
    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("-p", "--port", type=int, default=12355)
        main(parser.parse_args())
    """
    assert _lint(body, "hard-coded-rendezvous") == [13]
    # a port option without a fixed default: the launcher's or the user's
    assert _lint(body.replace("default=12355", "required=True"), "hard-coded-rendezvous") == []


def test_a_trainer_given_a_deepspeed_config_runs_on_every_rank():
    # trlx's GPT-J reward model: TrainingArguments(deepspeed="ds_config.json"), run with `deepspeed`
    body = """
    from transformers import AutoTokenizer, Trainer, TrainingArguments
    tokenizer = AutoTokenizer.from_pretrained("EleutherAI/gpt-j-6B")
    args = TrainingArguments(output_dir="out", deepspeed="ds_config_gpt_j.json")
    Trainer(model=model, args=args).train()
    """
    assert _lint(body, "download-on-every-rank") == [8]
    assert _lint(body.replace(', deepspeed="ds_config_gpt_j.json"', ""), "download-on-every-rank") == []


def test_a_port_option_named_for_the_rendezvous_is_said_once():
    # `--master_port` is reported at its default; the MASTER_PORT line using it is the same mistake
    body = """
    def main(args):
        os.environ["MASTER_PORT"] = str(args.master_port)
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.destroy_process_group()
    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--master_port", type=int, default=12355)
        main(parser.parse_args())
    """
    assert _lint(body, "hard-coded-rendezvous") == [14]


def test_a_set_up_function_called_only_where_no_launcher_ran_is_a_fallback():
    # Lumina-Next: if any([x not in os.environ for x in [RANK, ...]]): setup_dist_env_from_slurm(args)
    body = """
    def setup_dist_env_from_slurm(args):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = str(args.port)
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
    def main(args):
        if any([x not in os.environ for x in ["RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR"]]):
            setup_dist_env_from_slurm(args)
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.destroy_process_group()
    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--port", type=int, default=8964)
        main(parser.parse_args())
    """
    assert _lint(body, "hard-coded-rendezvous") == []
    # called on every run, it fixes the port
    assert _lint(body.replace("        if any([x not in os.environ for x in [\"RANK\", \"WORLD_SIZE\", \"MASTER_PORT\", \"MASTER_ADDR\"]]):\n            setup", "        if True:\n            setup"), "hard-coded-rendezvous") == [9]


def test_a_port_option_handed_to_the_workers_names_where_it_becomes_master_port(tmp_path):
    # Optuna's spawn example: --master-port defaults to "12355", mp.spawn hands args.master_port to the
    # worker, whose setup() puts it into MASTER_PORT: the finding names that line, where the user looks
    body = """
    def setup(rank, world_size, master_port):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = master_port
        dist.init_process_group("gloo", rank=rank, world_size=world_size)

    def run(rank, world_size, master_port):
        setup(rank, world_size, master_port)
        dist.destroy_process_group()

    parser = argparse.ArgumentParser()
    parser.add_argument("--master-port", type=str, default="12355")
    args = parser.parse_args()
    mp.spawn(run, args=(2, args.master_port), nprocs=2)
    """
    found = _lint_file(tmp_path, "train.py", body, "hard-coded-rendezvous")
    assert [f.line for f in found] == [17]
    assert "train.py:9" in found[0].related and "(used at train.py:9, train.py:19)" in found[0].title


def test_a_file_emptied_then_appended_to_is_one_finding():
    # ALBEF-style evaluation dump: open(path, "w") to empty it, then open(path, "a") for the rows, on every rank
    body = """
    def evaluate_and_dump(args, results):
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        with open(os.path.join(args.output_dir, "test.jsonl"), "w") as f:
            f.write("")
        with open(os.path.join(args.output_dir, "test.jsonl"), "a") as f:
            for r in results:
                f.write(str(r))
        with open(os.path.join(args.output_dir, "config.yaml"), "w") as f:
            f.write(str(args))
        dist.destroy_process_group()
    evaluate_and_dump(args, results)
    """
    assert _lint(body, "save-on-every-rank") == [10, 15]


def test_a_group_started_and_ended_in_functions_run_from_elsewhere_is_ended():
    # a training module whose entry point is another file (`from train import main`, a console script):
    # nothing in it calls main(), which starts and ends the group; a cleanup() nothing runs still ends nothing
    body = """
    def main(args):
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        train(args)
        dist.destroy_process_group()
    """
    assert _lint(body, "no-destroy-process-group") == []
    body = """
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    def cleanup():
        dist.destroy_process_group()
    """
    assert _lint(body, "no-destroy-process-group") == [7]
    # (the tutorial's cleanup() defined and never called, its main() run from elsewhere: not ended)
    body = """
    def cleanup():
        dist.destroy_process_group()
    def main():
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        train()
    """
    assert _lint(body, "no-destroy-process-group") == [10]


def test_a_rendezvous_option_is_said_used_only_where_it_is(tmp_path):
    # the ImageNet example's --dist-url, and a Slurm helper setting MASTER_PORT from the job id:
    # that line is not where the option is used
    body = """
    def slurm_setup():
        port = 10000 + int(os.environ["SLURM_JOB_ID"]) % 20000
        os.environ["MASTER_PORT"] = str(port)

    parser = argparse.ArgumentParser()
    parser.add_argument("--dist-url", default="tcp://224.66.41.62:23456")
    args = parser.parse_args()
    dist.init_process_group("nccl", init_method=args.dist_url, world_size=2, rank=0)
    dist.destroy_process_group()
    """
    found = _lint_file(tmp_path, "main.py", body, "hard-coded-rendezvous")
    assert [f.line for f in found] == [12] and found[0].related == ["main.py:14"]
