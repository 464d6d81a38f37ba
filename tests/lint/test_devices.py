"""global-rank-as-device in the shapes real scripts make the global rank a GPU index: a rank summed
from the node's number in a spawned worker, a device variable, a keyword or conditional device, an
alias, and Accelerate's process_index in a Hugging Face device_map. Each script is written for the
test; quiet where the script uses the rank within the node."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_source


def found(source: str) -> list[tuple[str, int]]:
    return [(f.id, f.line) for f in lint_source(textwrap.dedent(source), "<script>") if f.id == "global-rank-as-device"]


def related(source: str) -> list[list[str]]:
    return [f.related for f in lint_source(textwrap.dedent(source), "<script>") if f.id == "global-rank-as-device"]


SPAWNED = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def main_worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
    args.rank = args.node_rank * ngpus_per_node + gpu
    dist.init_process_group("nccl", init_method="env://", world_size=args.world_size, rank=args.rank)
    torch.cuda.set_device(args.gpu)
    for images in []:
        images = images.cuda(args.rank, non_blocking=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(main_worker, nprocs=8, args=(8, None))
"""


def test_a_rank_summed_from_the_node_number_is_global_in_a_spawned_worker():
    assert found(SPAWNED) == [("global-rank-as-device", 11)]
    assert found(SPAWNED.replace("images.cuda(args.rank", "images.cuda(args.gpu")) == []


TORCHRUN = """\
import os
import torch
import torch.distributed as dist

def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    rank = dist.get_rank()
    device = torch.device(f"cuda:{rank}")
    model = torch.nn.Linear(2, 2).to(device)
    head = torch.nn.Linear(2, 2).to(dtype=torch.bfloat16, device="cpu" if os.environ.get("OFFLOAD") else rank)
    dist.destroy_process_group()

main()
"""


def test_a_device_variable_a_keyword_device_and_a_conditional_one():
    # the device is reported where it is made (line 10), not at each use; the keyword device of line
    # 12 is the same mistake, named there
    assert found(TORCHRUN) == [("global-rank-as-device", 10)]
    assert related(TORCHRUN) == [["<stdin>:12"]]
    local = TORCHRUN.replace('f"cuda:{rank}"', 'f"cuda:{local_rank}"').replace("else rank)", "else local_rank)")
    assert found(local) == []


def test_an_alias_of_the_global_rank_handed_to_ddp():
    source = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(args):
        dist.init_process_group("nccl")
        device_ids = [dist.get_rank()]
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        args.device_ids = device_ids
        model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=args.device_ids)
        dist.destroy_process_group()
    """
    assert found(source) == [("global-rank-as-device", 11)]
    assert found(source.replace("[dist.get_rank()]", '[int(os.environ["LOCAL_RANK"])]')) == []


def test_accelerates_process_index_in_a_device_map():
    source = """\
    from accelerate import Accelerator, PartialState
    from transformers import AutoModelForCausalLM

    device_string = PartialState().process_index
    model = AutoModelForCausalLM.from_pretrained("./checkpoint", device_map={"": device_string})
    accelerator = Accelerator()
    device_map = {"": accelerator.process_index}
    ref = AutoModelForCausalLM.from_pretrained("./checkpoint", device_map=device_map)
    """
    # (the same use twice, a device_map of each model: one finding at the first, naming the second)
    assert found(source) == [("global-rank-as-device", 5)] and related(source) == [["<stdin>:7"]]
    assert found(source.replace("process_index", "local_process_index")) == []


def test_a_read_of_the_global_rank_used_directly_as_the_device():
    source = """\
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method="env://")
    torch.cuda.set_device(dist.get_rank())
    x = torch.zeros(1).cuda(dist.get_rank())
    dist.destroy_process_group()
    """
    assert found(source) == [("global-rank-as-device", 5)] and related(source) == [["<stdin>:6"]]


def test_a_project_helper_that_wraps_ddp_on_the_global_rank_reached_through_a_class(tmp_path):
    from gpurig.diagnose.lint import lint_file

    (tmp_path / "ops.py").write_text(textwrap.dedent("""\
        import torch
        import torch.distributed as dist

        def convert_to_ddp(*modules):
            rank = dist.get_rank()
            return [torch.nn.parallel.DistributedDataParallel(m.cuda(), device_ids=[rank]) for m in modules]
        """))
    (tmp_path / "task.py").write_text(textwrap.dedent("""\
        from ops import convert_to_ddp

        class Task:
            def __init__(self, opt):
                self.set_model()

            def set_model(self):
                self.net, = convert_to_ddp(None)
        """))
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent("""\
        import os
        import torch
        import torch.distributed as dist
        from task import Task

        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        task = Task(None)
        dist.destroy_process_group()
        """))
    [finding] = [f for f in lint_file(script) if f.id == "global-rank-as-device"]
    # (it names each step of the chain: Task.__init__ -> set_model() -> convert_to_ddp())
    assert finding.line == 8 and finding.related == ["task.py:5", "task.py:8", "ops.py:6"]


def test_get_rank_of_a_group_numbered_by_the_local_rank_is_a_gpu_of_this_machine():
    source = """\
    import os
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl", rank=local_rank, world_size=8)
    torch.cuda.set_device(dist.get_rank())
    x = torch.zeros(1).cuda(dist.get_rank())
    dist.destroy_process_group()
    """
    assert found(source) == []


FSDP_ON_RANK = """\
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def main():
    dist.init_process_group("nccl")
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    model = FSDP(torch.nn.Linear(2, 2).to(rank), device_id=rank)
    for x, y in []:
        x, y = x.to(rank), y.to(rank)
    dist.destroy_process_group()

