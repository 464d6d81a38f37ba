"""`gpurig lint`: each rule on a small script with the mistake, and on the same script fixed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpurig.diagnose.lint import DEFAULT_RULES, RULES, lint_source

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
    "save-on-every-rank": (
        """
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        torch.save({}, 'ckpt.pt')
        """,
        """
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        if rank == 0:
            torch.save({}, 'ckpt.pt')
        torch.save({}, f'shard_{rank}.pt')
        """,
    ),
    "print-on-every-rank": (
        """
        import logging
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        print('loss', 0.5)
        logging.info('epoch done')
        """,
        """
        import logging
        dist.init_process_group('gloo')
        rank = dist.get_rank()
        if rank == 0:
            print('loss', 0.5)
            logging.info('epoch done')
        """,
    ),
    "tqdm-on-every-rank": (
        "from tqdm import tqdm\ndist.init_process_group('gloo')\nfor x in tqdm(range(3)):\n    pass\n",
        "from tqdm import tqdm\ndist.init_process_group('gloo')\nfor x in tqdm(range(3), disable=dist.get_rank() != 0):\n    pass\n",
    ),
    "no-destroy-process-group": (
        "dist.init_process_group('gloo')\n",
        "dist.init_process_group('gloo')\ntry:\n    pass\nfinally:\n    dist.destroy_process_group()\n",
    ),
    "global-rank-as-device": (
        "rank = int(os.environ['RANK'])\ntorch.cuda.set_device(rank)\ndist.init_process_group('nccl')\nm = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[rank])\n",
        "rank = int(os.environ['RANK'])\ntorch.cuda.set_device(local_rank)\ndist.init_process_group('nccl')\nm = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])\n",
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


END = "\ndist.destroy_process_group()\n"  # every fixture ends cleanly unless it is about that


def _ids(body: str, every_rule: bool = True, end: str = END) -> list[str]:
    return [f.id for f in lint_source(HEAD + textwrap.dedent(body) + end, select=set(RULES) if every_rule else None)]


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_the_mistake(rule):
    bad, _ = CASES[rule]
    assert rule in _ids(bad, end="" if rule == "no-destroy-process-group" else END)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_is_quiet_on_the_fixed_script(rule):
    _, fixed = CASES[rule]
    assert _ids(fixed, end="" if rule == "no-destroy-process-group" else END) == []


def test_every_rule_has_a_severity_a_reason_and_a_case():
    assert set(CASES) == set(RULES)
    for rule in RULES.values():
        assert rule.severity in ("error", "warn", "info") and rule.why.endswith(".")
    assert DEFAULT_RULES == {r for r in RULES if not RULES[r].cosmetic}
    assert {"print-on-every-rank", "tqdm-on-every-rank", "dataloader-starves-gpu", "find-unused-parameters"} <= set(RULES) - DEFAULT_RULES


def test_cosmetic_rules_are_off_unless_selected_and_rules_can_be_chosen():
    body = textwrap.dedent(CASES["print-on-every-rank"][0]) + "torch.save({}, 'ckpt.pt')\n"
    assert _ids(body, every_rule=False) == ["save-on-every-rank"]
    source = HEAD + body + END
    assert [f.id for f in lint_source(source, select={"print-on-every-rank"})] == ["print-on-every-rank"] * 2
    assert [f.id for f in lint_source(source, ignore={"save-on-every-rank"})] == []


def test_ignore_comments_on_a_line_and_for_the_file():
    source = HEAD + "dist.init_process_group('gloo')\nstate = torch.load('a.pt')  # gpurig: ignore[torch-load-without-map-location]\n" \
        "other = torch.load('b.pt')  # gpurig: ignore\nthird = torch.load('c.pt')  # gpurig: ignore[save-on-every-rank]\n" + END
    assert [(f.id, f.code.split(" =")[0]) for f in lint_source(source)] == [("torch-load-without-map-location", "third")]
    assert lint_source("# gpurig: ignore-file[torch-load-without-map-location]\n" + source) == []


def test_findings_carry_line_code_fix_and_why():
    findings = lint_source(HEAD + "dist.init_process_group('gloo')\nstate = torch.load('ckpt.pt')\n" + END)
    (f,) = findings
    assert f.line == HEAD.count("\n") + 2
    assert f.code == "state = torch.load('ckpt.pt')"
    assert "map_location" in f.fix and f.severity == "warn" and "GPU 0" in f.why


def test_every_output_call_is_reported_with_its_line():
    findings = lint_source(HEAD + textwrap.dedent(CASES["print-on-every-rank"][0]) + END, select={"print-on-every-rank"})
    assert [f.code.split("(")[0] for f in findings] == ["print", "logging.info"]


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
    found = [(f.line, f.id) for f in lint_source(source, select=set(RULES))]
    lines = source.splitlines()
    expect = {
        "hard-coded-rendezvous": next(i for i, s in enumerate(lines, 1) if "init_method='tcp://" in s),  # the address's own line
        "download-on-every-rank": next(i for i, s in enumerate(lines, 1) if "download=True" in s),
        "dataloader-starves-gpu": next(i for i, s in enumerate(lines, 1) if s.strip().startswith("dataloader = DataLoader(")),
    }
    assert sorted(found) == sorted((line, rule) for rule, line in expect.items())


def test_cli_json_and_exit_codes(run_cli, tmp_path):
    out = run_cli("lint", "--json", str(SCRIPTS / "seed_ddp_template.py"))
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert [f["id"] for f in doc["findings"]] == ["hard-coded-rendezvous", "download-on-every-rank"]
    assert {"id", "severity", "line", "title", "fix", "code", "why"} <= set(doc["findings"][0])
    out = run_cli("lint", "--json", "--all", str(SCRIPTS / "seed_ddp_template.py"))  # cosmetic rules too
    assert [f["id"] for f in json.loads(out.stdout)["findings"]][-1] == "dataloader-starves-gpu"
    out = run_cli("lint", "--json", "--ignore", "download-on-every-rank", "--select", "hard-coded-rendezvous,download-on-every-rank",
                  str(SCRIPTS / "seed_ddp_template.py"))
    assert [f["id"] for f in json.loads(out.stdout)["findings"]] == ["hard-coded-rendezvous"]
    out = run_cli("lint", "--select", "no-such-rule", str(SCRIPTS / "seed_ddp_template.py"))
    assert out.returncode == 2 and "--select: unknown rule 'no-such-rule'" in out.stderr
    clean = tmp_path / "clean.py"
    clean.write_text(HEAD + "dist.init_process_group('gloo')\ndist.destroy_process_group()\n")
    out = run_cli("lint", str(clean))
    assert out.returncode == 0 and "none of the known multi-GPU mistakes" in out.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    out = run_cli("lint", str(broken))
    assert out.returncode == 2 and "not valid Python (line 1" in out.stderr
    out = run_cli("lint", str(tmp_path / "missing.py"))
    assert out.returncode == 2 and "no such file" in out.stderr
    out = run_cli("lint", "--json", str(broken))  # bad input still gets one JSON document
    assert out.returncode == 2 and json.loads(out.stdout)["error"].startswith(f"SCRIPT {broken}: not valid Python")


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
    # The save is reported where the helper is called on every rank.
    found = lint_source(HEAD + textwrap.dedent(body) + "save_checkpoint({})\n" + END, select=set(RULES))
    assert [(f.id, f.code) for f in found] == [("print-on-every-rank", "print('saved')"), ("save-on-every-rank", "save_checkpoint({})")]
    assert "save_checkpoint() saves with torch.save" in found[1].title


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


def test_pythons_warnings_about_the_scripts_text_are_not_printed(tmp_path):
    import warnings

    from gpurig.diagnose.lint import lint_file

    script = tmp_path / "train.py"
    script.write_text('import re\nPATTERN = re.compile("\\d+\\e")\n')
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert lint_file(str(script)) == []
    assert [str(w.message) for w in seen] == []
