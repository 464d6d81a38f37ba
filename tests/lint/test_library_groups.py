"""Process groups started by a library or by the project's own setup helper.

- OpenMMLab's train tools start the group with the library's `init_dist(args.launcher, ...)` (mmcv,
  mmengine), which never ends it: without destroy_process_group that is the same mistake as a bare
  init_process_group, in the script or in the project's options module.
- Their `cfg.dump(osp.join(cfg.work_dir, osp.basename(args.config)))` on every rank writes one file
  from every rank, though no literal name is in the path; `cfg.dump()` with no file only returns text.
- A script that calls the project's setup helper (`setup.setup_dist_env()` -> `dist_init()` under
  `if not dist.is_initialized():`) is a rank from there on, as one calling init_process_group itself;
  a helper that only starts workers (mp.spawn) leaves the caller one process.
Each script is written for the test."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_file

MMCV_TOOL = """\
import argparse
import os.path as osp

from mmcv import Config
from mmcv.runner import init_dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--launcher", choices=["none", "pytorch", "slurm"], default="none")
    args = parser.parse_args()
    cfg = Config.fromfile(args.config)
    if args.launcher == "none":
        distributed = False
    else:
        distributed = True
        init_dist(args.launcher, **cfg.dist_params)
    cfg.dump({dump})
    print(distributed)


if __name__ == "__main__":
    main()
"""


def _ids(tmp_path, text: str, name: str = "train.py") -> list[tuple[str, int]]:
    script = tmp_path / name
    script.write_text(text)
    return [(f.id, f.line) for f in lint_file(str(script))]


def test_mmcv_init_dist_without_destroy_and_the_config_dumped_by_every_rank(tmp_path):
    found = _ids(tmp_path, MMCV_TOOL.format(dump="osp.join(cfg.work_dir, osp.basename(args.config))"))
    assert ("no-destroy-process-group", 18) in found
    assert ("save-on-every-rank", 19) in found


def test_a_destroyed_group_and_a_dump_on_rank_zero_are_clean(tmp_path):
    text = MMCV_TOOL.format(dump="osp.join(cfg.work_dir, osp.basename(args.config))") \
        .replace("    cfg.dump(", "    from mmcv.runner import get_dist_info\n    rank, _ = get_dist_info()\n    if rank == 0:\n        cfg.dump(") \
        .replace("    print(distributed)\n", "    print(distributed)\n    import torch.distributed as dist\n    dist.destroy_process_group()\n")
    assert _ids(tmp_path, text) == []


def test_a_dump_that_only_returns_the_text_writes_nothing(tmp_path):
    found = _ids(tmp_path, MMCV_TOOL.format(dump=""))
    assert not any(rule == "save-on-every-rank" for rule, _ in found)


def test_init_dist_in_the_projects_options_module_still_needs_a_destroy(tmp_path):
    (tmp_path / "options.py").write_text(
        "from mmcv.runner import init_dist\n\n\ndef parse(distributed):\n    if distributed:\n        init_dist('slurm')\n")
    found = _ids(tmp_path, "import options\n\n\ndef main():\n    options.parse(True)\n\n\nmain()\n")
    assert [rule for rule, _ in found] == ["no-destroy-process-group"]


SETUP = """\
import os

import torch
import torch.distributed as dist


def dist_init():
    dist.init_process_group(backend="nccl", init_method="env://")
    dist.destroy_process_group


def setup_dist_env():
    if not dist.is_initialized():
        dist_init()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def cleanup():
    dist.destroy_process_group()
"""

USER = """\
import json
import os

import setup


def main(out):
    setup.setup_dist_env()
    with open(os.path.join(out, "args.json"), "w") as f:
        json.dump({"lr": 0.1}, f)
    setup.cleanup()


main("runs")
"""


def test_after_the_projects_setup_helper_the_script_is_a_rank(tmp_path):
    (tmp_path / "setup.py").write_text(SETUP)
    assert _ids(tmp_path, USER, "main.py") == [("save-on-every-rank", 9)]


def test_a_helper_that_only_starts_workers_leaves_the_caller_one_process(tmp_path):
    spawner = SETUP.replace("def setup_dist_env():\n    if not dist.is_initialized():\n        dist_init()\n",
                            "def worker(i):\n    dist_init()\n\n\ndef setup_dist_env():\n"
                            "    import torch.multiprocessing as mp\n    mp.spawn(worker, nprocs=2)\n")
    (tmp_path / "setup.py").write_text(spawner)
    assert not any(rule == "save-on-every-rank" for rule, _ in _ids(tmp_path, USER, "main.py"))


def test_a_helper_that_forks_a_child_per_gpu_is_not_a_start_in_the_callers_process(tmp_path):
    # (DeBERTa's launcher: what the script did before calling it ran in the parent alone)
    forking = SETUP.replace("def setup_dist_env():\n    if not dist.is_initialized():\n        dist_init()\n",
                            "def setup_dist_env():\n    for r in range(torch.cuda.device_count()):\n"
                            "        if os.fork() == 0:\n            break\n    dist_init()\n")
    (tmp_path / "setup.py").write_text(forking)
    before = USER.replace("    setup.setup_dist_env()\n", "").replace("    setup.cleanup()\n", "    setup.setup_dist_env()\n    setup.cleanup()\n")
    assert before.index("args.json") < before.index("setup_dist_env")
    assert not any(rule == "save-on-every-rank" for rule, _ in _ids(tmp_path, before, "main.py"))


TIMM_TRAIN = """\
import argparse

import timm.utils as utils


def main():
    args = argparse.ArgumentParser().parse_args()
    device = utils.init_distributed_device(args)
    print(device)


if __name__ == "__main__":
    main()
"""


def test_timms_init_distributed_device_starts_a_group_the_script_must_end(tmp_path):
    # (the train.py of pytorch-image-models and the projects copying it)
    assert _ids(tmp_path, TIMM_TRAIN) == [("no-destroy-process-group", 8)]
    ended = TIMM_TRAIN.replace("    print(device)\n", "    print(device)\n    import torch.distributed as dist\n    dist.destroy_process_group()\n")
    assert _ids(tmp_path, ended) == []
