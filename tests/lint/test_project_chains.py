"""`gpurig lint` following the script's own project further: modules its modules import, classes
whose construction downloads, and data read from this machine inside a helper. Each test is a small
project written for it, in the shape of a pattern met in real repositories."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import RULES, lint_file

HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
"""


def _lint(project, script: str) -> list[tuple[str, int]]:
    path = project / "train.py"
    path.write_text(HEAD + textwrap.dedent(script))
    return [(f.id, f.line) for f in lint_file(str(path), select=set(RULES))]


def _write(project, rel: str, text: str) -> None:
    target = project / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))


def test_a_loss_whose_construction_downloads_through_a_module_its_module_imports(tmp_path):
    # train.py -> losses/vq_loss.py (VQLoss builds LPIPS) -> losses/lpips.py (LPIPS fetches its weights)
    _write(tmp_path, "losses/__init__.py", "")
    _write(tmp_path, "losses/lpips.py", """
        import os
        import requests
        def fetch(url, path):
            with requests.get(url, stream=True) as r, open(path, "wb") as f:
                f.write(r.content)
        def get_ckpt_path(name, root):
            path = os.path.join(root, name)
            if not os.path.exists(path):
                fetch("https://example.org/" + name, path)
            return path
        class LPIPS(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.load_weights()
            def load_weights(self):
                self.ckpt = get_ckpt_path("vgg.pth", "cache")
        """)
    _write(tmp_path, "losses/vq_loss.py", """
        import torch
        from losses.lpips import LPIPS
        class VQLoss(torch.nn.Module):
            def __init__(self, weight=1.0):
                super().__init__()
                self.perceptual = LPIPS().eval()
        """)
    script = """
    from losses.vq_loss import VQLoss
    dist.init_process_group("nccl")
    loss = VQLoss(weight=0.5)
    dist.destroy_process_group()
    """
    assert ("download-on-every-rank", 7) in _lint(tmp_path, script)


def test_a_class_built_only_by_rank_zero_first_or_not_downloading_is_quiet(tmp_path):
    _write(tmp_path, "nets.py", """
        import torch
        from torchvision.models import resnet50
        class Backbone(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = resnet50(pretrained=True)
        class Head(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.fc = torch.nn.Linear(n, 10)
        """)
    script = """
    from nets import Backbone, Head
    dist.init_process_group("nccl")
    if dist.get_rank() == 0:
        Backbone()
    dist.barrier()
    model = Backbone()
    head = Head(2048)
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "download-on-every-rank"] == []
    # The same construction with nobody first: every rank fetches the weights.
    script = """
    from nets import Backbone
    dist.init_process_group("nccl")
    model = Backbone()
    dist.destroy_process_group()
    """
    assert ("download-on-every-rank", 7) in _lint(tmp_path, script)


def test_a_helper_reading_a_dataset_from_this_machine_is_not_a_download(tmp_path):
    _write(tmp_path, "data.py", """
        from datasets import load_dataset
        from torch.utils.data import Dataset
        class Articles(Dataset):
            def __init__(self, split):
                self.rows = load_dataset("wikihow", "all", data_dir="data/", split=split)
        class Reviews(Dataset):
            def __init__(self, files):
                self.rows = load_dataset("imdb_reviews", data_files=files)
        class Hub(Dataset):
            def __init__(self):
                self.rows = load_dataset("imdb")
        """)
    script = """
    from data import Articles, Reviews, Hub
    dist.init_process_group("nccl")
    train = Articles("train")
    extra = Reviews(["a.jsonl"])
    hub = Hub()
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 9)]


def test_a_fixed_rendezvous_in_the_projects_options_or_its_launcher(tmp_path):
    # --dist_url's default fixed in the project's opts.py, passed as init_method.
    _write(tmp_path, "opts.py", """
        import argparse
        def parse_opts():
            parser = argparse.ArgumentParser()
            parser.add_argument('--dist_url', default='tcp://127.0.0.1:23456', type=str)
            parser.add_argument('--workers', default=4, type=int)
            return parser.parse_args()
        """)
    script = """
    from opts import parse_opts
    opt = parse_opts()
    dist.init_process_group(backend="nccl", init_method=opt.dist_url, world_size=2, rank=0)
    dist.destroy_process_group()
    """
    assert ("hard-coded-rendezvous", 7) in _lint(tmp_path, script)


def test_a_group_started_on_a_fixed_address_by_the_workers_the_project_starts(tmp_path):
    # train.py -> trainer.train() -> Process(target=run) -> distributed.multi_init(): 'tcp://localhost:10000'
    _write(tmp_path, "distributed.py", """
        import torch
        def multi_init(device_id, world_size):
            method = 'tcp://localhost:10000'
            torch.distributed.init_process_group(backend='nccl', init_method=method, world_size=world_size, rank=device_id)
            return torch.distributed.get_rank()
        """)
    _write(tmp_path, "trainer.py", """
        import torch.multiprocessing as mp
        import distributed
        def run(args, device_id):
            distributed.multi_init(device_id, args.world_size)
        def train(args):
            procs = [mp.Process(target=run, args=(args, i)) for i in range(args.world_size)]
            for p in procs:
                p.start()
        """)
    script = """
    from trainer import train
    train(args)
    """
    assert ("hard-coded-rendezvous", 6) in _lint(tmp_path, script)
    # The same helper on env:// is fine.
    _write(tmp_path, "distributed.py", """
        import torch
        def multi_init(device_id, world_size):
            torch.distributed.init_process_group(backend='nccl', init_method='env://')
        """)
    assert [r for r in _lint(tmp_path, script) if r[0] == "hard-coded-rendezvous"] == []


def test_a_port_option_joined_into_the_address_the_script_builds():
    from gpurig.diagnose.lint import lint_source

    source = HEAD + textwrap.dedent("""
    import argparse
    import torch.multiprocessing as mp
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", default="2646", type=str)
    args = parser.parse_args()
    def worker(gpu, port):
        dist.init_process_group(backend="nccl", init_method="tcp://127.0.0.1:" + port, world_size=2, rank=gpu)
        dist.destroy_process_group()
    mp.spawn(worker, args=(args.port,), nprocs=2)
    """)
    assert ("hard-coded-rendezvous", 8) in [(f.id, f.line) for f in lint_source(source, "<script>", select=set(RULES))]