main()
"""


def test_fsdp_on_the_global_rank_and_its_uses_are_one_finding_that_names_them():
    # set_device(rank) is the first place; FSDP's device_id= is a place of its own (the model's
    # shards go there); the .to(rank) of each batch is the same mistake, named at the first
    assert found(FSDP_ON_RANK) == [("global-rank-as-device", 9), ("global-rank-as-device", 10)]
    assert related(FSDP_ON_RANK)[0] == ["<stdin>:12"]
    local = FSDP_ON_RANK.replace('os.environ["RANK"]', 'os.environ["LOCAL_RANK"]')
    assert found(local) == []



CONFIG_RANK = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from utils import select_device

def train(config):
    device = select_device(f"cuda:{config.rank}")
    model = DDP(torch.nn.Linear(2, 2).to(device), device_ids=[config.rank])
    dist.destroy_process_group()

if __name__ == "__main__":
    CFG = object()
    CFG.rank = int(os.environ["RANK"])
    dist.init_process_group("nccl")
    train(CFG)
"""


def test_the_global_rank_handed_on_in_a_config_object():
    # SegFormer-DDP's shape: CFG.rank holds RANK; train(config) makes config.rank a device through a
    # device helper of the project, and DDP's device_ids
    assert found(CONFIG_RANK) == [("global-rank-as-device", 8), ("global-rank-as-device", 9)]
    assert found(CONFIG_RANK.replace('os.environ["RANK"]', 'os.environ["LOCAL_RANK"]')) == []


def test_a_device_made_of_the_global_rank_beside_a_cpu_or_npu_branch():
    # (Ascend's `npu:{rank}` or the CPU in the other branch does not hide the CUDA device)
    for other in ('torch.device(f"npu:{rank}")', 'torch.device("cpu")'):
        assert found(f"""\
            import os
            import torch
            import torch.distributed as dist

            def train(rank, world_size):
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
                if torch.cuda.is_available():
                    device = torch.device(f"cuda:{{rank}}")
                else:
                    device = {other}
                model = torch.nn.Linear(2, 2).to(device)
                dist.destroy_process_group()

            train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
            """) == [("global-rank-as-device", 8)], other


def test_the_global_rank_handed_to_a_project_class_that_makes_it_its_gpu(tmp_path):
    """VoiceCraft's and STCN's shape: `Trainer(args, world_size, rank)` with rank = dist.get_rank(),
    where the project's Trainer keeps it (`self.world_size, self.rank = world_size, rank`) and builds
    `torch.device(f"cuda:{rank}")` and `DDP(..., device_ids=[self.rank])`. One finding, at the first
    call, naming those places; the local rank handed to it is right."""
    from gpurig.diagnose.lint import lint_file

    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "__init__.py").write_text("")
    (tmp_path / "steps" / "trainer.py").write_text(textwrap.dedent("""\
        import torch

        class Trainer:
            def __init__(self, args, world_size, rank):
                self.world_size, self.rank = world_size, rank
                self.device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
                self.model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to(self.device),
                                                                       device_ids=[self.rank])

            def load(self, path):
                return torch.load(path, map_location='cuda:%d' % self.rank)
        """))
    script = tmp_path / "main.py"
    body = textwrap.dedent("""\
        import os
        import torch.distributed as dist
        from steps import trainer

        dist.init_process_group(backend="nccl", init_method="env://")
        rank = RANK
        my_trainer = trainer.Trainer(None, dist.get_world_size(), rank)
        again = trainer.Trainer(None, dist.get_world_size(), rank=rank)
        dist.destroy_process_group()
        """)
    script.write_text(body.replace("RANK", "dist.get_rank()"))
    found_ = [(f.line, f.related) for f in lint_file(str(script)) if f.id == "global-rank-as-device"]
    assert found_ == [(7, ["steps/trainer.py:6", "steps/trainer.py:7", "steps/trainer.py:11"])]
    script.write_text(body.replace("RANK", 'int(os.environ["LOCAL_RANK"])'))
    assert [f for f in lint_file(str(script)) if f.id == "global-rank-as-device"] == []


LOCATION = """\
import os
import torch
import torch.distributed as dist

def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to(device_id), device_ids=[device_id])
    {load}
    dist.destroy_process_group()

main()
"""


def test_a_checkpoint_mapped_onto_the_gpu_of_the_global_rank():
    # The DDP tutorial's map_location, kept where the rank is the global one (torchrun): on a second
    # node 'cuda:8' does not exist. In a variable, inline, or as one device string.
    in_variable = "location = {'cuda:%d' % 0: 'cuda:%d' % rank}\n    model.load_state_dict(torch.load('ck.pt', map_location=location))"
    assert found(LOCATION.format(load=in_variable)) == [("global-rank-as-device", 10)]
    inline = "model.load_state_dict(torch.load('ck.pt', map_location={'cuda:0': f'cuda:{rank}'}))"
    assert found(LOCATION.format(load=inline)) == [("global-rank-as-device", 10)]
    as_string = "model.load_state_dict(torch.load('ck.pt', map_location=f'cuda:{rank}'))"
    assert found(LOCATION.format(load=as_string)) == [("global-rank-as-device", 10)]
    # This process's own GPU is right.
    local = "model.load_state_dict(torch.load('ck.pt', map_location={'cuda:0': f'cuda:{device_id}'}))"
    assert found(LOCATION.format(load=local)) == []


def test_the_tutorials_map_location_in_a_spawned_worker_is_the_local_gpu():
    source = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def demo_checkpoint(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to(rank), device_ids=[rank])
    map_location = {'cuda:%d' % 0: 'cuda:%d' % rank}
    model.load_state_dict(torch.load("ck.pt", map_location=map_location))
    dist.destroy_process_group()

mp.spawn(demo_checkpoint, args=(2,), nprocs=2)
"""
    assert found(source) == []
