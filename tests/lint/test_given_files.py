"""Files a project's helper writes that gpurig reads through one more step: a path the helper keeps
in an attribute it sets first (BEiT-style `create_ds_config(args)`: `args.deepspeed_config =
os.path.join(args.output_dir, "deepspeed_config.json")`, then `open(args.deepspeed_config, "w")`),
a parameters dump in pickle form (`params.pkl`), and a writer class handed its file by another
function of the project (`Learner.__init__` builds `CsvWriter(file_path=<out>/results.csv)`). Each
runs on every rank and writes the same file; guarded by a rank check it does not. So does a config
a helper saves with OmegaConf into the folder it is given (`hparams.yaml`)."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import lint_file


def _write(project, rel: str, text: str) -> None:
    target = project / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))


HEAD = """\
import torch
import torch.distributed as dist
import utils
from run import Learner, RankLearner
def main(args, rank):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
"""


def _saves(project, body: str) -> list[tuple[int, str]]:
    (project / "train.py").write_text(HEAD + textwrap.indent(textwrap.dedent(body), "    ") + "    dist.destroy_process_group()\n")
    return [(f.line, f.title) for f in lint_file(str(project / "train.py"), select={"save-on-every-rank"})]


UTILS = """
    import os
    import pickle
    def create_ds_config(args):
        args.deepspeed_config = os.path.join(args.output_dir, "deepspeed_config.json")
        with open(args.deepspeed_config, mode="w") as writer:
            writer.write("{}")
    def dump_params(params):
        pickle.dump(params, open(os.path.join(params.dump_path, "params.pkl"), "wb"))
    def save_hparams(args, save_path):
        from omegaconf import OmegaConf
        OmegaConf.save(config=OmegaConf.create(vars(args)), f=os.path.join(save_path, "hparams.yaml"))
    def save_plot(values, save_path):
        import matplotlib.pyplot as plt
        plt.savefig(os.path.join(save_path, f"curve_{len(values)}.png"))
    def set_run_name(args):
        args.run_name = "run-" + args.tag
    class CsvWriter:
        def __init__(self, file_path, header):
            self.file = open(file_path, "w")
            self.file.write(",".join(header))
    """

RUN = """
    import os
    from utils import CsvWriter
    class Learner:
        def __init__(self, args, rank):
            self.csv_writer = CsvWriter(file_path=os.path.join(args.checkpoint_dir, "results.csv"), header=["a"])
    class RankLearner:
        def __init__(self, args, rank):
            self.csv_writer = CsvWriter(os.path.join(args.checkpoint_dir, f"results_{rank}.csv"), ["a"])
    """


@pytest.fixture()
def project(tmp_path):
    _write(tmp_path, "utils.py", UTILS)
    _write(tmp_path, "run.py", RUN)
    return tmp_path


@pytest.mark.parametrize("call, file", [("utils.create_ds_config(args)", "deepspeed_config.json"),
                                        ("utils.dump_params(args)", "params.pkl"),
                                        ("Learner(args, rank)", "results.csv"),
                                        ("utils.save_hparams(args, args.out)", "hparams.yaml")])
def test_a_helper_writes_a_file_of_its_own_on_every_rank(project, call, file):
    found = _saves(project, f"{call}\n")
    assert [line for line, _ in found] == [8] and file in found[0][1]
    # under a rank check only one rank writes it
    assert _saves(project, f"if rank == 0:\n    {call}\n") == []


def test_a_file_named_for_each_rank_or_no_file_at_all_is_no_shared_write(project):
    assert _saves(project, "RankLearner(args, rank)\nutils.set_run_name(args)\nutils.save_plot([1], args.out)\n") == []