def test_a_helper_that_writes_a_file_it_names_itself(tmp_path):
    _write(tmp_path, "utils.py", """
        import json
        def read_split_data(root):
            classes = sorted(root)
            with open('class_indices.json', 'w') as f:
                f.write(json.dumps(classes))
            return classes
        def load_split(root):
            with open('class_indices.json') as f:
                return f.read()
        """)
    script = """
    from utils import read_split_data, load_split
    dist.init_process_group("nccl")
    classes = read_split_data(args.data)
    again = load_split(args.data)
    if dist.get_rank() == 0:
        read_split_data(args.data)
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 7)]


def test_a_model_wrapped_by_a_trainer_class_and_its_subclass_picked_by_name(tmp_path):
    # Trainer.__init__ -> create_model() -> DataParallel; WATrainer(Trainer) calls super().__init__;
    # the script picks the class by a name first (`Exp = WATrainer`). One mistake, reported once.
    _write(tmp_path, "models.py", """
        import torch
        def create_model(name):
            model = torch.nn.Linear(2, 2)
            return torch.nn.DataParallel(model)
        """)
    _write(tmp_path, "trainers.py", """
        from models import create_model
        class Trainer:
            def __init__(self, args):
                self.model = create_model(args.model)
        class WATrainer(Trainer):
            def __init__(self, args):
                super().__init__(args)
                self.ema = None
        """)
    script = """
    from trainers import Trainer, WATrainer
    if args.wa:
        Exp = WATrainer
    else:
        Exp = Trainer
    trainer = Exp(args)
    other = Trainer(args)
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "data-parallel"] == [("data-parallel", 10)]


def test_what_is_not_fetched_from_a_hub_in_the_projects_helpers(tmp_path):
    _write(tmp_path, "helpers.py", """
        import torchvision
        from datasets import load_dataset
        from transformers import AutoConfig, AutoTokenizer
        def init_model(name, tokenizer_path='../model'):
            return AutoTokenizer.from_pretrained(tokenizer_path)
        def stream():
            return load_dataset("allenai/c4", "en", split="train", streaming=True)
        def local_config(model_config):
            return AutoConfig.from_pretrained(model_config), AutoTokenizer.from_pretrained("./tokenizer")
        def backbone(is_main_process):
            return torchvision.models.resnet50(pretrained=is_main_process())
        def hub(name="gpt2"):
            return AutoTokenizer.from_pretrained(name)
        def from_folder(config):
            return load_dataset(config.paths.train_dataset_dir)
        """)
    script = """
    from helpers import init_model, stream, local_config, backbone, hub, from_folder
    dist.init_process_group("nccl")
    from_folder(cfg)
    init_model("small")
    stream()
    local_config(args.model_config)
    backbone(lambda: dist.get_rank() == 0)
    hub()
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 12)]


def test_a_helper_saving_under_a_root_worker_check_or_to_a_per_rank_name(tmp_path):
    _write(tmp_path, "ckpt.py", """
        import os
        import torch
        import torch.distributed as dist
        def save_model(path, model, backend):
            if not backend.is_root_worker():
                return
            torch.save(model.state_dict(), path)
        def save_shard(save_dir, state):
            save_path = os.path.join(save_dir, f"rank-specific-{dist.get_rank():05d}.pth")
            torch.save(state, save_path)
        def save_all(path, model):
            torch.save(model.state_dict(), path)
        """)
    script = """
    from ckpt import save_model, save_shard, save_all
    dist.init_process_group("nccl")
    save_model("vae.pt", model, backend)
    save_shard("out", state)
    save_all("all.pt", model)
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 9)]


def test_the_projects_worker_started_by_mp_spawn_is_judged_as_run_on_every_rank(tmp_path):
    _write(tmp_path, "trainer.py", """
        import torch
        def train(rank, args, ckpt):
            state = torch.load(ckpt)
            return state
        """)
    script = """
    import torch.multiprocessing as mp
    from trainer import train
    if __name__ == "__main__":
        mp.spawn(train, nprocs=2, args=(args, "last.pt"))
    """
    assert ("torch-load-without-map-location", 8) in _lint(tmp_path, script)


def test_a_helper_that_fixes_master_port_unless_it_is_only_a_fallback(tmp_path):
    _write(tmp_path, "dist_utils.py", """
        import os
        import torch.distributed as dist
        def init_slurm():
            os.environ['MASTER_PORT'] = '8964'
            dist.init_process_group('nccl')
        def init_env(port=None):
            if port is not None:
                os.environ['MASTER_PORT'] = str(port)
            elif 'MASTER_PORT' in os.environ:
                pass
            else:
                os.environ['MASTER_PORT'] = '29500'
            dist.init_process_group('nccl')
        """)
    fixed = """
    from dist_utils import init_slurm
    init_slurm()
    dist.destroy_process_group()
    """
    assert ("hard-coded-rendezvous", 6) in _lint(tmp_path, fixed)
    fallback = """
    from dist_utils import init_env
    init_env()
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, fallback) if r[0] == "hard-coded-rendezvous"] == []


def test_a_rendezvous_fixed_under_any_key_of_the_shipped_json_configs_or_a_master_ip_option(tmp_path):
    _write(tmp_path, "config.json", '{"distributed": {"backend": "nccl", "url": "tcp://localhost:54321"}}')
    script = """
    import json
    c = json.load(open("config.json"))
    dist.init_process_group(c["distributed"]["backend"], init_method=c["distributed"]["url"], world_size=2, rank=0)
    dist.destroy_process_group()
    """
    assert ("hard-coded-rendezvous", 7) in _lint(tmp_path, script)
    script = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--master_ip", default="tcp://localhost:12345", type=str)
    args = parser.parse_args()
    dist.init_process_group("nccl", init_method=args.master_ip, world_size=2, rank=0)
    dist.destroy_process_group()
    """
    assert ("hard-coded-rendezvous", 7) in _lint(tmp_path, script)


