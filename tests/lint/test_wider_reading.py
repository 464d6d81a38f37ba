"""Cases where a wider reading of the project must not change the answer: each small project was
written for this test, in the shape of code a reviewer of the linter expected to go wrong."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import RULES, lint_file

CASES = {
    # a class's __init__ calls its own process(), which saves nothing; another class's process() saves: no save
    't5': ('save-on-every-rank', False, {
        'data.py': 'import torch\n\n\nclass RawDataset(torch.utils.data.Dataset):\n    """Preprocessed once by preprocess.py (run on one process)."""\n    def __init__(self, root):\n        self.root = root\n\n    def process(self):\n        torch.save(self.items, "processed.pt")\n\n\nclass CachedDataset(torch.utils.data.Dataset):\n    def __init__(self, root):\n        self.items = []\n        self.process()\n\n    def process(self):\n        self.items = [torch.randn(3) for _ in range(10)]\n\n    def __len__(self):\n        return len(self.items)\n\n    def __getitem__(self, i):\n        return self.items[i]\n',
        'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.utils.data.distributed import DistributedSampler\nfrom data import CachedDataset\n\n\ndef main():\n    dist.init_process_group("nccl")\n    local_rank = int(os.environ["LOCAL_RANK"])\n    torch.cuda.set_device(local_rank)\n    ds = CachedDataset("data")\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
    }),
    # model = Net(); model.train() is nn.Module's train(), not the project's own train() that downloads
    't6': ('download-on-every-rank', False, {
        'helpers.py': 'import torch\nimport torch.nn as nn\nimport torchvision\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(10, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\ndef train(epochs=1):\n    """Single-GPU baseline, run by baseline.py."""\n    ds = torchvision.datasets.CIFAR10("data", download=True)\n    model = Net()\n    for _ in range(epochs):\n        pass\n\n\ndef build_model():\n    model = Net()\n    model.train()\n    return model\n',
        'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom helpers import build_model\n\n\ndef main():\n    dist.init_process_group("nccl")\n    local_rank = int(os.environ["LOCAL_RANK"])\n    torch.cuda.set_device(local_rank)\n    model = DDP(build_model().cuda(), device_ids=[local_rank])\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
    }),
    # the script starts the group itself and never ends it; a helper of another entry point that starts and ends one does not end the script's
    't7': ('no-destroy-process-group', True, {
        'dist_utils.py': 'import torch.distributed as dist\n\n\ndef run_worker(fn, rank, world_size):\n    """Used by eval.py."""\n    dist.init_process_group("nccl", rank=rank, world_size=world_size)\n    fn()\n    dist.destroy_process_group()\n\n\ndef is_main():\n    return dist.get_rank() == 0\n',
        'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom dist_utils import is_main\n\n\ndef main():\n    dist.init_process_group("nccl")\n    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n    if is_main():\n        print("hello")\n\n\nif __name__ == "__main__":\n    main()\n',
    }),
    # try: from_pretrained(name, local_files_only=True) / except OSError: from_pretrained(name): the fallback downloads on every rank
    't8': ('download-on-every-rank', True, {
        'train.py': 'import argparse\nimport torch\nimport torch.distributed as dist\nfrom transformers import AutoModel\n\nparser = argparse.ArgumentParser()\nparser.add_argument("--model_name", default="bert-base-uncased")\nargs = parser.parse_args()\n\n\ndef main():\n    dist.init_process_group("nccl")\n    try:\n        model = AutoModel.from_pretrained(args.model_name, local_files_only=True)\n    except OSError:\n        model = AutoModel.from_pretrained(args.model_name)\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
    }),
    # a method given the port by its caller (self._init_dist(rank, world_size, port)) does not use its default
    't9': ('hard-coded-rendezvous', False, {
        'engine.py': 'import os\nimport torch.distributed as dist\n\n\nclass Engine:\n    def _init_dist(self, rank, world_size, port=12355):\n        os.environ["MASTER_ADDR"] = "localhost"\n        os.environ["MASTER_PORT"] = str(port)\n        dist.init_process_group("nccl", rank=rank, world_size=world_size)\n\n    def run(self, rank, world_size, port):\n        self._init_dist(rank, world_size, port)\n        dist.destroy_process_group()\n',
        'train.py': 'import argparse\nimport torch.multiprocessing as mp\nfrom engine import Engine\n\n\ndef worker(rank, world_size, port):\n    Engine().run(rank, world_size, port)\n\n\nif __name__ == "__main__":\n    p = argparse.ArgumentParser()\n    p.add_argument("--port", type=int, required=True)\n    args = p.parse_args()\n    mp.spawn(worker, args=(2, args.port), nprocs=2)\n',
    }),
    # MASTER_PORT from the script's own required --port: another module's parser default for a --port of a viewer is not it
    't10': ('hard-coded-rendezvous', False, {
        'train.py': 'import argparse\nimport os\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\nfrom utils import count_params\n\n\ndef worker(rank, args):\n    os.environ["MASTER_ADDR"] = "localhost"\n    os.environ["MASTER_PORT"] = str(args.port)\n    dist.init_process_group("nccl", rank=rank, world_size=2)\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    p = argparse.ArgumentParser()\n    p.add_argument("--port", type=int, required=True)\n    args = p.parse_args()\n    mp.spawn(worker, args=(args,), nprocs=2)\n',
        'utils.py': 'import argparse\n\n\ndef serve_args():\n    """Options of the results viewer (viewer.py)."""\n    p = argparse.ArgumentParser()\n    p.add_argument("--port", type=int, default=6006)\n    return p.parse_args()\n\n\ndef count_params(model):\n    return sum(p.numel() for p in model.parameters())\n',
    }),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_project_is_read_without_borrowing_another_functions_behaviour(case, tmp_path):
    rule, present, files = CASES[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    script = next(name for name in files if name.startswith("train"))
    rules = {f.id for f in lint_file(str(tmp_path / script), select=set(RULES))}
    assert (rule in rules) is present, rules


def test_what_a_helper_does_is_said_in_bounded_words(tmp_path):
    # 22 "diamonds" (f_i calls g_i and h_i, both call f_{i+1}), the last one downloading: the
    # finding names the chain without doubling its text at every level.
    lines = ["from torchvision.datasets import MNIST"]
    for i in range(22):
        lines += [f"def f{i}():", f"    g{i}()", f"    h{i}()", f"def g{i}():", f"    f{i + 1}()", f"def h{i}():", f"    f{i + 1}()"]
    lines += ["def f22():", "    MNIST('data', download=True)"]
    (tmp_path / "helpers.py").write_text("\n".join(lines) + "\n")
    (tmp_path / "train.py").write_text("import torch.distributed as dist\nfrom helpers import f0\n"
                                       "dist.init_process_group('nccl')\nf0()\ndist.destroy_process_group()\n")
    [finding] = [f for f in lint_file(str(tmp_path / "train.py"), select={"download-on-every-rank"})]
    assert finding.line == 4 and len(finding.title) < 3000


def test_a_method_called_on_self_is_that_classs_not_another_of_the_same_name(tmp_path):
    # A segmentation model's shape: Resnet.init_weight() loads pretrained weights; ConvBNReLU has an
    # init_weight() of its own that only initialises its layers. Building ConvBNReLU downloads nothing;
    # a subclass's override reached from its base's __init__ (self._build() in the base) is followed.
    (tmp_path / "model.py").write_text(
        "import torch.utils.model_zoo as modelzoo\n"
        "class Resnet:\n"
        "    def __init__(self):\n"
        "        self.init_weight()\n"
        "    def init_weight(self):\n"
        "        self.state = modelzoo.load_url('https://example.org/resnet18.pth')\n"
        "class ConvBNReLU:\n"
        "    def __init__(self):\n"
        "        self.init_weight()\n"
        "    def init_weight(self):\n"
        "        self.w = 0\n"
        "class Base:\n"
        "    def __init__(self):\n"
        "        self.model = self._build()\n"
        "    def _build(self):\n"
        "        raise NotImplementedError\n"
        "class Exp(Base):\n"
        "    def _build(self):\n"
        "        return Resnet()\n")
    head = "import torch.distributed as dist\nfrom model import ConvBNReLU, Exp\ndist.init_process_group('nccl')\n"
    (tmp_path / "train.py").write_text(head + "block = ConvBNReLU()\ndist.destroy_process_group()\n")
    assert lint_file(str(tmp_path / "train.py"), select={"download-on-every-rank"}) == []
    (tmp_path / "train.py").write_text(head + "exp = Exp()\ndist.destroy_process_group()\n")
    assert [f.line for f in lint_file(str(tmp_path / "train.py"), select={"download-on-every-rank"})] == [4]
