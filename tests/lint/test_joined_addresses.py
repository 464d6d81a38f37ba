"""An init_method written as an f-string of names each set once to a constant
(`f"tcp://{master_addr}:{master_port}"` with `master_port = 8237`) is as fixed as the literal it spells,
in the script and in a helper of its project the workers call. A name set again, or read from an
option, is not a constant. Each script is written for the test."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_file, lint_source

SCRIPT = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, n):
    master_addr = "localhost"
    master_port = {port}
{again}    torch.cuda.set_device(rank)
    dist.init_process_group(backend="nccl", init_method=f"tcp://{{master_addr}}:{{master_port}}", world_size=n, rank=rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
"""

HELPER = """\
import torch
import torch.distributed as dist


def initialize_training_process_group(rank, world_size):
    master_addr = "localhost"
    master_training_port = {port}
{again}    torch.cuda.set_device(rank)
    dist.init_process_group(backend="nccl", init_method=f"tcp://{{master_addr}}:{{master_training_port}}",
                            world_size=world_size, rank=rank)
"""

MAIN = """\
import torch.distributed as dist
import torch.multiprocessing as mp

from utils import initialize_training_process_group


def main(rank, nproc):
    initialize_training_process_group(rank, nproc)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
"""


def _rendezvous(findings):
    return [f for f in findings if f.id == "hard-coded-rendezvous"]


def test_an_f_string_of_constants_in_the_script_is_a_fixed_address():
    found = _rendezvous(lint_source(SCRIPT.format(port="8237", again=""), "train.py"))
    assert [f.line for f in found] == [10], found
    assert "tcp://localhost:8237" in found[0].title


def test_a_port_set_again_is_not_a_constant():
    again = "    master_port = find_free_port()\n"
    assert _rendezvous(lint_source(SCRIPT.format(port="8237", again=again), "train.py")) == []


def test_a_port_from_the_environment_is_not_a_constant():
    assert _rendezvous(lint_source(SCRIPT.format(port='os.environ["MASTER_PORT"]', again=""), "train.py")) == []


def _project(tmp_path, port="8237", again=""):
    (tmp_path / "utils.py").write_text(HELPER.format(port=port, again=again))
    (tmp_path / "nano_r1.py").write_text(MAIN)
    return _rendezvous(lint_file(str(tmp_path / "nano_r1.py")))


def test_a_helper_the_workers_call_with_an_f_string_of_constants_is_a_fixed_address(tmp_path):
    found = _project(tmp_path)
    assert [f.line for f in found] == [8], found
    assert "tcp://localhost:8237" in found[0].title


def test_a_helper_whose_port_is_set_again_is_not(tmp_path):
    assert _project(tmp_path, again="    master_training_port = pick_port()\n") == []