def test_the_projects_own_pretrained_builders_and_caches_are_judged_by_their_bodies(tmp_path):
    # resnet50(pretrained=True) of the project reads a local file; another one fetches from a URL.
    _write(tmp_path, "nets.py", """
        import torch
        from torch.hub import load_state_dict_from_url
        def resnet50(pretrained=False):
            model = torch.nn.Linear(2, 2)
            if pretrained:
                model.load_state_dict(torch.load('./initmodel/resnet50_v2.pth', map_location='cpu'))
            return model
        def resnet18(pretrained=False):
            model = torch.nn.Linear(2, 2)
            if pretrained:
                model.load_state_dict(load_state_dict_from_url('https://example.org/resnet18.pth'))
            return model
        class PSPNet(torch.nn.Module):
            def __init__(self, layers=50, pretrained=True):
                super().__init__()
                self.backbone = resnet50(pretrained=pretrained)
        class BiSeNet(torch.nn.Module):
            def __init__(self, pretrained=True):
                super().__init__()
                self.backbone = resnet18(pretrained=pretrained)
        def load_cached(cache_fn):
            return torch.load(cache_fn)
        """)
    script = """
    from nets import PSPNet, BiSeNet, load_cached
    dist.init_process_group("nccl")
    a = PSPNet()
    b = BiSeNet()
    data = load_cached(args.cache_path)
    dist.destroy_process_group()
    """
    got = _lint(tmp_path, script)
    assert [r for r in got if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 8)]
    assert [r for r in got if r[0] == "torch-load-without-map-location"] == []


def test_a_subclass_of_data_parallel_in_the_project_is_data_parallel(tmp_path):
    _write(tmp_path, "utils.py", """
        import torch
        class CustomDataParallel(torch.nn.DataParallel):
            def __init__(self, module, num_gpus):
                super().__init__(module)
                self.num_gpus = num_gpus
        """)
    script = """
    from utils import CustomDataParallel
    model = CustomDataParallel(torch.nn.Linear(2, 2), 4)
    """
    assert ("data-parallel", 6) in _lint(tmp_path, script)


def test_a_datasets_own_torch_load_and_the_projects_own_load_dataset_are_data(tmp_path):
    _write(tmp_path, "data.py", """
        import torch
        from torch.utils.data import Dataset
        class DistilledDataset(Dataset):
            def __init__(self, file_path):
                self.data = torch.load(file_path)
        def load_dataset():
            return DistilledDataset("distilled.pt")
        """)
    script = """
    from data import DistilledDataset, load_dataset
    dist.init_process_group("nccl")
    train = DistilledDataset(args.file)
    more = load_dataset()
    dist.destroy_process_group()
    """
    got = _lint(tmp_path, script)
    assert [r for r in got if r[0] in ("torch-load-without-map-location", "download-on-every-rank")] == []


def test_a_helper_that_fetches_several_things_is_one_finding_naming_them(tmp_path):
    from gpurig.diagnose.lint import lint_file

    _write(tmp_path, "work.py", """
        from datasets import load_dataset
        from transformers import AutoTokenizer
        def worker(rank):
            tok = AutoTokenizer.from_pretrained("gpt2")
            parts = [load_dataset("a/one"), load_dataset("a/two"), load_dataset("a/three"), load_dataset("a/four")]
            return tok, parts
        """)
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent("""
        import torch.multiprocessing as mp
        from work import worker
        if __name__ == "__main__":
            mp.spawn(worker, nprocs=2)
        """))
    found = [f for f in lint_file(str(script), select=set(RULES)) if f.id == "download-on-every-rank"]
    assert [f.line for f in found] == [8]
    assert "from_pretrained at work.py:5" in found[0].title and "and 2 more" in found[0].title


def test_a_call_through_a_library_is_none_of_the_projects_helpers_of_that_name(tmp_path):
    # checkpointManager.py's CheckpointManager.load reads a checkpoint without map_location;
    # OmegaConf.load, json.load and np.load in the script are other libraries' functions.
    _write(tmp_path, "checkpointManager.py", """
        import torch
        class CheckpointManager:
            def load(self, path, model):
                checkpoint = torch.load(path)
                model.load_state_dict(checkpoint["model"])
        """)
    script = """
    import json
    import numpy as np
    from omegaconf import OmegaConf
    from checkpointManager import CheckpointManager

    def main():
        dist.init_process_group("nccl")
        config = OmegaConf.load("config.yaml")
        with open("vocab.json") as f:
            vocab = json.load(f)
        table = np.load("table.npy")
        manager = CheckpointManager()
        manager.load("last.pt", model)
        dist.destroy_process_group()
    """
    found = _lint(tmp_path, script)
    loads = [line for rule, line in found if rule == "torch-load-without-map-location"]
    assert loads == [17], found  # manager.load(...), and none of the libraries' loads


def test_from_pretrained_of_a_name_the_script_only_sets_to_a_local_folder(tmp_path):
    script = """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def get_model(model_name):
        tokenizer = AutoTokenizer.from_pretrained(model_name)
        return tokenizer, AutoModelForCausalLM.from_pretrained(model_name)

    def main():
        dist.init_process_group("nccl")
        model_name = "/scratch/llama3.2-3B-HF"
        tokenizer, model = get_model(model_name)
        hub = AutoModelForCausalLM.from_pretrained(hub_name)
        dist.destroy_process_group()

    hub_name = "meta-llama/Llama-3.2-3B"
    main()
    """
    found = _lint(tmp_path, script)
    assert [line for rule, line in found if rule == "download-on-every-rank"] == [15], found


def test_a_project_module_that_downloads_as_it_is_imported(tmp_path):
    # utils.py builds its datasets at import time; the script only imports them.
    _write(tmp_path, "utils.py", """
        from torchvision import datasets, transforms
        train_dataset = datasets.MNIST(root="./data", train=True, download=True)
        val_dataset = datasets.MNIST(root="./data", train=False, download=True)
        def later():
            return datasets.MNIST(root="./data", download=True)
        if __name__ == "__main__":
            datasets.CIFAR10(root="./data", download=True)
        """)
    _write(tmp_path, "quiet.py", """
        from torchvision import datasets
        def build():
            return datasets.MNIST(root="./data", download=True)
        if __name__ == "__main__":
            build()
        """)
    script = """
    from utils import train_dataset
    import quiet

    def main():
        dist.init_process_group("nccl")
        dist.destroy_process_group()
    main()
    """
    found = [f for f in lint_file(str(_script(tmp_path, script)), select=set(RULES)) if f.id == "download-on-every-rank"]
    assert [f.line for f in found] == [5], found
    assert "utils.py:3" in found[0].title and "utils.py:4" in found[0].title and "utils.py:6" not in found[0].title


