"""The ImageNet-example guard `if not args.multiprocessing_distributed or args.rank % ngpus == 0:`
under `gpurig lint`. Launched one process per node without that flag, every process passes it, so
by default it guards nothing. Where the project turns the flag on by default (the option's
`default=True`, or `cfg.MULTIPROCESSING_DISTRIBUTED = True` in its config module, as HRNet and
TorchSSL do), the script runs as mp.spawn workers with the flag on and only rank 0 goes in."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
{imports}
parser = argparse.ArgumentParser()
parser.add_argument('--multiprocessing-distributed', {option})
parser.add_argument('--rank', default=0, type=int)


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group('nccl', init_method='env://', world_size=2, rank=args.rank)
    torch.cuda.set_device(gpu)
    model = torch.nn.Linear(4, 4).cuda(gpu)
    if not {flag} or ({flag} and args.rank % ngpus_per_node == 0):
        torch.save(model.state_dict(), 'checkpoint.pth.tar')
    dist.destroy_process_group()


def main():
    args = parser.parse_args()
    mp.spawn(main_worker, nprocs=2, args=(2, args))


if __name__ == '__main__':
    main()
"""


def _saves(tmp_path, option: str, flag: str = "args.multiprocessing_distributed", imports: str = "",
           files: dict[str, str] | None = None) -> list[int]:
    for rel, text in (files or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    script = tmp_path / "main.py"
    script.write_text(SCRIPT.format(option=option, flag=flag, imports=imports))
    return [f.line for f in lint_file(str(script)) if f.id == "save-on-every-rank"]


def test_the_guard_guards_nothing_when_the_flag_is_off_by_default(tmp_path):
    assert _saves(tmp_path, "action='store_true'") == [17]


def test_the_guard_picks_rank_zero_when_the_option_defaults_on(tmp_path):
    assert _saves(tmp_path, "type=bool, default=True") == []
    assert _saves(tmp_path, "type=bool, default=False") == [17]


def test_the_guard_picks_rank_zero_when_the_config_module_turns_the_flag_on(tmp_path):
    config = {"config/__init__.py": "from .default import _C as cfg\n",
              "config/default.py": "from yacs.config import CfgNode as CN\n_C = CN()\n_C.MULTIPROCESSING_DISTRIBUTED = True\n"}
    assert _saves(tmp_path, "action='store_true'", flag="cfg.MULTIPROCESSING_DISTRIBUTED",
                  imports="from config import cfg", files=config) == []
    # a project that also turns it off somewhere has no default to rely on
    config["config/default.py"] += "_C.MULTIPROCESSING_DISTRIBUTED = False\n"
    assert _saves(tmp_path, "action='store_true'", flag="cfg.MULTIPROCESSING_DISTRIBUTED",
                  imports="from config import cfg", files=config) == [17]
