"""Cases a review of the sixteenth and seventeenth rounds' readings wrote to make them misfire: a
launcher switch or an "am I launched" function taken for a rank check, rank 0 "going first" with no
fetch of its own, a switch the caller passes, a Slurm set-up taken for a fallback, and more. Each is
a small project in the shape of a pattern of public training code; each once hid a real mistake or
made a false one, and the expected findings are what a careful reader says."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import lint_file

CASES = {
    'c1_ddp_bool': (
        'a launcher switch (`ddp = True` where LOCAL_RANK is set) is no rank flag',
        {
            'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\nddp = False\nlocal_rank = 0\nif "LOCAL_RANK" in os.environ:\n    ddp = True\n    local_rank = int(os.environ["LOCAL_RANK"])\n    dist.init_process_group("nccl")\n    torch.cuda.set_device(local_rank)\n\nmodel = torch.nn.Linear(10, 10).cuda(local_rank)\nif ddp:\n    model = DDP(model, device_ids=[local_rank])\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n\nfor epoch in range(10):\n    x = torch.randn(32, 10).cuda(local_rank)\n    loss = model(x).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n    if ddp:\n        torch.save(model.module.state_dict(), f"ckpt_{epoch}.pt")\n    else:\n        torch.save(model.state_dict(), f"ckpt_{epoch}.pt")\n\nif ddp:\n    dist.destroy_process_group()\n',
        },
        [('save-on-every-rank', 26)],
    ),
    'c2_localrank_bool': (
        '`args.distributed = True` under `args.local_rank != -1` is no rank flag',
        {
            'train.py': 'import argparse\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom torch.utils.data import DataLoader, DistributedSampler\nfrom torchvision import datasets, transforms\n\nparser = argparse.ArgumentParser()\nparser.add_argument("--local_rank", type=int, default=-1)\nargs = parser.parse_args()\n\nargs.distributed = False\nif args.local_rank != -1:\n    torch.cuda.set_device(args.local_rank)\n    dist.init_process_group(backend="nccl")\n    args.distributed = True\n\ntrain_set = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())\nsampler = DistributedSampler(train_set) if args.distributed else None\nloader = DataLoader(train_set, batch_size=64, sampler=sampler)\nmodel = torch.nn.Linear(784, 10).cuda()\nif args.distributed:\n    model = DDP(model, device_ids=[args.local_rank])\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor epoch in range(3):\n    if args.distributed:\n        sampler.set_epoch(epoch)\n    for x, y in loader:\n        loss = torch.nn.functional.cross_entropy(model(x.view(-1, 784).cuda()), y.cuda())\n        opt.zero_grad(); loss.backward(); opt.step()\n    torch.save(model.state_dict(), "model.pt")\nif args.distributed:\n    dist.destroy_process_group()\n',
        },
        [('download-on-every-rank', 18), ('save-on-every-rank', 31)],
    ),
    'c3_is_dist_fn': (
        'a function telling a launched run from a plain one (`return "LOCAL_RANK" in os.environ`) is no rank check',
        {
            'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom torchvision import datasets, transforms\n\n\ndef is_dist() -> bool:\n    return "LOCAL_RANK" in os.environ\n\n\ndef main():\n    local_rank = int(os.environ.get("LOCAL_RANK", 0))\n    if is_dist():\n        dist.init_process_group("nccl")\n        torch.cuda.set_device(local_rank)\n        train_set = datasets.CIFAR100("./data", train=True, download=True, transform=transforms.ToTensor())\n    else:\n        train_set = datasets.CIFAR100("./data", train=True, download=True, transform=transforms.ToTensor())\n    model = torch.nn.Linear(10, 10).cuda(local_rank)\n    if is_dist():\n        model = DDP(model, device_ids=[local_rank])\n    for epoch in range(3):\n        if is_dist():\n            torch.save(model.module.state_dict(), "last.pt")\n        else:\n            torch.save(model.state_dict(), "last.pt")\n    if is_dist():\n        dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('download-on-every-rank', 17), ('save-on-every-rank', 25)],
    ),
    'c3b_module_fn': (
        "the same function in the project's module",
        {
            'dist_utils.py': 'import os\nimport torch\nimport torch.distributed as dist\n\n\ndef in_torchrun() -> bool:\n    """True iff this process was launched with torchrun (has distributed env)."""\n    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ\n\n\ndef setup():\n    if in_torchrun():\n        dist.init_process_group("nccl")\n        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n',
            'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom dist_utils import in_torchrun, setup\n\n\ndef main():\n    setup()\n    local_rank = int(os.environ.get("LOCAL_RANK", 0))\n    model = torch.nn.Linear(10, 10).cuda()\n    if in_torchrun():\n        model = DDP(model, device_ids=[local_rank])\n    for epoch in range(3):\n        if in_torchrun():\n            torch.save(model.module.state_dict(), "last.pt")\n        else:\n            torch.save(model.state_dict(), "last.pt")\n    if in_torchrun():\n        dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('save-on-every-rank', 16)],
    ),
    'c4_zero_first_any_if': (
        'rank 0 making a folder before a barrier does not let it fetch first',
        {
            'data.py': 'import os\nimport torch.distributed as dist\nfrom torchvision import datasets, transforms\n\n\ndef build_datasets(args):\n    if dist.get_rank() == 0:\n        os.makedirs(args.data_dir, exist_ok=True)\n    dist.barrier()\n    train = datasets.CIFAR10(args.data_dir, train=True, download=True, transform=transforms.ToTensor())\n    val = datasets.CIFAR10(args.data_dir, train=False, download=True, transform=transforms.ToTensor())\n    return train, val\n',
            'train.py': 'import argparse\nimport os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom torch.utils.data import DataLoader, DistributedSampler\nfrom data import build_datasets\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n    parser.add_argument("--data_dir", default="./data")\n    args = parser.parse_args()\n    local_rank = int(os.environ["LOCAL_RANK"])\n    torch.cuda.set_device(local_rank)\n    dist.init_process_group("nccl")\n    train_set, val_set = build_datasets(args)\n    sampler = DistributedSampler(train_set)\n    loader = DataLoader(train_set, batch_size=64, sampler=sampler)\n    model = DDP(torch.nn.Linear(3072, 10).cuda(), device_ids=[local_rank])\n    for epoch in range(3):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            pass\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('download-on-every-rank', 17)],
    ),
    'c5_switch_passed': (
        'a switch defaulting to True that the script passes as False',
        {
            'losses.py': 'import torch\nimport torch.nn as nn\nfrom torchvision import models\n\n\nclass PerceptualLoss(nn.Module):\n    def __init__(self, local_weights=True, path="weights/vgg16.pth"):\n        super().__init__()\n        if local_weights:\n            vgg = models.vgg16()\n            vgg.load_state_dict(torch.load(path, map_location="cpu"))\n        else:\n            vgg = models.vgg16(pretrained=True)\n        self.features = vgg.features[:16].eval()\n\n    def forward(self, x, y):\n        return nn.functional.l1_loss(self.features(x), self.features(y))\n',
            'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom losses import PerceptualLoss\n\n\ndef main():\n    local_rank = int(os.environ["LOCAL_RANK"])\n    torch.cuda.set_device(local_rank)\n    dist.init_process_group("nccl")\n    model = DDP(torch.nn.Conv2d(3, 3, 3, padding=1).cuda(), device_ids=[local_rank])\n    criterion = PerceptualLoss(local_weights=False).cuda()\n    opt = torch.optim.Adam(model.parameters())\n    for step in range(100):\n        x = torch.randn(4, 3, 64, 64).cuda()\n        loss = criterion(model(x), x)\n        opt.zero_grad(); loss.backward(); opt.step()\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('download-on-every-rank', 13)],
    ),
    'c6_slurm_fallback': (
        'a Slurm set-up reached where RANK is unset is no fallback: srun launched it',
        {
            'train.py': 'import argparse\nimport os\nimport subprocess\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\ndef setup_slurm(args):\n    args.rank = int(os.environ["SLURM_PROCID"])\n    args.world_size = int(os.environ["SLURM_NTASKS"])\n    args.gpu = args.rank % torch.cuda.device_count()\n    node_list = os.environ["SLURM_NODELIST"]\n    addr = subprocess.getoutput(f"scontrol show hostname {node_list} | head -n1")\n    os.environ["MASTER_ADDR"] = addr\n    os.environ["MASTER_PORT"] = "29500"\n    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n    args = parser.parse_args()\n    if "RANK" in os.environ:\n        args.rank = int(os.environ["RANK"])\n        args.gpu = int(os.environ["LOCAL_RANK"])\n        dist.init_process_group("nccl")\n    elif "SLURM_PROCID" in os.environ:\n        setup_slurm(args)\n    else:\n        raise SystemExit("launch with torchrun or srun")\n    torch.cuda.set_device(args.gpu)\n    model = DDP(torch.nn.Linear(10, 10).cuda(), device_ids=[args.gpu])\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('hard-coded-rendezvous', 16)],
    ),
    'c7b_ds_literal_none': (
        'TrainingArguments(deepspeed=None) is one process',
        {
            'train.py': 'import argparse\nfrom datasets import load_dataset\nfrom transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments\n\nparser = argparse.ArgumentParser()\nparser.add_argument("--deepspeed", default=None, help="path to a DeepSpeed config (optional)")\nargs = parser.parse_args()\n\ntok = AutoTokenizer.from_pretrained("bert-base-uncased")\nmodel = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=2)\nds = load_dataset("imdb")\nds = ds.map(lambda b: tok(b["text"], truncation=True), batched=True)\ntraining_args = TrainingArguments(output_dir="out", per_device_train_batch_size=16, deepspeed=None)\ntrainer = Trainer(model=model, args=training_args, train_dataset=ds["train"], tokenizer=tok)\ntrainer.train()\ntrainer.save_model("out/final")\n',
        },
        [],
    ),
    'c9_accel_hook_ds': (
        'a save_state hook run on every rank under `is_main_process or ... DEEPSPEED`',
        {
            'train.py': 'import os\nimport torch\nfrom accelerate import Accelerator\nfrom accelerate.utils import DistributedType\nfrom diffusers import UNet2DConditionModel\n\n\ndef main():\n    accelerator = Accelerator()\n    unet = UNet2DConditionModel(sample_size=32)\n\n    def save_model_hook(models, weights, output_dir):\n        for model in models:\n            model.save_pretrained(os.path.join(output_dir, "unet"))\n            weights.pop()\n\n    accelerator.register_save_state_pre_hook(save_model_hook)\n    opt = torch.optim.AdamW(unet.parameters())\n    unet, opt = accelerator.prepare(unet, opt)\n    for step in range(1000):\n        if step % 500 == 0:\n            if accelerator.is_main_process or accelerator.distributed_type == DistributedType.DEEPSPEED:\n                accelerator.save_state(os.path.join("out", f"checkpoint-{step}"))\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('save-on-every-rank', 14)],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_review_case(tmp_path, case):
    why, files, expected = CASES[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = sorted((f.id, f.line) for f in lint_file(str(tmp_path / "train.py")))  # the rules on by default
    assert found == expected, why