def _script(project, script: str):
    path = project / "train.py"
    path.write_text(HEAD + textwrap.dedent(script))
    return path


def test_a_backbone_fetched_with_the_old_model_zoo_name_through_its_classes(tmp_path):
    # BiSeNet -> ContextPath -> Resnet18.__init__ -> self.init_weight() -> modelzoo.load_url(url)
    _write(tmp_path, "resnet.py", """
        import torch
        import torch.utils.model_zoo as modelzoo
        resnet18_url = "https://download.pytorch.org/models/resnet18-5c106cde.pth"
        class Resnet18(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.init_weight()
            def init_weight(self):
                state_dict = modelzoo.load_url(resnet18_url)
                self.load_state_dict(state_dict, strict=False)
        """)
    _write(tmp_path, "model.py", """
        import torch
        from resnet import Resnet18
        class ContextPath(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.resnet = Resnet18()
        class BiSeNet(torch.nn.Module):
            def __init__(self, n_classes):
                super().__init__()
                self.cp = ContextPath()
        """)
    script = """
    from model import BiSeNet
    dist.init_process_group("nccl")
    net = BiSeNet(19)
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 7)]


def test_a_logger_class_that_writes_the_file_it_is_given_when_built(tmp_path):
    _write(tmp_path, "utils/logger.py", """
        class CSVLogger(object):
            def __init__(self, args, fieldnames, filename):
                self.fieldnames = fieldnames
                self.filename = filename
                with open(self.filename, "a") as f:
                    f.write(str(args) + "\\n")
        """)
    script = """
    from utils.logger import CSVLogger
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    log = CSVLogger(args, ["epoch", "loss"], "results/run.csv")
    mine = CSVLogger(args, ["epoch", "loss"], f"results/run_{rank}.csv")
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "save-on-every-rank"] == [("save-on-every-rank", 8)]


