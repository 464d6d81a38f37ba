"""`gpurig lint` stays quiet on the patterns real scripts use to do the right thing, and finds the
mistakes that hide on one code path. Each fixture is a small script written for the test in the
shape of a pattern seen in public training scripts."""

from __future__ import annotations

import json
import textwrap

import pytest

from gpurig.diagnose.lint import RULES, lint_source

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
"""
END = "\ndist.destroy_process_group()\n"


def ids(body: str, **kw) -> list[str]:
    return [f.id for f in lint_source(HEAD + textwrap.dedent(body) + END, select=set(RULES), **kw)]


@pytest.mark.parametrize("guard", [
    "self.gpu_id == 0", "gpu == 0", "args.gpu == 0", "device_id == 0", "local_rank in [-1, 0]",
    "args.rank % ngpus_per_node == 0", "is_main_process()", "accelerator.is_main_process", "trainer.is_global_zero",
    "dist.get_rank() == 0", "master_process", "is_master",
])
def test_rank_checks_under_their_usual_names_guard_output(guard):
    body = f"""
    dist.init_process_group('nccl')
    if {guard}:
        torch.save({{}}, 'ckpt.pt')
        print('saved')
    """
    assert ids(body) == []


def test_early_continue_for_other_ranks_guards_the_rest_of_the_loop():
    body = """
    dist.init_process_group('nccl')
    for epoch in range(3):
        if dist.get_rank() != 0:
            continue
        torch.save({}, f'ckpt.pt')
    """
    assert ids(body) == []


def test_the_other_ranks_leaving_in_the_else_branch_guards_the_rest():
    # `if rank == 0: ... else: continue` (the loss reduced onto rank 0), also inside `if args.distributed:`
    body = """
    dist.init_process_group('nccl')
    def evaluate(model, env):
        stats = torch.zeros(2)
        dist.reduce(stats, 0)
        if env["rank"] == 0:
            loss = stats[0]
        else:
            return
        torch.save(model.state_dict(), 'eval.pt')
    for epoch in range(3):
        if args.distributed:
            dist.reduce(stats, 0)
            if env["rank"] == 0:
                loss = stats[0]
            else:
                continue
        torch.save({}, 'best.pt')
    evaluate(model, env)
    """
    assert ids(body) == []
    # the other way round the branch that leaves is rank 0's: every other rank goes on
    assert ids(body.replace('env["rank"] == 0', 'env["rank"] != 0')) == ["save-on-every-rank"] * 2
    # a test that is not about distribution: on the runs where it is false, every rank goes on
    assert ids(body.replace("if args.distributed:", "if epoch % 2:")) == ["save-on-every-rank"]


def test_print_silenced_in_the_projects_own_module(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "util").mkdir()
    (project / "util" / "__init__.py").write_text("")
    (project / "util" / "misc.py").write_text(textwrap.dedent("""
        import builtins
        def init_helpers(is_master):
            builtin_print = builtins.print
            def print(*args, **kwargs):
                if is_master or kwargs.pop('force', False):
                    builtin_print(*args, **kwargs)
            builtins.print = print
        """))
    script = project / "main.py"
    source = HEAD + textwrap.dedent("""
        import util.misc as utils
        dist.init_process_group('nccl')
        utils.init_helpers(dist.get_rank() == 0)
        print('epoch done')
        """) + END
    script.write_text(source)
    assert [f.id for f in lint_source(source, str(script), path=script, select=set(RULES))] == []
    # Without the module beside it, the same script's print is reported (cosmetic rule).
    alone = tmp_path / "elsewhere" / "scripts" / "main.py"
    alone.parent.mkdir(parents=True)
    alone.write_text(source)
    assert "print-on-every-rank" in [f.id for f in lint_source(source, str(alone), path=alone, select=set(RULES))]


def test_logging_level_raised_off_rank_zero_silences_logging():
    body = """
    import logging
    dist.init_process_group('nccl')
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO if rank in [-1, 0] else logging.WARN)
    logging.info('epoch done')
    """
    assert ids(body) == []


def test_set_epoch_under_other_names_and_samplers_that_do_not_shuffle():
    body = """
    dist.init_process_group('nccl')
    train_loader = DataLoader(range(10), sampler=DistributedSampler(range(10)), num_workers=2, pin_memory=True)
    val_sampler = DistributedSampler(range(10), shuffle=False)
    for epoch in range(3):
        train_loader.sampler.set_epoch(epoch)
    """
    assert ids(body) == []
    only_val = """
    dist.init_process_group('nccl')
    val_sampler = DistributedSampler(range(10), shuffle=False)
    """
    assert ids(only_val) == []


def test_dataloader_options_passed_as_a_dict_are_not_reported_missing():
    body = """
    dist.init_process_group('nccl')
    kwargs = {'num_workers': 4, 'pin_memory': True}
    loader = DataLoader(range(10), batch_size=2, **kwargs)
    for x in loader:
        x = x.cuda()
    """
    assert ids(body) == []


def test_per_rank_file_names_are_not_one_file_overwritten():
    body = """
    dist.init_process_group('nccl')
    rank = dist.get_rank()
    torch.save({}, f'shard_{rank}.pt')
    torch.save({}, 'opt_rank{}.pt'.format(rank))
    """
    assert ids(body) == []


def test_ddp_without_device_on_the_branch_that_skips_set_device():
    body = """
    dist.init_process_group('nccl')
    model = torch.nn.Linear(4, 4)
    if args.gpu is not None:
        torch.cuda.set_device(args.gpu)
        model.cuda(args.gpu)
        model = DDP(model, device_ids=[args.gpu])
    else:
        model.cuda()
        model = DDP(model)
    """
    found = [(f.id, f.code) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    assert found == [("ddp-without-device", "model = DDP(model)")]


def test_set_device_before_the_branch_covers_both_paths():
    body = """
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    dist.init_process_group('nccl')
    model = torch.nn.Linear(4, 4).cuda()
    if True:
        model = DDP(model)
    """
    assert ids(body) == []


def test_the_functional_data_parallel_and_a_hard_coded_rendezvous_default_are_found():
    body = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument('--dist-url', default='tcp://224.66.41.62:23456', type=str)
    args = parser.parse_args()
    dist.init_process_group('nccl', init_method=args.dist_url)
    out = torch.nn.parallel.data_parallel(torch.nn.Linear(4, 4).cuda(), torch.ones(2, 4).cuda(), [0, 1])
    """
    assert set(ids(body)) >= {"hard-coded-rendezvous", "data-parallel"}


