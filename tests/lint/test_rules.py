"""`gpurig lint`: each rule on a small script with the mistake, and on the same script fixed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpurig.diagnose.lint import lint_source

SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "scripts"

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
local_rank = int(os.environ["LOCAL_RANK"])
"""

# rule id -> (script with the mistake, the same script fixed)
CASES = {
    "data-parallel": (
        "model = torch.nn.DataParallel(torch.nn.Linear(4, 4).cuda())\n",
        "torch.cuda.set_device(local_rank)\ndist.init_process_group('nccl')\nmodel = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])\n",
    ),
    "sampler-without-set-epoch": (
        """
        dist.init_process_group('gloo')
        sampler = DistributedSampler(range(100))
        loader = DataLoader(range(100), sampler=sampler)
        for epoch in range(3):
            for batch in loader:
                pass
        """,
        """
        dist.init_process_group('gloo')
        sampler = DistributedSampler(range(100))
        loader = DataLoader(range(100), sampler=sampler)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for batch in loader:
                pass
        """,
    ),
    "ddp-without-device": (
        """
        dist.init_process_group('nccl')
        model = torch.nn.Linear(4, 4).cuda()
        ddp = DDP(model)
        """,
        """
        torch.cuda.set_device(local_rank)
        dist.init_process_group('nccl')
        model = torch.nn.Linear(4, 4).cuda()
        ddp = DDP(model, device_ids=[local_rank])
        """,
    ),
    "torch-load-without-map-location": (
        "dist.init_process_group('gloo')\nstate = torch.load('ckpt.pt')\n",
        "dist.init_process_group('gloo')\nstate = torch.load('ckpt.pt', map_location='cpu')\n",
    ),
    "output-on-every-rank": (
        """
        import logging
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        print('loss', 0.5)
        logging.info('epoch done')
        torch.save({}, 'ckpt.pt')
        """,
        """
        import logging
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        if rank == 0:
            print('loss', 0.5)
            logging.info('epoch done')
            torch.save({}, 'ckpt.pt')
        """,
    ),
    "hard-coded-rendezvous": (
        """
        os.environ['MASTER_PORT'] = '29500'
        dist.init_process_group('gloo', init_method='tcp://127.0.0.1:23456', rank=0, world_size=2)
        """,
        "dist.init_process_group('gloo')\n",
    ),
    "download-on-every-rank": (
        """
        import torchvision
        dist.init_process_group('gloo')
        data = torchvision.datasets.CIFAR10('./data', download=True)
        net = torchvision.models.resnet18(pretrained=True)
        """,
        """
        import torchvision
        dist.init_process_group('gloo')
        if local_rank == 0:
            torchvision.datasets.CIFAR10('./data', download=True)
            torchvision.models.resnet18(pretrained=True)
        dist.barrier()
        data = torchvision.datasets.CIFAR10('./data', download=False)
        """,
    ),
    "find-unused-parameters": (
        "torch.cuda.set_device(local_rank)\ndist.init_process_group('nccl')\nm = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank], find_unused_parameters=True)\n",
        "torch.cuda.set_device(local_rank)\ndist.init_process_group('nccl')\nm = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])\n",
    ),
    "dataloader-starves-gpu": (
        """
        dist.init_process_group('nccl')
        loader = DataLoader(range(100), batch_size=8)
        for x in loader:
            x = x.cuda()
        """,
        """
        dist.init_process_group('nccl')
        loader = DataLoader(range(100), batch_size=8, num_workers=4, pin_memory=True)
        for x in loader:
            x = x.cuda(non_blocking=True)
        """,
    ),
}


def _ids(body: str) -> list[str]:
    return [f.id for f in lint_source(HEAD + textwrap.dedent(body))]


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_the_mistake(rule):
    bad, _ = CASES[rule]
    assert rule in _ids(bad)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_is_quiet_on_the_fixed_script(rule):
    _, fixed = CASES[rule]
    assert _ids(fixed) == []


def test_findings_carry_line_code_and_fix():
    findings = lint_source(HEAD + "dist.init_process_group('gloo')\nstate = torch.load('ckpt.pt')\n")
    (f,) = findings
    assert f.line == HEAD.count("\n") + 2
    assert f.code == "state = torch.load('ckpt.pt')"
    assert "map_location" in f.fix


def test_every_output_call_is_reported_with_its_line():
    findings = [f for f in lint_source(HEAD + textwrap.dedent(CASES["output-on-every-rank"][0])) if f.id == "output-on-every-rank"]
    assert [f.code.split("(")[0] for f in findings] == ["print", "logging.info", "torch.save"]


def test_early_return_guard_counts_as_a_rank_check():
    body = """
    dist.init_process_group('gloo')
    def report(loss):
        if dist.get_rank() != 0:
            return
        print('loss', loss)
    """
    assert _ids(body) == []


def test_single_process_script_may_print():
    assert [f.id for f in lint_source("import torch\nprint(torch.ones(2))\n")] == []


def test_seed_template_gets_exactly_what_it_gets_wrong():
    source = (SCRIPTS / "seed_ddp_template.py").read_text()
    found = [(f.line, f.id) for f in lint_source(source)]
    lines = source.splitlines()
    expect = {
        "hard-coded-rendezvous": next(i for i, s in enumerate(lines, 1) if "dist.init_process_group(" in s),
        "download-on-every-rank": next(i for i, s in enumerate(lines, 1) if "download=True" in s),
        "dataloader-starves-gpu": next(i for i, s in enumerate(lines, 1) if s.strip().startswith("dataloader = DataLoader(")),
    }
    assert sorted(found) == sorted((line, rule) for rule, line in expect.items())


def test_cli_json_and_exit_codes(run_cli, tmp_path):
    out = run_cli("lint", "--json", str(SCRIPTS / "seed_ddp_template.py"))
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert [f["id"] for f in doc["findings"]] == ["hard-coded-rendezvous", "download-on-every-rank", "dataloader-starves-gpu"]
    assert {"id", "severity", "line", "title", "fix", "code"} <= set(doc["findings"][0])
    clean = tmp_path / "clean.py"
    clean.write_text(HEAD + "dist.init_process_group('gloo')\n")
    out = run_cli("lint", str(clean))
    assert out.returncode == 0 and "none of the known multi-GPU mistakes" in out.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    out = run_cli("lint", str(broken))
    assert out.returncode == 2 and "not valid Python (line 1" in out.stderr
    out = run_cli("lint", str(tmp_path / "missing.py"))
    assert out.returncode == 2 and "no such file" in out.stderr


def test_helper_called_only_on_rank_zero_counts_as_guarded():
    body = """
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    def save_checkpoint(state):
        torch.save(state, 'ckpt.pt')
        print('saved')
    if rank == 0:
        save_checkpoint({})
    """
    assert _ids(body) == []
    # ... but not when another caller runs it on every rank.
    assert _ids(body + "save_checkpoint({})\n") == ["output-on-every-rank", "output-on-every-rank"]


def test_messages_meant_for_every_rank_are_not_reported():
    body = """
    import sys
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    print(f'rank {rank} finished loading')
    print('worker failed', file=sys.stderr)
    class Ctx:
        main = rank == 0
    ctx = Ctx()
    if ctx.main:
        print('epoch done')
    """
    assert _ids(body) == []