def test_a_module_imported_twice_downloads_once(tmp_path):
    _write(tmp_path, "utils.py", """
        from torchvision import datasets
        train_dataset = datasets.MNIST(root="./data", train=True, download=True)
        """)
    script = """
    from utils import train_dataset
    import utils

    dist.init_process_group("nccl")
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "download-on-every-rank"] == [("download-on-every-rank", 5)]


def test_a_library_call_named_like_a_project_function_is_no_call_of_it(tmp_path):
    # hub.py's dump() downloads (it fetches, then writes the weights); data.py's save_cfg() calls
    # json.dump(), a library's dump: it downloads nothing (only calls through the project's own
    # modules are followed)
    _write(tmp_path, "hub.py", """
        import torch
        def dump(name):
            return torch.hub.load("repo", name)
        """)
    _write(tmp_path, "data.py", """
        import json
        import hub
        def save_cfg(cfg):
            return json.dumps(cfg), json.dump(cfg, None)
        def backbone():
            return hub.dump("resnet50")
        """)
    script = """
    from data import backbone, save_cfg
    dist.init_process_group("nccl")
    cfg = save_cfg({})
    net = backbone()
    dist.destroy_process_group()
    """
    found = [f for f in _lint(tmp_path, script) if f[0] == "download-on-every-rank"]
    assert found == [("download-on-every-rank", 8)]


def test_a_shuffling_sampler_built_two_calls_down_or_by_a_class(tmp_path):
    # zjykzj's shape: build_dataloader() -> build_sampler() -> DistributedSampler(data); and a
    # trainer class whose __init__ builds one. One finding each, at the first call, naming the sampler.
    _write(tmp_path, "data.py", """\
        from torch.utils.data import DataLoader, DistributedSampler

        def build_sampler(data_set, world_size, rank):
            return DistributedSampler(data_set, num_replicas=world_size, rank=rank)

        def build_dataloader(data_set, world_size=1, rank=0):
            return DataLoader(data_set, sampler=build_sampler(data_set, world_size, rank))

        class Trainer:
            def __init__(self, data_set):
                self.loader = DataLoader(data_set, sampler=DistributedSampler(data_set, shuffle=True))
        """)
    found = _lint(tmp_path, """\
        from data import Trainer, build_dataloader
        dist.init_process_group("nccl")
        train_loader = build_dataloader(None, 2, 0)
        test_loader = build_dataloader(None, 2, 0)
        trainer = Trainer(None)
        for epoch in range(10):
            for batch in train_loader:
                pass
        dist.destroy_process_group()
        """)
    assert [line for rule, line in found if rule == "sampler-without-set-epoch"] == [6, 8]


def test_a_shuffling_sampler_whose_loader_a_helper_cycles_for_ever(tmp_path):
    # lightweight-gan's shape: a step-based script (no epoch loop of its own) asks the project's
    # trainer to build its data, and the trainer wraps a shuffling sampler's loader in cycle():
    # the loader is iterated epoch after epoch, each in the same order.
    _write(tmp_path, "trainer.py", """\
        from torch.utils.data import DataLoader, DistributedSampler

        def cycle(iterable):
            while True:
                for i in iterable:
                    yield i

        class Trainer:
            def set_data_src(self, data_set, rank, world_size):
                sampler = DistributedSampler(data_set, rank=rank, num_replicas=world_size, shuffle=True)
                self.loader = cycle(DataLoader(data_set, sampler=sampler))

            def train(self):
                return next(self.loader)
        """)
    script = """\
        from trainer import Trainer
        dist.init_process_group("nccl")
        model = Trainer()
        model.set_data_src(None, 0, 2)
        for _ in range(100000):
            model.train()
        dist.destroy_process_group()
        """
    assert [line for rule, line in _lint(tmp_path, script) if rule == "sampler-without-set-epoch"] == [7]
    # a helper that hands back a loader read once (no cycle) in a script with no epochs stays quiet
    _write(tmp_path, "trainer.py", """\
        from torch.utils.data import DataLoader, DistributedSampler

        class Trainer:
            def set_data_src(self, data_set, rank, world_size):
                self.loader = DataLoader(data_set, sampler=DistributedSampler(data_set, shuffle=True))
        """)
    assert "sampler-without-set-epoch" not in [rule for rule, _ in _lint(tmp_path, script)]


def test_a_download_reached_through_helpers_names_each_step(tmp_path):
    # build-nanogpt's HellaSwag shape: iterate_examples() -> download() -> download_file() -> requests.get;
    # the finding names where each helper calls the next, so the user (and a reviewer who marked the
    # middle call) sees the whole chain.
    _write(tmp_path, "hellaswag.py", """
        import os
        import requests

        def download_file(url, fname):
            resp = requests.get(url, stream=True)
            open(fname, "wb").write(resp.content)

        def download(split):
            fname = f"hellaswag_{split}.jsonl"
            if not os.path.exists(fname):
                download_file("https://example.org/" + fname, fname)
            return fname

        def iterate_examples(split):
            with open(download(split)) as f:
                yield from f
        """)
    script = """
    import torch.distributed as dist
    from hellaswag import iterate_examples
    dist.init_process_group("nccl")
    for example in iterate_examples("val"):
        pass
    dist.destroy_process_group()
    """
    [finding] = [f for f in lint_file(_script(tmp_path, script)) if f.id == "download-on-every-rank"]
    assert "through download() at hellaswag.py:16: through download_file() at hellaswag.py:12: get at hellaswag.py:6" in finding.title
    assert finding.related == ["hellaswag.py:16", "hellaswag.py:12", "hellaswag.py:6"]


def test_a_saver_that_is_a_null_object_off_rank_zero_saves_on_one_rank(tmp_path):
    # UNITER's shape: `model_saver = ModelSaver(dir)` under `if rank == 0`, `NoOp()` on the others,
    # then `model_saver.save(model, step)` on every rank: only rank 0's saver writes.
    _write(tmp_path, "utils/__init__.py", "")
    _write(tmp_path, "utils/save.py", """
        import torch
        class ModelSaver:
            def __init__(self, output_dir):
                self.output_dir = output_dir
            def save(self, model, step):
                torch.save(model.state_dict(), f"{self.output_dir}/model_step_{step}.pt")
        class NoOp:
            def __getattr__(self, name):
                return lambda *args, **kwargs: None
        """)
    script = """
        from utils.save import ModelSaver, NoOp
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        if rank == 0:
            model_saver = ModelSaver("ckpt")
        else:
            model_saver = NoOp()
        model_saver.save(model, 100)
        other_saver = ModelSaver("ckpt")
        other_saver.save(model, 100)
        dist.destroy_process_group()
        """
    found = [f for f in _lint(tmp_path, script) if f[0] == "save-on-every-rank"]
    assert found == [("save-on-every-rank", 14)]


def test_functions_decorated_to_run_on_the_main_process_alone_write_once(tmp_path):
    # RWKV's `@rank_zero_only def generate_init_weight(...)` in its trainer module, and mmcv's
    # `@master_only` in the script itself: their torch.save runs on rank 0 only. An undecorated twin
    # still writes on every rank.
    _write(tmp_path, "src/__init__.py", "")
    _write(tmp_path, "src/trainer.py", """
        import torch
        from pytorch_lightning.utilities import rank_zero_only
        @rank_zero_only
        def generate_init_weight(model, name):
            torch.save(model.state_dict(), name)
        def save_weights(model, name):
            torch.save(model.state_dict(), name)
        """)
    script = """
        from mmcv.runner import master_only
        from src.trainer import generate_init_weight, save_weights
        @master_only
        def dump(model):
            torch.save(model.state_dict(), "last.pth")
        dist.init_process_group("nccl")
        generate_init_weight(model, "init.pth")
        dump(model)
        save_weights(model, "w.pth")
        dist.destroy_process_group()
        """
    found = [f for f in _lint(tmp_path, script) if f[0] == "save-on-every-rank"]
    assert found == [("save-on-every-rank", 13)]


def test_set_epoch_given_a_value_the_epoch_loop_never_changes(tmp_path):
    # secondtrain.py's shape: `for epoch in range(args.epoch): train_sampler.set_epoch(args.epoch)`, in the
    # script and in a trainer module the script calls; the loop's own epoch, a value the loop advances,
    # and a validation sampler kept in a fixed order are fine.
    _write(tmp_path, "trainer.py", """
        class Trainer:
            def train(self, args, train_sampler, valid_sampler):
                for epoch in range(args.epoch):
                    train_sampler.set_epoch(args.epoch)
                    valid_sampler.set_epoch(0)
                for epoch in range(args.epoch):
                    train_sampler.set_epoch(0)
        """)
    script = """
        from torch.utils.data.distributed import DistributedSampler
        from trainer import Trainer
        dist.init_process_group("nccl")
        sampler = DistributedSampler(dataset)
        for epoch in range(args.epochs):
            sampler.set_epoch(args.epoch)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
        for epoch in range(args.epochs):
            args.epoch = epoch
            sampler.set_epoch(args.epoch)
        Trainer().train(args, sampler, val_sampler)
        dist.destroy_process_group()
        """
    found = [f for f in lint_file(str(_script(tmp_path, script)), select={"sampler-without-set-epoch"})]
    assert [(f.line, f.related) for f in found] == [(10, []), (16, ["trainer.py:5", "trainer.py:8"])]


def test_a_helper_redefined_later_in_its_module_is_judged_by_the_definition_that_stands(tmp_path):
    # utils.py defines load_checkpoint twice; only the second (which maps onto the CPU) is ever called.
    _write(tmp_path, "utils.py", """
        import torch
        def load_checkpoint(model, ckpt_path):
            model.load_state_dict(torch.load(ckpt_path))
        def load_checkpoint(config, model, optimizer):
            checkpoint = torch.load(config.resume, map_location="cpu")
            model.load_state_dict(checkpoint["model"])
        """)
    script = """
    from utils import load_checkpoint
    dist.init_process_group("nccl")
    load_checkpoint(config, model, optimizer)
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "torch-load-without-map-location"] == []
    # the other order: the definition that stands reads without map_location
    _write(tmp_path, "utils.py", """
        import torch
        def load_checkpoint(config, model, optimizer):
            checkpoint = torch.load(config.resume, map_location="cpu")
        def load_checkpoint(model, ckpt_path):
            model.load_state_dict(torch.load(ckpt_path))
        """)
    assert [r for r in _lint(tmp_path, script) if r[0] == "torch-load-without-map-location"] == [
        ("torch-load-without-map-location", 7)]


