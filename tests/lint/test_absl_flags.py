"""Command-line options defined with absl's flags (`flags.DEFINE_string("master_port", "12355", ...)`,
read as `FLAGS.master_port`) are read as argparse options are: their defaults decide a fixed
rendezvous and whether a model path is a folder of the machine. Each script is written for the test."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_source

RENDEZVOUS = """\
import os
import torch.distributed as dist
import torch.multiprocessing as mp
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("master_addr", "localhost", help="master address")
flags.DEFINE_string("master_port", {port}, help="master port for DDP")
flags.DEFINE_integer("epochs", 10, "epochs")


def setup(rank, world_size, master_addr, master_port):
    os.environ["MASTER_ADDR"] = master_addr
    os.environ["MASTER_PORT"] = master_port
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def train(rank, world_size):
    setup(rank, world_size, FLAGS.master_addr, FLAGS.master_port)
    dist.destroy_process_group()


def main(argv):
    mp.spawn(train, args=(2,), nprocs=2)


if __name__ == "__main__":
    app.run(main)
"""


def _rule(findings, rule):
    return [f for f in findings if f.id == rule]


def test_an_absl_port_flag_with_a_fixed_default_is_a_fixed_rendezvous():
    found = _rule(lint_source(RENDEZVOUS.format(port='"12355"'), "train.py"), "hard-coded-rendezvous")
    assert [f.line for f in found] == [8], found
    assert "12355" in found[0].title


def test_an_absl_port_flag_without_a_default_is_not():
    assert _rule(lint_source(RENDEZVOUS.format(port="None"), "train.py"), "hard-coded-rendezvous") == []


def test_keyword_spelling_of_the_definition_reads_the_same():
    script = RENDEZVOUS.format(port='"12355"').replace(
        'flags.DEFINE_string("master_port", "12355", help="master port for DDP")',
        'flags.DEFINE_string(name="master_port", default="12355", help="master port for DDP")')
    assert [f.line for f in _rule(lint_source(script, "train.py"), "hard-coded-rendezvous")] == [8]


MODEL = """\
import torch
import torch.distributed as dist
from absl import app, flags
from transformers import AutoModel

FLAGS = flags.FLAGS
flags.DEFINE_string("model_path", {default}, "the model to fine-tune")


def main(argv):
    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    model = AutoModel.from_pretrained(FLAGS.model_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    app.run(main)
"""


def test_a_model_flag_that_defaults_to_a_folder_of_the_machine_fetches_nothing():
    found = lint_source(MODEL.format(default='"/data/models/bert-base"'), "train.py")
    assert _rule(found, "download-on-every-rank") == [], found


def test_a_model_flag_that_defaults_to_a_hub_id_is_fetched_by_every_rank():
    found = lint_source(MODEL.format(default='"google-bert/bert-base-uncased"'), "train.py")
    assert [f.line for f in _rule(found, "download-on-every-rank")] == [13], found
