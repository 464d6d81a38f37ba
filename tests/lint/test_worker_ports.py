"""A worker the script starts from another module of its project (`mp.spawn(train.init_processes, ...)`,
`Process(target=train.init_processes)`) that sets MASTER_PORT from the project's parser, whose --port
has a fixed default, fixes the rendezvous port, as a helper the script calls does. The port may be
turned into text any common way (`str(x)`, `'%d' % x`, `'{}'.format(x)`). Each project is written for
the test."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import lint_file

PARSER = """\
import argparse


def create_parser():
    parser = argparse.ArgumentParser(description="graph training")
    parser.add_argument("--port", type=int, default={default}, help="the network port for communication")
    parser.add_argument("--master-addr", type=str, default="127.0.0.1")
    return parser.parse_args()
"""

TRAIN = """\
import os

import torch.distributed as dist


def init_processes(rank, size, args):
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = {port}
    dist.init_process_group("nccl", rank=rank, world_size=size)
    dist.destroy_process_group()
"""

SPAWN = """\
import torch.multiprocessing as mp

import train
from helper.parser import *

if __name__ == "__main__":
    args = create_parser()
    mp.spawn(train.init_processes, args=(2, args), nprocs=2)
"""

PROCESS = """\
import torch.multiprocessing as mp

import train
from helper.parser import create_parser

if __name__ == "__main__":
    args = create_parser()
    processes = []
    for i in range(2):
        p = mp.Process(target=train.init_processes, args=(i, 2, args))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
"""


def _project(tmp_path, script, port="str(args.port)", default="18118"):
    (tmp_path / "helper").mkdir()
    (tmp_path / "helper" / "__init__.py").write_text("")
    (tmp_path / "helper" / "parser.py").write_text(PARSER.format(default=default))
    (tmp_path / "train.py").write_text(TRAIN.format(port=port))
    (tmp_path / "main.py").write_text(script)
    return [f for f in lint_file(str(tmp_path / "main.py")) if f.id == "hard-coded-rendezvous"]


@pytest.mark.parametrize("script, line", [(SPAWN, 8), (PROCESS, 10)])
@pytest.mark.parametrize("port", ["str(args.port)", "'%d' % args.port", "'{}'.format(args.port)"])
def test_a_started_worker_that_sets_the_parsers_fixed_port_is_a_fixed_rendezvous(tmp_path, script, line, port):
    found = _project(tmp_path, script, port=port)
    assert [f.line for f in found] == [line], found
    assert "init_processes()" in found[0].title and "18118" in found[0].title


def test_no_finding_where_the_port_option_has_no_fixed_default(tmp_path):
    assert _project(tmp_path, SPAWN, default="None") == []


def test_other_formatting_of_the_port_is_not_read_as_the_port(tmp_path):
    # ('%d%d' % (a, b) is not the port alone)
    assert _project(tmp_path, SPAWN, port="'%d%d' % (args.port, 1)") == []
