"""`gpurig lint` on branches that only one process takes, and on what rank 0 fetched before a
barrier. Small scripts written for each pattern (met in real repositories while growing the corpus)."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import RULES, lint_file, lint_source

HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter
"""


def found(body: str) -> list[tuple[str, int]]:
    source = HEAD + textwrap.dedent(body)
    return [(f.id, f.line) for f in lint_source(source, "<script>", select=set(RULES))]


def test_rank_zero_fetches_then_a_barrier_then_everyone_builds_with_pretrained_weights():
    body = """
    from nets import YoloBody, download_weights
    dist.init_process_group("nccl")
    if pretrained:
        if distributed:
            if local_rank == 0:
                download_weights(phi)
            dist.barrier()
        else:
            download_weights(phi)
    model = YoloBody(num_classes, pretrained=pretrained)
    dist.destroy_process_group()
    """
    assert [r for r in found(body) if r[0] == "download-on-every-rank"] == []
    # Rank 0 printing something before the barrier fetches nothing: the build still downloads everywhere.
    body = """
    from nets import YoloBody
    dist.init_process_group("nccl")
    if dist.get_rank() == 0:
        print("building")
    dist.barrier()
    model = YoloBody(num_classes, pretrained=True)
    dist.destroy_process_group()
    """
    assert ("download-on-every-rank", 10) in found(body)


def test_the_branch_a_run_without_the_distributed_flag_takes_is_one_process():
    body = """
    dist.init_process_group("nccl")
    if args.distributed:
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "last.pt")
    else:
        torch.save(model.state_dict(), "last.pt")
    if not args.distributed:
        torch.save(model.state_dict(), "final.pt")
    torch.save(model.state_dict(), "every.pt")
    dist.destroy_process_group()
    """
    assert [r for r in found(body) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 13)]


def test_a_summary_writer_per_rank_is_no_shared_file():
    body = """
    dist.init_process_group("nccl")
    writer = SummaryWriter("runs/exp")
    torch.save(model.state_dict(), "runs/exp/model.pt")
    dist.destroy_process_group()
    """
    assert [r for r in found(body) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 7)]


def test_a_helper_that_loads_without_map_location_only_when_no_group_is_running(tmp_path):
    (tmp_path / "weights.py").write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist
        def load_pretrained(net, fname):
            if dist.is_initialized():
                state = torch.load(fname, map_location=torch.device("cuda", dist.get_rank()))
            else:
                state = torch.load(fname)
            net.load_state_dict(state)
        def load_any(net, fname):
            net.load_state_dict(torch.load(fname))
        """))
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent("""
        from weights import load_pretrained, load_any
        dist.init_process_group("nccl")
        load_pretrained(net, args.weights)
        load_any(net, args.weights)
        dist.destroy_process_group()
        """))
    got = [(f.id, f.line) for f in lint_file(str(script), select=set(RULES))]
    assert [r for r in got if r[0] == "torch-load-without-map-location"] == [("torch-load-without-map-location", 8)]


def test_the_branch_of_a_dist_train_setting_that_is_off_is_one_process():
    body = """
    dist.init_process_group("nccl")
    if cfg.MODEL.DIST_TRAIN:
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "model.pth")
    else:
        torch.save(model.state_dict(), "model.pth")
    dist.destroy_process_group()
    """
    assert [r for r in found(body) if r[0] == "save-on-every-rank"] == []


def test_a_parameter_named_rank_that_every_call_gives_the_local_rank():
    body = """
    import os
    from torch.nn.parallel import DistributedDataParallel as DDP
    def train(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(2, 2).cuda(rank), device_ids=[rank])
        dist.destroy_process_group()
    local_rank = int(os.environ["LOCAL_RANK"])
    train(local_rank, int(os.environ["WORLD_SIZE"]))
    """
    assert [r for r in found(body) if r[0] == "global-rank-as-device"] == []
    # Given the global rank at one of its calls, the same lines are the mistake.
    body = body.replace('train(local_rank, int(os.environ["WORLD_SIZE"]))',
                        'train(local_rank, 2)\n    train(int(os.environ["RANK"]), 2)')
    assert {r for r, _ in found(body)} >= {"global-rank-as-device"}


def test_a_fixed_address_only_where_the_launcher_set_nothing_is_a_fallback():
    body = """
    import os
    try:
        rank = int(os.environ["RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
        dist.init_process_group("nccl")
    except KeyError:
        rank, world_size = 0, 1
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:12584", rank=rank, world_size=world_size)
    dist.destroy_process_group()
    """
    assert [r for r in found(body) if r[0] == "hard-coded-rendezvous"] == []
    body = """
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:12584", rank=0, world_size=2)
    dist.destroy_process_group()
    """
    assert [r for r in found(body) if r[0] == "hard-coded-rendezvous"] == [("hard-coded-rendezvous", 5)]


def test_data_parallel_over_one_listed_gpu_and_a_pretrained_switch_the_script_keeps_off():
    body = """
    import torchvision
    dist.init_process_group("nccl")
    one = torch.nn.DataParallel(model, device_ids=[local_rank])
    many = torch.nn.DataParallel(model, device_ids=[0, 1])
    pretrained = False
    net = torchvision.models.resnet50(pretrained=pretrained)
    dist.destroy_process_group()
    """
    got = found(body)
    assert [r for r in got if r[0] == "data-parallel"] == [("data-parallel", 8)]
    assert [r for r in got if r[0] == "download-on-every-rank"] == []
    assert ("download-on-every-rank", 10) in found(body.replace("pretrained = False", "pretrained = True"))


def test_horovods_rank_and_a_list_of_the_global_rank_are_not_gpu_indices():
    body = """
    import horovod.torch as hvd
    hvd.init()
    torch.cuda.set_device(hvd.rank())
    torch.cuda.set_device(hvd.local_rank())
    """
    assert [r for r in found(body) if r[0] == "global-rank-as-device"] == [("global-rank-as-device", 7)]
    body = """
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("nccl")
    device_ids = [dist.get_rank()]
    model = DDP(model, device_ids=device_ids)
    dist.destroy_process_group()
    """
    assert ("global-rank-as-device", 8) in found(body)


def test_what_a_class_of_the_script_does_when_it_is_built_and_ddps_positional_device_ids():
    body = """
    from datasets import load_dataset
    from torch.nn.parallel import DistributedDataParallel
    class Trainer:
        def __init__(self, name):
            self.data = load_dataset(name, split="train")
    def main():
        dist.init_process_group("nccl")
        trainer = Trainer("imdb")
        model = DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), [local_rank])
        dist.destroy_process_group()
    main()
    """
    got = found(body)
    assert ("download-on-every-rank", 9) in got
    assert [r for r in got if r[0] == "ddp-without-device"] == []
