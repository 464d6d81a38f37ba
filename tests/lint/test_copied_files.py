"""`shutil.copy(src, dst)` writes its destination as `shutil.copyfile` and `shutil.copy2` do: the
config or the script copied into the run's folder by every rank is one file written by all of them
(`shutil.copy(args.config, os.path.join(save_dir, "config.yaml"))`); copied under a rank check, or to a
file named for the rank, it is written once per name. `copy.copy(x)` copies an object, not a file.
Each script is written for the test."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import copy
import os
import shutil

import torch
import torch.distributed as dist


def main(args):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    save_dir = os.path.join(args.output_dir, args.exp_name)
    os.makedirs(save_dir, exist_ok=True)
{copy}
    settings = copy.copy(vars(args))
    print(settings)
    dist.destroy_process_group()


if __name__ == "__main__":
    import argparse

    main(argparse.ArgumentParser().parse_args())
"""


def _writes(tmp_path, line: str) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(copy=line))
    return [f.code for f in lint_file(str(script)) if f.id == "save-on-every-rank"]


@pytest.mark.parametrize("line", [
    '    shutil.copy(args.config, os.path.join(save_dir, "config.yaml"))',
    # (SoftGroup: under the config's own file name, the same name in every rank)
    '    shutil.copy(args.config, os.path.join(save_dir, os.path.basename(args.config)))',
])
def test_a_config_copied_into_the_run_folder_by_every_rank(tmp_path, line):
    assert _writes(tmp_path, line) == [line.strip()]


@pytest.mark.parametrize("line", [
    '    if dist.get_rank() == 0:\n        shutil.copy(args.config, os.path.join(save_dir, "config.yaml"))',
    '    shutil.copy(args.config, os.path.join(save_dir, f"config_{dist.get_rank()}.yaml"))',
    '    shutil.copy(args.config, os.path.join(save_dir, os.path.basename(args.config) + str(dist.get_rank())))',
])
def test_copied_once_or_to_the_ranks_own_name(tmp_path, line):
    assert _writes(tmp_path, line) == []