def test_master_port_from_a_module_constant_is_hard_coded():
    body = """
    PORT = '12355'
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = PORT
    dist.init_process_group('nccl')
    """
    assert ids(body) == ["hard-coded-rendezvous"]


def test_accelerate_scripts_are_distributed():
    source = textwrap.dedent("""
        from accelerate import Accelerator
        import torch
        accelerator = Accelerator()
        torch.save({}, 'model.pt')
        if accelerator.is_main_process:
            torch.save({}, 'best.pt')
        """)
    assert [f.id for f in lint_source(source)] == ["save-on-every-rank"]


def test_deep_valid_python_is_analysed_not_a_traceback(run_cli, tmp_path):
    deep = tmp_path / "deep.py"
    # Deep but valid: Python runs it (a 500-term expression, a 500-branch elif chain).
    deep.write_text("x = 0\n" + "y = " + " + ".join(["x"] * 500) + "\n"
                    + "if x == 0:\n    pass\n" + "".join(f"elif x == {i}:\n    pass\n" for i in range(1, 500))
                    + "import torch\ntorch.nn.DataParallel(torch.nn.Linear(2, 2))\n")
    out = run_cli("lint", "--json", str(deep))
    assert out.returncode == 1, out.stderr[-500:]
    assert [f["id"] for f in json.loads(out.stdout)["findings"]] == ["data-parallel"]
    # Deeper than Python itself compiles: bad input, said plainly, never a traceback.
    deeper = tmp_path / "deeper.py"
    deeper.write_text("x = 0\ny = " + " + ".join(["x"] * 200_000) + "\n")
    out = run_cli("lint", "--json", str(deeper))
    assert out.returncode == 2 and "nested too deeply" in json.loads(out.stdout)["error"] and "Traceback" not in out.stderr


def test_sources_are_read_as_python_reads_them(run_cli, tmp_path):
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfimport torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n")
    latin = tmp_path / "latin.py"
    latin.write_bytes("# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n".encode("latin-1"))
    for path in (bom, latin):
        out = run_cli("lint", "--json", str(path))
        assert out.returncode == 1 and json.loads(out.stdout)["findings"][0]["id"] == "data-parallel", out.stderr


