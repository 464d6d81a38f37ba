"""hard-coded-rendezvous through the settings a project ships: MASTER_PORT set from a setting that
every JSON config beside the script (or in a config* folder of it) fixes to one port. Each project
is written for the test."""

from __future__ import annotations

import json
import textwrap

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import os
import torch.distributed as dist
import torch.multiprocessing as mp
import utils

def run(rank, n_gpus, hps):
    dist.init_process_group(backend="nccl", init_method="env://", world_size=n_gpus, rank=rank)
    dist.destroy_process_group()

def main():
    hps = utils.get_hparams()
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(hps.train.port)
    mp.spawn(run, nprocs=2, args=(2, hps))

if __name__ == "__main__":
    main()
"""


def project(tmp_path, *ports):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "utils.py").write_text("def get_hparams():\n    return None\n")
    folder = tmp_path / "configs_template"
    folder.mkdir()
    for i, port in enumerate(ports):
        (folder / f"config_{i}.json").write_text(json.dumps({"train": {"port": port, "epochs": 100}}))
    return tmp_path / "train.py"


def rendezvous(script) -> list[int]:
    return [f.line for f in lint_file(script) if f.id == "hard-coded-rendezvous"]


def test_master_port_from_a_setting_every_shipped_config_fixes(tmp_path):
    assert rendezvous(project(tmp_path, "8001", 8001)) == [13]


def test_master_port_from_a_setting_some_config_leaves_open(tmp_path):
    assert rendezvous(project(tmp_path, "8001", "")) == []


def test_master_port_from_a_setting_no_config_names(tmp_path):
    assert rendezvous(project(tmp_path)) == []