def test_a_helper_is_the_one_of_the_module_the_script_imports_it_from(tmp_path):
    # Two modules define load_model; the script's comes from utils.py, which maps onto the CPU.
    _write(tmp_path, "utils.py", """
        import torch
        def load_model(model, path):
            model.load_state_dict(torch.load(path, map_location="cpu"))
        """)
    _write(tmp_path, "other/__init__.py", "")
    _write(tmp_path, "other/tools.py", """
        import torch
        def load_model(model, path):
            model.load_state_dict(torch.load(path))
        """)
    script = """
    from utils import load_model
    import other.tools
    dist.init_process_group("nccl")
    load_model(model, "ckpt.pt")
    dist.destroy_process_group()
    """
    assert [r for r in _lint(tmp_path, script) if r[0] == "torch-load-without-map-location"] == []
    # imported from the module whose load_model reads without map_location: reported, naming that file
    found = _lint(tmp_path, script.replace("from utils import", "from other.tools import"))
    assert [r for r in found if r[0] == "torch-load-without-map-location"] == [("torch-load-without-map-location", 8)]


def test_modules_found_through_a_folder_the_script_puts_on_sys_path(tmp_path):
    # ECG pretraining's shape: pretrain/main.py does sys.path.append("../utils") and imports the trainer
    # module from there; the trainer's shuffling sampler without set_epoch is the script's.
    _write(tmp_path, "utils/utils_trainer.py", """\
        from torch.utils.data import DataLoader, DistributedSampler

        def train(data_set, epochs):
            loader = DataLoader(data_set, sampler=DistributedSampler(data_set))
            for epoch in range(epochs):
                for batch in loader:
                    pass
        """)
    (tmp_path / "pretrain").mkdir()
    script = """\
        import sys
        sys.path.append("../utils")
        from utils_trainer import train
        dist.init_process_group("nccl")
        train(None, epochs=10)
        dist.destroy_process_group()
        """
    found = _lint(tmp_path / "pretrain", script)
    assert [line for rule, line in found if rule == "sampler-without-set-epoch"] == [len(HEAD.splitlines()) + 5], found
    # the same import with no such folder on the path is a library's: nothing to judge
    assert "sampler-without-set-epoch" not in [rule for rule, _ in _lint(tmp_path / "pretrain", script.replace("../utils", "../lib"))]


def test_a_folder_put_on_sys_path_from_the_project_root_is_found(tmp_path):
    # A chemistry repository's demo/train_multigpus/train_inp.py, run from the repository's root,
    # does sys.path.append('src') and imports the training package from there; its spawned worker
    # fixes MASTER_PORT.
    _write(tmp_path, "src/train/__init__.py", "from train.train_func import main\n")
    _write(tmp_path, "src/train/train_func.py", """\
        import os
        import torch.distributed as dist
        import torch.multiprocessing as mp
        def train_spawn(rank, world_size):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
            dist.destroy_process_group()
        def main(world_size):
            mp.spawn(train_spawn, args=(world_size,), nprocs=world_size)
        """)
    (tmp_path / "demo" / "train_multigpus").mkdir(parents=True)
    script = """\
        import sys
        sys.path.append('src')
        from train import main
        main(4)
        """
    found = _lint(tmp_path / "demo" / "train_multigpus", script)
    assert "hard-coded-rendezvous" in [rule for rule, _ in found], found


def test_a_port_default_reached_through_a_library_of_the_projects_own_four_modules_deep(tmp_path):
    # A small training library's shape: the test script builds Model and calls mdl.fit(devices=[0, 1]);
    # model.py spawns `_fit._pipeline` (a worker named through its module), which calls
    # _init_process_group(rank, world_size) without a port, so MASTER_PORT is its default '10086'.
    _write(tmp_path, "lib/__init__.py", "from .model import Model\n")
    _write(tmp_path, "lib/model.py", """\
        import torch.multiprocessing as mp
        from .core import _fit
        class Model:
            def fit(self, devices):
                mp.spawn(_fit._pipeline, args=(len(devices),), nprocs=len(devices))
        """)
    _write(tmp_path, "lib/core/__init__.py", "")
    _write(tmp_path, "lib/core/_fit.py", """\
        from ._ddp import _init_process_group
        def _pipeline(rank, world_size):
            _init_process_group(rank, world_size)
        """)
    _write(tmp_path, "lib/core/_ddp.py", """\
        import os
        import torch.distributed as dist
        def _init_process_group(rank, world_size, master_addr="localhost", master_port="10086"):
            os.environ["MASTER_ADDR"] = master_addr
            os.environ["MASTER_PORT"] = master_port
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
        """)
    (tmp_path / "tests").mkdir()
    script = """\
        import sys
        sys.path.append("..")
        from lib import Model
        mdl = Model()
        mdl.fit(devices=[0, 1])
        """
    found = _lint(tmp_path / "tests", script)
    assert [line for rule, line in found if rule == "hard-coded-rendezvous"] == [len(HEAD.splitlines()) + 5], found
    # given a port of the caller's, the default is not used
    _write(tmp_path, "lib/core/_fit.py", """\
        import os
        from ._ddp import _init_process_group
        def _pipeline(rank, world_size):
            _init_process_group(rank, world_size, master_port=os.environ["PORT"])
        """)
    assert "hard-coded-rendezvous" not in [rule for rule, _ in _lint(tmp_path / "tests", script)]


