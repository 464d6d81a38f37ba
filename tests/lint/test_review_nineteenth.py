"""Cases a review of the nineteenth round's readings wrote to make them misfire: a method's port
parameter counted with `self`, a Lightning trainer built elsewhere, a helper's guarded torch.save, a
port the launcher sets first, a Paddle subclass. Each is a small project in the shape of public
training code; the expected findings are what a careful reader says."""

from __future__ import annotations

import pytest

from gpurig.diagnose.lint import lint_file

CASES = {
    'n1_method_port': (
        'a method given `self._init_dist(args.port, 1800)`: the port is the first argument after self, not the timeout',
        {
            'train.py': 'import os\nimport argparse\nfrom datetime import timedelta\nimport torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\nclass Trainer:\n    def __init__(self, rank, world, args):\n        self.rank, self.world, self.args = rank, world, args\n        self._init_dist(args.port, 1800)\n        torch.cuda.set_device(rank)\n        self.model = DDP(torch.nn.Linear(10, 10).cuda(), device_ids=[rank])\n\n    def _init_dist(self, port, timeout_s):\n        os.environ["MASTER_ADDR"] = "localhost"\n        os.environ["MASTER_PORT"] = str(port)\n        dist.init_process_group("nccl", rank=self.rank, world_size=self.world,\n                                timeout=timedelta(seconds=timeout_s))\n\n\ndef worker(rank, world, args):\n    Trainer(rank, world, args)\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    p = argparse.ArgumentParser()\n    p.add_argument("--port", type=int, default=None)\n    args = p.parse_args()\n    world = torch.cuda.device_count()\n    mp.spawn(worker, args=(world, args), nprocs=world)\n',
        },
        [],
    ),
    'n2_method_literal': (
        'a method given a literal port (`self.init_dist(12355)`) is fixed',
        {
            'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\nclass DistTrainer:\n    def __init__(self, rank, world):\n        self.rank, self.world = rank, world\n        self.init_dist(12355)\n        torch.cuda.set_device(rank)\n        self.model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[rank])\n\n    def init_dist(self, port):\n        os.environ["MASTER_ADDR"] = "127.0.0.1"\n        os.environ["MASTER_PORT"] = str(port)\n        dist.init_process_group("nccl", rank=self.rank, world_size=self.world)\n\n\ndef run(rank, world):\n    DistTrainer(rank, world)\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    n = torch.cuda.device_count()\n    mp.spawn(run, args=(n,), nprocs=n)\n',
        },
        [('hard-coded-rendezvous', 17)],
    ),
    'n3_process_args': (
        "`Process(target=init_process, args=(rank, size, 29500, run))`: the port given in the process's args",
        {
            'train.py': 'import os\nimport torch\nimport torch.distributed as dist\nfrom torch.multiprocessing import Process\n\n\ndef run(rank, size):\n    t = torch.ones(1)\n    dist.all_reduce(t)\n\n\ndef init_process(rank, size, port, fn, backend="gloo"):\n    os.environ["MASTER_ADDR"] = "127.0.0.1"\n    os.environ["MASTER_PORT"] = str(port)\n    dist.init_process_group(backend, rank=rank, world_size=size)\n    fn(rank, size)\n\n\nif __name__ == "__main__":\n    size = 2\n    processes = []\n    for rank in range(size):\n        p = Process(target=init_process, args=(rank, size, 29500, run))\n        p.start()\n        processes.append(p)\n    for p in processes:\n        p.join()\n',
        },
        [('hard-coded-rendezvous', 14), ('no-destroy-process-group', 15)],
    ),
    'n4_trainer_elsewhere': (
        'only Lightning callbacks and loggers imported, but a trainer built by hydra is fitted: launched by Lightning',
        {
            'train.py': 'import os\nimport hydra\nimport torch\nfrom omegaconf import DictConfig\nfrom lightning.pytorch.callbacks import ModelCheckpoint, LearningRateMonitor\nfrom lightning.pytorch.loggers import WandbLogger\nfrom lightning.pytorch.utilities import rank_zero_only\n\n\n@hydra.main(config_path="configs", config_name="train")\ndef main(cfg: DictConfig):\n    model = hydra.utils.instantiate(cfg.model)\n    datamodule = hydra.utils.instantiate(cfg.data)\n    logger = WandbLogger(project=cfg.project)\n    trainer = hydra.utils.instantiate(cfg.trainer, logger=logger,\n                                      callbacks=[ModelCheckpoint(dirpath=cfg.ckpt_dir), LearningRateMonitor()])\n    trainer.fit(model, datamodule=datamodule)\n    torch.save(model.state_dict(), os.path.join(cfg.out_dir, "final.pt"))\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('save-on-every-rank', 18)],
    ),
    'n5_seed_everything': (
        '`from pytorch_lightning import seed_everything` in a one-process script: not launched by Lightning',
        {
            'train.py': 'import argparse\nimport torch\nfrom torch.utils.data import DataLoader\nfrom torchvision import datasets, transforms\nfrom pytorch_lightning import seed_everything\n\n\ndef main():\n    p = argparse.ArgumentParser()\n    p.add_argument("--out", default="model.pt")\n    args = p.parse_args()\n    seed_everything(42)\n    device = "cuda" if torch.cuda.is_available() else "cpu"\n    ds = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())\n    loader = DataLoader(ds, batch_size=128, shuffle=True, num_workers=4)\n    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)).to(device)\n    opt = torch.optim.Adam(model.parameters())\n    for x, y in loader:\n        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))\n        opt.zero_grad(); loss.backward(); opt.step()\n    print("done", loss.item())\n    torch.save(model.state_dict(), args.out)\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [],
    ),
    'n6_trainer_from_helper': (
        "a Trainer built in the project's helper and fitted in the script",
        {
            'train.py': 'import os\nimport argparse\nimport torch\nfrom torchvision import datasets\nfrom pytorch_lightning.callbacks import ModelCheckpoint\nfrom pytorch_lightning.loggers import TensorBoardLogger\nfrom utils.builders import build_trainer\nfrom models import LitClassifier\n\n\ndef main():\n    p = argparse.ArgumentParser()\n    p.add_argument("--gpus", type=int, default=4)\n    p.add_argument("--epochs", type=int, default=50)\n    p.add_argument("--out", default="runs")\n    cfg = p.parse_args()\n    datasets.CIFAR10("data", train=True, download=True)\n    model = LitClassifier()\n    trainer = build_trainer(cfg, [ModelCheckpoint(dirpath=cfg.out)], TensorBoardLogger(cfg.out))\n    trainer.fit(model)\n    torch.save(model.state_dict(), os.path.join(cfg.out, "final.pt"))\n\n\nif __name__ == "__main__":\n    main()\n',
            'models.py': 'class LitClassifier: pass\n',
            'utils/__init__.py': '',
            'utils/builders.py': 'from pytorch_lightning import Trainer\nfrom pytorch_lightning.strategies import DDPStrategy\n\n\ndef build_trainer(cfg, callbacks, logger):\n    return Trainer(accelerator="gpu", devices=cfg.gpus, strategy=DDPStrategy(find_unused_parameters=False),\n                   max_epochs=cfg.epochs, callbacks=callbacks, logger=logger)\n',
        },
        [('download-on-every-rank', 17), ('save-on-every-rank', 21)],
    ),
    'n7_guarded_torch_save': (
        'a save helper whose torch.save is under a rank check, and whose config.json is not: the write is said where it is',
        {
            'train.py': 'import os\nimport json\nimport argparse\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\ndef save_checkpoint(model, folder, cfg, rank):\n    if rank == 0:\n        torch.save(model.state_dict(), os.path.join(folder, "model.pt"))\n    with open(os.path.join(folder, "config.json"), "w") as f:\n        json.dump(cfg, f)\n\ndef main():\n    p = argparse.ArgumentParser()\n    p.add_argument("--out", default="runs/exp")\n    args = p.parse_args()\n    dist.init_process_group("nccl")\n    rank = dist.get_rank()\n    local_rank = int(os.environ["LOCAL_RANK"])\n    torch.cuda.set_device(local_rank)\n    model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])\n    cfg = {"lr": 0.1, "dim": 8}\n    for epoch in range(3):\n        pass\n    save_checkpoint(model.module, args.out, cfg, rank)\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [('save-on-every-rank', 11)],
    ),
    'n8_port_from_env': (
        "OpenPCDet's init function that takes MASTER_PORT from the launcher first: not fixed",
        {
            'train.py': "import argparse\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom lib import dist_utils\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n    parser.add_argument('--launcher', choices=['none', 'pytorch', 'mpi'], default='none')\n    parser.add_argument('--tcp_port', type=int, default=18888)\n    parser.add_argument('--local_rank', type=int, default=0)\n    args = parser.parse_args()\n    if args.launcher != 'none':\n        ngpus, rank = getattr(dist_utils, 'init_dist_%s' % args.launcher)(args.tcp_port, args.local_rank)\n    model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[args.local_rank])\n    dist.destroy_process_group()\n\n\nif __name__ == '__main__':\n    main()\n",
            'lib/__init__.py': '',
            'lib/dist_utils.py': "import os\nimport torch\nimport torch.distributed as dist\n\n\ndef init_dist_pytorch(tcp_port, local_rank, backend='nccl'):\n    # prefer the port chosen by the launcher (torchrun sets MASTER_PORT)\n    tcp_port = int(os.environ.get('MASTER_PORT', tcp_port))\n    num_gpus = torch.cuda.device_count()\n    torch.cuda.set_device(local_rank % num_gpus)\n    dist.init_process_group(backend=backend, init_method='tcp://127.0.0.1:%d' % tcp_port,\n                            rank=int(os.environ.get('RANK', local_rank)),\n                            world_size=int(os.environ.get('WORLD_SIZE', num_gpus)))\n    return num_gpus, dist.get_rank()\n",
        },
        [],
    ),
    'n9_paddle_subclass': (
        'a subclass of paddle.DataParallel is no torch DataParallel',
        {
            'train.py': 'import paddle\nimport paddle.nn as nn\nimport paddle.distributed as dist\n\n\nclass MyDataParallel(paddle.DataParallel):\n    def __getattr__(self, key):\n        try:\n            return super().__getattr__(key)\n        except AttributeError:\n            return getattr(self._layers, key)\n\n\ndef main():\n    dist.init_parallel_env()\n    net = nn.Linear(8, 8)\n    net = MyDataParallel(net)\n    print(net)\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        [],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_review_case(tmp_path, case):
    why, files, expected = CASES[case]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = sorted((f.id, f.line) for f in lint_file(str(tmp_path / "train.py")))  # the rules on by default
    assert found == expected, why