def test_a_method_named_like_a_helper_is_not_a_call_of_it_and_a_save_is_reported_where_it_is():
    # yolov7's shape: the whole training function saves unguarded once; `model.train()` is a method
    # of the model, not a call of the script's train(); the save itself is what to guard.
    body = """
    dist.init_process_group('nccl')
    model = torch.nn.Linear(4, 4)
    def train(model):
        torch.save(model, 'init.pt')
        for epoch in range(3):
            model.train()
    train(model)
    train(model)
    """
    found = [(f.id, f.code) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    assert found == [("save-on-every-rank", "torch.save(model, 'init.pt')")]


def test_a_save_helper_is_reported_where_it_is_called_on_every_rank():
    body = """
    dist.init_process_group('nccl')
    model = torch.nn.Linear(4, 4)
    def save_checkpoint(state, path):
        torch.save(state, path)
    for epoch in range(3):
        save_checkpoint(model.state_dict(), 'last.pt')
        if dist.get_rank() == 0:
            save_checkpoint(model.state_dict(), 'best.pt')
    """
    found = [(f.id, f.code) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    assert found == [("save-on-every-rank", "save_checkpoint(model.state_dict(), 'last.pt')")]


def test_a_save_helper_writing_a_file_in_the_folder_it_is_given_is_reported_where_it_is_called():
    # (a model's own save_pretrained: its config.json is part of the save its callers make)
    body = """
    dist.init_process_group('nccl')
    model = torch.nn.Linear(4, 4)
    def save_pretrained(state, folder):
        torch.save(state, os.path.join(folder, 'model.bin'))
        with open(os.path.join(folder, 'config.json'), 'w') as f:
            f.write('{}')
    def save_config(folder):
        with open(os.path.join(folder, 'config.json'), 'w') as f:
            f.write('{}')
    save_pretrained(model.state_dict(), 'out')
    save_config('out')
    if dist.get_rank() == 0:
        save_config('final')
    """
    found = [(f.id, f.code) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    # (save_config's own write is named where it is: it saves nothing else)
    assert found == [("save-on-every-rank", "with open(os.path.join(folder, 'config.json'), 'w') as f:"),
                     ("save-on-every-rank", "save_pretrained(model.state_dict(), 'out')")]


def test_a_rank_flag_behind_not_multiprocessing_distributed_or_guards_nothing():
    """ImageNet-style scripts: `args.rank` is computed from the process index, then the save is
    guarded by `not args.multiprocessing_distributed or args.rank % ngpus == 0`, which every
    process passes when started one per node (torchrun, env://) without that flag."""
    body = """
    def main_worker(gpu, ngpus_per_node, args):
        args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group('nccl', rank=args.rank)
        model = torch.nn.Linear(4, 4)
        if not args.multiprocessing_distributed or (args.multiprocessing_distributed
                and args.rank % ngpus_per_node == 0):
            save_checkpoint(model.state_dict())
        if args.rank % ngpus_per_node == 0:
            save_checkpoint(model.state_dict())

    def save_checkpoint(state, filename='checkpoint.pth.tar'):
        torch.save(state, filename)
    """
    found = [(f.id, f.line) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    assert [rule for rule, _ in found] == ["save-on-every-rank"]
    assert found[0][1] == HEAD.count("\n") + 8  # the first call, not the rank-guarded one
    # `not args.distributed or is_master`: without --distributed there is one process; with it,
    # one master. A right guard, whatever flag `is_master` was computed from.
    right = """
    args.rank = int(os.environ.get('RANK', 0))
    args.distributed = 'RANK' in os.environ
    is_master = args.rank == 0
    if args.distributed:
        dist.init_process_group('nccl')
    model = torch.nn.Linear(4, 4)
    if not args.distributed or is_master:
        torch.save(model.state_dict(), 'last.pt')
    """
    assert "save-on-every-rank" not in [f.id for f in lint_source(HEAD + textwrap.dedent(right) + END)]


def test_a_file_opened_for_writing_on_every_rank_is_found_whatever_builds_its_path():
    body = """
    dist.init_process_group('nccl')
    rank = dist.get_rank()
    save_dir = os.environ.get('OUT', 'runs')
    with open(os.path.join(save_dir, 'hyp.yaml'), 'w') as f:
        f.write('lr: 0.1')
    with open(f'{save_dir}/log_rank{rank}.txt', 'a') as f:
        f.write('one file per rank')
    if rank == 0:
        with open(save_dir + '/opt.yaml', 'w') as f:
            f.write('ok')
    log_file = f'{save_dir}/train_rank{rank}.log'
    with open(log_file, 'w') as f:  # a path in a variable: its rank may be in it, not judged
        f.write('x')
    def write_summary(path):
        with open(path, 'w') as f:
            f.write('summary')
    if rank == 0:
        write_summary('summary.txt')
    quiet = open(os.devnull, 'w')
    """
    found = [(f.id, f.code) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    assert found == [("save-on-every-rank", "with open(os.path.join(save_dir, 'hyp.yaml'), 'w') as f:")]


def test_a_plain_port_option_is_a_rendezvous_default_only_where_the_script_builds_tcp_from_it():
    body = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument('--ip', default='10.0.0.5', type=str)
    parser.add_argument('--port', default='23456', type=str)
    args = parser.parse_args()
    dist.init_process_group('nccl', init_method='tcp://' + args.ip + ':' + args.port, world_size=2, rank=0)
    """
    found = [(f.id, f.code) for f in lint_source(HEAD + textwrap.dedent(body) + END)]
    assert ("hard-coded-rendezvous", "parser.add_argument('--port', default='23456', type=str)") in found
    web = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', default='8080', type=str)  # a dashboard's port, no tcp:// rendezvous
    dist.init_process_group('nccl')
    """
    assert "hard-coded-rendezvous" not in [f.id for f in lint_source(HEAD + textwrap.dedent(web) + END)]


def test_a_loader_read_once_needs_no_set_epoch():
    head = """
    dist.init_process_group('nccl')
    loader = DataLoader(range(100), sampler=DistributedSampler(range(100)), num_workers=2, pin_memory=True)
    """
    once = head + """
    for batch in loader:
        pass
    """
    again = head + """
    for step in range(3):
        for batch in loader:
            pass
    """
    assert "sampler-without-set-epoch" not in ids(once)
    assert "sampler-without-set-epoch" in ids(again)


def _project(tmp_path, helper: str, body: str):
    project = tmp_path / "project"
    project.mkdir()
    (project / "misc.py").write_text(textwrap.dedent(helper))
    source = HEAD + "import misc\n" + textwrap.dedent(body)
    script = project / "train.py"
    script.write_text(source)
    return [f.id for f in lint_source(source, str(script), path=script, select=set(RULES))]


def test_set_device_in_the_projects_setup_helper_counts(tmp_path):
    helper = """
    import os, torch, torch.distributed as dist
    def init_distributed_mode(args):
        args.gpu = int(os.environ['LOCAL_RANK'])
        torch.cuda.set_device(args.gpu)
        dist.init_process_group('nccl')
    """
    body = """
    def main(args):
        misc.init_distributed_mode(args)
        model = DDP(torch.nn.Linear(4, 4).cuda())
        dist.destroy_process_group()
    """
    assert "ddp-without-device" not in _project(tmp_path, helper, body)


def test_a_destroy_wrapper_nobody_calls_does_not_end_the_group(tmp_path):
    helper = """
    import torch.distributed as dist
    def destroy_process_group():
        dist.destroy_process_group()
    def init_distributed_mode():
        dist.init_process_group('nccl')
    """
    body = """
    misc.init_distributed_mode()
    print('done')
    """
    assert "no-destroy-process-group" in _project(tmp_path, helper, body)
    (tmp_path / "project").rename(tmp_path / "first")
    assert "no-destroy-process-group" not in _project(tmp_path, helper, body + "misc.destroy_process_group()\n")


def test_a_value_set_only_on_rank_zero_guards_its_uses():
    # timm's train.py: output_dir stays None except on the primary process, and the summary is
    # written only `if output_dir is not None`.
    body = """
    dist.init_process_group("nccl")
    output_dir = None
    if dist.get_rank() == 0:
        output_dir = os.path.join("output", "train")
    for epoch in range(3):
        if output_dir is not None:
            with open(os.path.join(output_dir, "summary.csv"), "a") as f:
                f.write("epoch")
    """
    assert "save-on-every-rank" not in ids(body)
    # Given a value on every rank later, it guards nothing.
    assert "save-on-every-rank" in ids(body.replace("    for epoch", "    output_dir = 'out'\n    for epoch"))


def test_ddp_of_a_model_split_over_two_gpus_takes_no_device_ids():
    # Model parallelism inside each DDP process (the DDP tutorial's ToyMpModel, layer-wise splits):
    # DDP must be given no device_ids for a multi-device module.
    body = """
    import torch.nn as nn
    class TwoGPUNet(nn.Module):
        def __init__(self, dev):
            super().__init__()
            self.dev = dev
            self.front = nn.Linear(10, 10).to(dev[0])
            self.back = nn.Linear(10, 5).to(dev[1])
    dist.init_process_group("nccl")
    local = int(os.environ["LOCAL_RANK"])
    model = TwoGPUNet([2 * local, 2 * local + 1])
    model = DDP(model)
    """
    assert "ddp-without-device" not in ids(body)
    # A model on one device, built the same way, still needs its GPU named.
    one = body.replace("self.back = nn.Linear(10, 5).to(dev[1])", "self.back = nn.Linear(10, 5).to(dev[0])")
    assert "ddp-without-device" in ids(one)


def test_a_one_process_group_a_library_needs_is_no_run_to_tear_down():
    # k-diffusion's ensure_distributed(): a group of one process on a HashStore, so that library code
    # calling torch.distributed works in a plain run.
    body = """
    import argparse
    def ensure_distributed():
        if not dist.is_initialized():
            dist.init_process_group(world_size=1, rank=0, store=dist.HashStore())
    ensure_distributed()
    """
    source = HEAD + textwrap.dedent(body)
    assert "no-destroy-process-group" not in [f.id for f in lint_source(source, select=set(RULES))]
    two = source.replace("world_size=1", "world_size=2")
    assert "no-destroy-process-group" in [f.id for f in lint_source(two, select=set(RULES))]


def test_a_flag_set_from_a_rank_check_later_in_the_file_guards_a_function_defined_above():
    # open_lm's shape: save_checkpoint() tests args.save_logs, which main() sets further down from
    # is_master(args); a flag that does not mention the rank guards nothing.
    body = """
    def save_checkpoint(args, model):
        if args.save_logs:
            torch.save(model.state_dict(), "epoch.pt")
        if args.save_every:
            torch.save(model.state_dict(), "every.pt")

    def main(args):
        dist.init_process_group("nccl")
        args.save_logs = args.logs and is_master(args)
        args.save_every = args.logs and args.save_frequency > 0
        save_checkpoint(args, model)

    main(args)
    """
    source = HEAD + textwrap.dedent(body) + END
    every = next(n for n, line in enumerate(source.splitlines(), 1) if '"every.pt"' in line)
    found = [f for f in lint_source(source, select=set(RULES)) if f.id == "save-on-every-rank"]
    # one finding, at the call, naming the unguarded save (the guarded one would be named first)
    assert len(found) == 1 and f"(line {every})" in found[0].title


def test_not_the_flag_the_group_starts_under_or_rank_zero_is_a_guard():
    # A script that starts its process group only `if distributed:` is one process without that flag,
    # so `if not distributed or gpu == 0:` writes once. `not args.multiprocessing_distributed or ...`
    # stays a finding where the group starts under another flag (a torchrun launch goes without it).
    gate = """
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if distributed:
        dist.init_process_group("nccl")
    if not distributed or gpu == 0:
        torch.save(model.state_dict(), "ckpt.pt")
    """
    other = """
    if args.distributed:
        dist.init_process_group("nccl")
    if not args.multiprocessing_distributed or gpu == 0:
        torch.save(model.state_dict(), "ckpt.pt")
    """
    assert "save-on-every-rank" not in ids(gate)
    assert "save-on-every-rank" in ids(other)


def test_a_fault_of_the_linter_is_never_read_as_findings(monkeypatch, tmp_path):
    # A bug of gpurig lint itself (any exception while reading a valid script) ends in one clear line
    # and exit 3, with --json a document that says so: never a traceback with exit 1, which a CI gate
    # would read as "findings".
    from typer.testing import CliRunner

    import gpurig.commands.lint as command
    from gpurig.cli import app

    def broken(*args, **kwargs):
        raise KeyError("get_ckpt_path")

    monkeypatch.setattr(command, "lint_file", broken)
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    plain = CliRunner().invoke(app, ["lint", str(script)])
    assert plain.exit_code == 3 and "bug of gpurig lint" in plain.output and "Traceback" not in plain.output
    as_json = CliRunner().invoke(app, ["lint", "--json", str(script)])
    document = json.loads(as_json.stdout)
    assert as_json.exit_code == 3 and "KeyError" in document["error"] and document["findings"] == []