def test_master_port_from_an_option_whose_default_the_projects_own_parser_fixes(tmp_path):
    # A trajectory-prediction repository's shape: run.py sets MASTER_PORT from args.master_port, and
    # the parser in utils.py gives --master_port the default '12355'.
    _write(tmp_path, "utils.py", """\
        import argparse
        def add_argument(parser):
            parser.add_argument("--master_port", default='12355')
            parser.add_argument("--num_workers", default=4)
        """)
    script = """\
        import argparse
        import os
        import torch.multiprocessing as mp
        import utils
        def setup(rank, world_size, args):
            os.environ['MASTER_ADDR'] = 'localhost'
            os.environ['MASTER_PORT'] = args.master_port
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            dist.destroy_process_group()
        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            utils.add_argument(parser)
            args = parser.parse_args()
            mp.spawn(setup, args=(2, args), nprocs=2)
        """
    found = _lint(tmp_path, script)
    assert [line for rule, line in found if rule == "hard-coded-rendezvous"] == [len(HEAD.splitlines()) + 7], found
    # a port the script finds free at run time is no fixed setting
    free = script.replace("os.environ['MASTER_PORT'] = args.master_port", "os.environ['MASTER_PORT'] = str(find_free_port())")
    assert "hard-coded-rendezvous" not in [rule for rule, _ in _lint(tmp_path, free)]


def test_a_file_a_helper_only_touches_is_named_where_it_is_written(tmp_path):
    # A motion-prediction repository's shape: repeat_eval_ckpt() first makes sure its record file is
    # there (`with open(record, 'a'): pass`), then appends each evaluated epoch to it, on every rank.
    _write(tmp_path, "evaluate.py", """\
        def repeat_eval_ckpt(model, out_dir, epochs):
            record = out_dir / 'eval_list_val.txt'
            with open(record, 'a'):
                pass
            for epoch in epochs:
                with open(record, 'a') as f:
                    print(epoch, file=f)
        """)
    script = """\
        from evaluate import repeat_eval_ckpt
        dist.init_process_group("nccl")
        repeat_eval_ckpt(None, out_dir, range(3))
        dist.destroy_process_group()
        """
    path = tmp_path / "train.py"
    path.write_text(HEAD + textwrap.dedent(script))
    [finding] = [f for f in lint_file(str(path), select=set(RULES)) if f.id == "save-on-every-rank"]
    assert "evaluate.py:6" in finding.related and "evaluate.py:3" not in finding.related


def test_a_dataset_whose_construction_saves_its_processed_split_saves_on_every_rank(tmp_path):
    # An LLM fine-tuning repository's shape: MyDataset.__init__ calls self.process(), which
    # torch.saves the processed split to one file; every rank builds the dataset.
    _write(tmp_path, "mydatasets.py", """\
        import torch
        from torch.utils.data import Dataset
        class MyDataset(Dataset):
            def __init__(self, rows, save_file, rank=0):
                self.data = self.process(rows, save_file)
            def process(self, rows, save_file):
                data = [r for r in rows]
                torch.save(data, save_file)
                return data
        """)
    script = """\
        from mydatasets import MyDataset
        dist.init_process_group("nccl")
        train = MyDataset(rows, "data/train.pt")
        dist.destroy_process_group()
        """
    found = _lint(tmp_path, script)
    assert ("save-on-every-rank", len(HEAD.splitlines()) + 3) in found, found
    # processed on the main rank only: its own check
    guarded = (tmp_path / "mydatasets.py").read_text().replace(
        "        self.data = self.process(rows, save_file)", "        if rank == 0:\n            self.data = self.process(rows, save_file)")
    (tmp_path / "mydatasets.py").write_text(guarded)
    assert "save-on-every-rank" not in [rule for rule, _ in _lint(tmp_path, script)]


def test_from_pretrained_of_the_projects_model_class_names_what_building_it_downloads(tmp_path):
    # A vision-language pretraining repository's shape: MyVLM.from_pretrained(hub id) fetches the
    # language model, and building MyVLM (its __init__ makes a vision tower) fetches CLIP too.
    _write(tmp_path, "vlm.py", """\
        from transformers import CLIPVisionModel, Qwen2ForCausalLM, Qwen2Model
        class VisionLM(Qwen2Model):
            def __init__(self, config):
                super().__init__(config)
                self.vision = CLIPVisionModel.from_pretrained("openai/clip-vit-large-patch14")
        class MyVLM(Qwen2ForCausalLM):
            def __init__(self, config):
                super().__init__(config)
                self.model = VisionLM(config)
        """)
    script = """\
        from vlm import MyVLM
        dist.init_process_group("nccl")
        model = MyVLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
        dist.destroy_process_group()
        """
    path = tmp_path / "train.py"
    path.write_text(HEAD + textwrap.dedent(script))
    [finding] = [f for f in lint_file(str(path), select=set(RULES)) if f.id == "download-on-every-rank"]
    assert finding.line == len(HEAD.splitlines()) + 3
    assert "vlm.py:5" in finding.related and "building MyVLM downloads" in finding.title


def test_a_library_dataset_built_inside_a_project_class_of_the_same_name_downloads(tmp_path):
    # A diffusion repository's datasets.py: `class CIFAR10` of the project wraps torchvision's
    # `datasets.CIFAR10(path, download=True)`; get_dataset() builds it on every rank.
    _write(tmp_path, "datasets.py", """\
        from torchvision import datasets
        class CIFAR10:
            def __init__(self, path):
                self.train = datasets.CIFAR10(path, train=True, download=True)
        def get_dataset(name, **kwargs):
            if name == "cifar10":
                return CIFAR10(**kwargs)
        """)
    script = """\
        from datasets import get_dataset
        dist.init_process_group("nccl")
        data = get_dataset("cifar10", path="assets/cifar10")
        dist.destroy_process_group()
        """
    assert ("download-on-every-rank", len(HEAD.splitlines()) + 3) in _lint(tmp_path, script)
    # the project's own CIFAR10 called by its plain name is judged by its body (here: local files only)
    _write(tmp_path, "datasets.py", """\
        import numpy as np
        class CIFAR10:
            def __init__(self, path):
                self.train = np.load(path + "/train.npy")
        def get_dataset(name, **kwargs):
            return CIFAR10(**kwargs)
        """)
    assert "download-on-every-rank" not in [rule for rule, _ in _lint(tmp_path, script)]


