"""A helper the script imports from one of several modules, picked by a setting (`if 'cifar' in
config.dataset: from datasets.cifar import get_datasets` / `elif 'imagenet' ...: from
datasets.imagenet import get_datasets`), may be either: what the one that downloads does is said at
its call, whichever import comes last. A name imported from one module still says nothing of another
module's function of that name. Each project is written for the test."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_file

CIFAR = """\
import torchvision.datasets as dset


def get_datasets(config):
    dset_cls = dset.CIFAR10 if config.dataset == "cifar10" else dset.CIFAR100
    return dset_cls(root=config.data_dir, train=True, download=True)
"""

IMAGENET = """\
import torchvision.datasets as dset


def get_datasets(config):
    return dset.ImageFolder(config.data_dir)
"""

SCRIPT = """\
import os

import torch
import torch.distributed as dist

{imports}


def main(config):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    data = get_datasets(config)
    dist.destroy_process_group()
    return data
"""

EITHER = """\
DATASET = os.environ.get("DATASET", "cifar10")
if "cifar" in DATASET:
    from datasets.cifar import get_datasets
elif "imagenet" in DATASET:
    from datasets.imagenet import get_datasets"""


def _downloads(tmp_path, imports: str) -> list[str]:
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "__init__.py").write_text("")
    (tmp_path / "datasets" / "cifar.py").write_text(CIFAR)
    (tmp_path / "datasets" / "imagenet.py").write_text(IMAGENET)
    script = tmp_path / "search.py"
    script.write_text(SCRIPT.format(imports=imports))
    return [f.code for f in lint_file(str(script)) if f.id == "download-on-every-rank"]


def test_the_helper_of_either_import_is_the_one_that_downloads(tmp_path):
    assert _downloads(tmp_path, EITHER) == ["data = get_datasets(config)"]


def test_imported_from_the_other_module_alone_it_does_not_download(tmp_path):
    assert _downloads(tmp_path, "from datasets.imagenet import get_datasets") == []