def test_every_fetch_a_helper_makes_is_named_not_only_the_first(tmp_path):
    # A VQ tokenizer's loss: LPIPS() builds a torchvision VGG with pretrained weights and then fetches
    # its own linear layers' weights with a streamed requests.get; both are named.
    _write(tmp_path, "perceptual.py", """\
        import requests
        from torchvision import models
        def download(url, path):
            with requests.get(url, stream=True) as r, open(path, "wb") as f:
                f.write(r.content)
        def get_ckpt_path(name):
            download("https://example.org/" + name, name)
            return name
        class LPIPS:
            def __init__(self):
                self.net = models.vgg16(pretrained=True)
                self.load_from_pretrained()
            def load_from_pretrained(self):
                self.ckpt = get_ckpt_path("vgg.pth")
        """)
    script = """\
        from perceptual import LPIPS
        dist.init_process_group("nccl")
        loss = LPIPS()
        dist.destroy_process_group()
        """
    path = tmp_path / "train.py"
    path.write_text(HEAD + textwrap.dedent(script))
    [finding] = [f for f in lint_file(str(path), select=set(RULES)) if f.id == "download-on-every-rank"]
    assert "perceptual.py:11" in finding.related and "perceptual.py:4" in finding.related, finding.related


def test_a_method_of_a_trainer_object_built_in_a_project_function_is_followed(tmp_path):
    # train.py -> engine.run_training() builds `trainer = DDPTrainer(...)` (one per branch) and calls
    # trainer.train(), which ends the group (an anomaly-detection repository's engine.py) and fetches
    # a dataset on every rank: both are seen through the object's method.
    _write(tmp_path, "engine.py", """
        from datasets import load_dataset
        from torch.distributed import destroy_process_group
        class DDPTrainer:
            def __init__(self, model, dist):
                self.model, self.dist = model, dist
            def train(self):
                self.data = load_dataset("imdb")
                if self.dist:
                    destroy_process_group()
        def run_training(model, dist):
            if dist:
                trainer = DDPTrainer(model, dist=True)
                trainer.train()
            else:
                trainer = DDPTrainer(model, dist=False)
                trainer.train()
        """)
    _write(tmp_path, "setup.py", """
        import torch.distributed as dist
        def ddp_setup(rank, world_size):
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
        """)
    findings = _lint(tmp_path, """
    import os
    from setup import ddp_setup
    from engine import run_training
    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        ddp_setup(local_rank, int(os.environ["WORLD_SIZE"]))
        model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
        run_training(model, dist=True)
    if __name__ == "__main__":
        main()
    """)
    rules = {rule for rule, _ in findings}
    assert "no-destroy-process-group" not in rules
    assert ("download-on-every-rank", 13) in findings


def test_a_name_that_may_hold_something_else_is_not_taken_for_the_trainer(tmp_path):
    # `trainer = DDPTrainer(...)` in one branch, `trainer = load_trainer()` in the other: its
    # `trainer.train()` may be anything's, so DDPTrainer.train's fetch is not put on this call.
    _write(tmp_path, "engine.py", """
        from datasets import load_dataset
        class DDPTrainer:
            def train(self):
                self.data = load_dataset("imdb")
        def load_trainer():
            return None
        def run_training(resume):
            if resume:
                trainer = load_trainer()
            else:
                trainer = DDPTrainer()
            trainer.train()
        """)
    findings = _lint(tmp_path, """
    import os
    from engine import run_training
    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        run_training(resume=False)
        dist.destroy_process_group()
    if __name__ == "__main__":
        main()
    """)
    assert "download-on-every-rank" not in {rule for rule, _ in findings}


def _click_project(project, cleanup: bool) -> None:
    # main.py -> cli() (a click group); its `train` command, which nothing in the script calls by
    # name, starts the group with utils.setup() and ends it with utils.cleanup() (a segmentation
    # repository's sngp_segmentation/cli.py)
    _write(project, "seg/__init__.py", "")
    _write(project, "seg/utils.py", """
        import os
        import torch.distributed as dist
        def setup():
            dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        def cleanup():
            dist.destroy_process_group()
        """)
    _write(project, "seg/cli.py", f"""
        import click
        from .utils import cleanup, setup
        @click.group()
        def cli():
            pass
        @cli.command("train")
        @click.option("--epochs", default=10)
        def train(epochs):
            setup()
            print("training", epochs)
            {"cleanup()" if cleanup else "pass"}
        """)


def test_a_group_a_click_command_starts_and_ends_is_ended(tmp_path):
    _click_project(tmp_path, cleanup=True)
    findings = _lint(tmp_path, """
    from seg.cli import cli
    if __name__ == "__main__":
        cli()
    """)
    assert "no-destroy-process-group" not in {rule for rule, _ in findings}


def test_a_group_a_click_command_starts_and_never_ends_is_still_found(tmp_path):
    _click_project(tmp_path, cleanup=False)
    findings = _lint(tmp_path, """
    from seg.cli import cli
    if __name__ == "__main__":
        cli()
    """)
    assert "no-destroy-process-group" in {rule for rule, _ in findings}


def test_a_lightning_script_does_not_own_a_group_its_other_entry_points_start(tmp_path):
    # utils.setup_dist() starts a group for another entry point; this script hands DDP to
    # Lightning's Trainer, which starts and ends the group itself.
    _write(tmp_path, "utils.py", """
        import torch
        import torch.distributed as dist
        def instantiate(config):
            return torch.nn.Linear(2, 2)
        def setup_dist(local_rank):
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl", init_method="env://")
        """)
    script = """
    import pytorch_lightning as pl
    from utils import instantiate
    def main():
        model = instantiate({})
        trainer = pl.Trainer(accelerator="gpu", devices=4, strategy="ddp")
        trainer.fit(model)
    if __name__ == "__main__":
        main()
    """
    assert "no-destroy-process-group" not in {rule for rule, _ in _lint(tmp_path, script)}
    # the same script calling the helper itself starts the group it must end
    reached = script.replace("        model = instantiate({})", "        setup_dist(0)\n        model = instantiate({})")
    reached = reached.replace("from utils import instantiate", "from utils import instantiate, setup_dist")
    assert "no-destroy-process-group" in {rule for rule, _ in _lint(tmp_path, reached)}
