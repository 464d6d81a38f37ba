"""hard-coded-rendezvous through the settings a project ships: MASTER_PORT set from a setting that
every JSON config beside the script (or in a config* folder of it) fixes to one port. Each project
is written for the test."""

from __future__ import annotations

import json
import textwrap

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import os
import torch.distributed as dist
import torch.multiprocessing as mp
import utils

def run(rank, n_gpus, hps):
    dist.init_process_group(backend="nccl", init_method="env://", world_size=n_gpus, rank=rank)
    dist.destroy_process_group()

def main():
    hps = utils.get_hparams()
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(hps.train.port)
    mp.spawn(run, nprocs=2, args=(2, hps))

if __name__ == "__main__":
    main()
"""


def project(tmp_path, *ports):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "utils.py").write_text("def get_hparams():\n    return None\n")
    folder = tmp_path / "configs_template"
    folder.mkdir()
    for i, port in enumerate(ports):
        (folder / f"config_{i}.json").write_text(json.dumps({"train": {"port": port, "epochs": 100}}))
    return tmp_path / "train.py"


def rendezvous(script) -> list[int]:
    return [f.line for f in lint_file(script) if f.id == "hard-coded-rendezvous"]


def test_master_port_from_a_setting_every_shipped_config_fixes(tmp_path):
    assert rendezvous(project(tmp_path, "8001", 8001)) == [13]


def test_master_port_from_a_setting_some_config_leaves_open(tmp_path):
    assert rendezvous(project(tmp_path, "8001", "")) == []


def test_master_port_from_a_setting_no_config_names(tmp_path):
    assert rendezvous(project(tmp_path)) == []


INIT = """\
import argparse
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

def worker(gpu, args):
    dist.init_process_group(backend="nccl", init_method=f"{args.dist_url}", world_size=2, rank=gpu)
    dist.destroy_process_group()

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="config/acdc/unet.yaml")
    args = parser.parse_args()
    args.__dict__.update(yaml.safe_load(open(args.config)))
    mp.spawn(worker, nprocs=2, args=(args,))
"""


def yaml_project(tmp_path, url: str, option_default: str | None = None):
    source = INIT if option_default is None else INIT.replace(
        '    args = parser.parse_args()', f'    parser.add_argument("--dist-url", default="{option_default}")\n    args = parser.parse_args()')
    (tmp_path / "train.py").write_text(source)
    folder = tmp_path / "config" / "acdc"
    folder.mkdir(parents=True)
    (folder / "unet.yaml").write_text(f"epochs: 100\ndist_url: {url}\nmultiprocessing_distributed: true\n")
    return tmp_path / "train.py"


def test_init_method_from_a_setting_a_shipped_yaml_config_fixes(tmp_path):
    assert rendezvous(yaml_project(tmp_path, "tcp://localhost:10000")) == [7]


def test_init_method_from_a_yaml_setting_left_to_the_environment(tmp_path):
    assert rendezvous(yaml_project(tmp_path, "env://")) == []


def test_a_fixed_option_default_is_the_one_finding_for_its_setting(tmp_path):
    # the script's own --dist-url default is reported; the config fixing the same setting is the same mistake
    assert rendezvous(yaml_project(tmp_path, "tcp://localhost:10000", option_default="tcp://127.0.0.1:23456")) == [13]


HF_SCRIPT = """\
from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

@dataclass
class ModelArguments:
    model_name_or_path: str = field(default=None)

def main():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    Trainer(model=model, args=training_args).train()

main()
"""


def launched_project(tmp_path, value: str):
    entry = tmp_path / "train" / "src"
    entry.mkdir(parents=True)
    (entry / "sft.py").write_text(HF_SCRIPT)
    scripts = tmp_path / "train" / "scripts"
    scripts.mkdir()
    (scripts / "run_sft.sh").write_text(f"model_name_or_path={value}  # or another\n"
                                        "torchrun --nproc_per_node 8 src/sft.py \\\n"
                                        "    --model_name_or_path ${model_name_or_path} \\\n    --output_dir out\n")
    return entry / "sft.py"


def downloads(script) -> list[int]:
    return [f.line for f in lint_file(script) if f.id == "download-on-every-rank"]


def test_a_model_the_shipped_launch_script_gives_as_a_local_folder_is_no_download(tmp_path):
    assert downloads(launched_project(tmp_path, "/path_to_llm/hf_llama_7b/")) == []


def test_a_model_the_shipped_launch_script_gives_as_a_hub_id_is_a_download(tmp_path):
    assert downloads(launched_project(tmp_path, "meta-llama/Llama-2-7b-hf")) == [11]


def test_a_rendezvous_option_nothing_reads_is_not_reported(tmp_path):
    # `--master_port` parsed but never read: the group starts from the launcher's env://
    script = tmp_path / "train.py"
    script.write_text("import argparse\nimport torch.distributed as dist\nparser = argparse.ArgumentParser()\n"
                      "parser.add_argument('--master_port', default='12355')\nargs = parser.parse_args()\n"
                      "dist.init_process_group('nccl', init_method='env://')\ndist.destroy_process_group()\n")
    assert not [f for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]
    # read in a project module (uer-py's initialize.py: init_method=args.master_ip): reported
    (tmp_path / "initialize.py").write_text("import torch.distributed as dist\n"
                                            "def init(args):\n    dist.init_process_group('nccl', init_method=args.master_port)\n")
    script.write_text(script.read_text().replace("import argparse\n", "import argparse\nfrom initialize import init\n"))
    assert [f.line for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"] == [5]


def test_master_port_from_a_constant_of_the_projects_settings_module(tmp_path):
    # IDDM's shape: config/setting.py holds MASTER_PORT = "12345"; the script imports it and writes it
    script = _files(tmp_path, {
        "config/__init__.py": "", "config/setting.py": "MASTER_ADDR = 'localhost'\nMASTER_PORT = '12345'\n",
        "train.py": "import os\nimport torch.distributed as dist\nfrom config.setting import MASTER_ADDR, MASTER_PORT\n"
                    "os.environ['MASTER_ADDR'] = MASTER_ADDR\nos.environ['MASTER_PORT'] = MASTER_PORT\n"
                    "dist.init_process_group('nccl', rank=0, world_size=1)\ndist.destroy_process_group()\n"})
    assert _rendezvous_places(script) == [(5, ["config/setting.py:2"])]


def _files(folder, files: dict[str, str]):
    """Write a small project; the path of the last file written (its script)."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder / rel


def _rendezvous_places(script) -> list:
    return [(f.line, f.related) for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]


def test_a_fixed_option_of_the_projects_parser_handed_to_its_launch_helper(tmp_path):
    # SlowFast's shape: parse_args() in slowfast/utils/parser.py defaults --init_method to
    # tcp://localhost:9999, and the script hands it to launch_job(), which spawns the workers that
    # start the group with it. One finding, at the first hand-over, naming the default's line.
    script = _files(tmp_path, {
        "utils/__init__.py": "",
        "utils/parser.py": "import argparse\ndef parse_args():\n    p = argparse.ArgumentParser()\n    p.add_argument(\n"
                           "        '--init_method',\n        default='tcp://localhost:9999',\n    )\n    return p.parse_args()\n",
        "utils/misc.py": "import torch.distributed as dist\nimport torch.multiprocessing as mp\n"
                         "def run(rank, init_method, func):\n"
                         "    dist.init_process_group('nccl', init_method=init_method, rank=rank, world_size=2)\n"
                         "    func()\n    dist.destroy_process_group()\n"
                         "def launch_job(init_method, func):\n    mp.spawn(run, nprocs=2, args=(init_method, func))\n",
        "run_net.py": "from utils.misc import launch_job\nfrom utils.parser import parse_args\n\ndef train():\n    pass\n\n"
                      "args = parse_args()\nlaunch_job(init_method=args.init_method, func=train)\n"
                      "launch_job(init_method=args.init_method, func=train)\n"})
    assert _rendezvous_places(script) == [(8, ["utils/parser.py:6"])]
    # handed to a function of the script itself, or of a library: not the project's launch helper
    script.write_text(script.read_text().replace("from utils.misc import launch_job\n", "from somelib import launch_job\n"))
    assert not [f for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]


def test_the_finding_names_the_line_of_each_shipped_config_that_fixes_the_address(tmp_path):
    # CompTransTTS's shape: two configs, each with its dist_url; the user is shown both lines.
    script = yaml_project(tmp_path, "tcp://localhost:54321")
    other = tmp_path / "config" / "ljspeech"
    other.mkdir()
    (other / "train.yaml").write_text("seed: 1234\ndist_url: tcp://localhost:54321\n")
    [finding] = [f for f in lint_file(script) if f.id == "hard-coded-rendezvous"]
    assert finding.related == ["config/acdc/unet.yaml:2", "config/ljspeech/train.yaml:2"]
    assert "'tcp://localhost:54321' at config/acdc/unet.yaml:2" in finding.title


HELPER_INIT = """\
import torch
from torch.distributed import init_process_group

def train(rank, args, hp):
    if args.num_gpus > 1:
        init_process_group(backend=hp.dist_config.dist_backend, init_method=hp.dist_config.dist_url,
                           world_size=hp.dist_config.world_size * args.num_gpus, rank=rank)
"""

HELPER_SCRIPT = """\
import torch.multiprocessing as mp
from utils.train import train

def main(args, hp):
    mp.spawn(train, nprocs=args.num_gpus, args=(args, hp))
"""


def test_a_project_module_starting_the_group_on_a_setting_every_shipped_config_fixes(tmp_path):
    # UnivNet / HiFi-GAN's shape: utils/train.py starts the group with init_method=hp.dist_config.dist_url,
    # and every shipped YAML fixes dist_url to one tcp:// address; the script only spawns train().
    def lint(address: str) -> list[tuple[int, str]]:
        (tmp_path / "utils").mkdir(exist_ok=True)
        (tmp_path / "utils" / "__init__.py").write_text("")
        (tmp_path / "utils" / "train.py").write_text(HELPER_INIT)
        (tmp_path / "config").mkdir(exist_ok=True)
        (tmp_path / "config" / "default.yaml").write_text(
            f'train:\n  batch_size: 16\ndist_config:\n  dist_backend: "nccl"\n  dist_url: "{address}"\n  world_size: 1\n')
        (tmp_path / "trainer.py").write_text(HELPER_SCRIPT)
        return [(f.line, f.title) for f in lint_file(str(tmp_path / "trainer.py")) if f.id == "hard-coded-rendezvous"]

    found = lint("tcp://localhost:54321")
    assert len(found) == 1 and "'tcp://localhost:54321'" in found[0][1] and "utils/train.py:6" in found[0][1]
    assert lint("env://") == []


def test_a_fixed_port_option_names_where_the_script_builds_its_address_from_it(tmp_path):
    # The finding stands at the option's default; the user is also shown the line that turns it into
    # the rendezvous (the judged place in some scripts, and the one to change in others).
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import argparse
        import torch.distributed as dist
        import torch.multiprocessing as mp
        parser = argparse.ArgumentParser()
        parser.add_argument("--port", type=int, default=12361)
        args = parser.parse_args()

        def setup(rank, world_size):
            dist.init_process_group(backend="nccl",
                                    init_method=f"tcp://127.0.0.1:{args.port}",
                                    world_size=world_size, rank=rank)
            dist.destroy_process_group()

        if __name__ == "__main__":
            print("port", args.port)
            mp.spawn(setup, args=(2,), nprocs=2)
        """))
    [f] = [f for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]
    assert (f.line, f.related) == (5, ["train.py:10"])
    assert "(used at train.py:10)" in f.title


def test_a_fixed_address_in_the_scripts_config_class_passed_to_a_helper(tmp_path):
    # `class MNISTConfig: init_method: str = 'tcp://127.0.0.1:23456'`, then utils.dist_setup_launch(args)
    # calls init_process_group(args.backend, args.init_method, ...): the script fixes the address
    (tmp_path / "utils.py").write_text(textwrap.dedent("""
        import os
        import torch.distributed as dist
        def dist_setup_launch(args):
            args.rank = int(os.environ["RANK"])
            dist.init_process_group(args.backend, args.init_method, rank=args.rank, world_size=args.world_size)
        """))
    script = tmp_path / "main_launch.py"
    script.write_text(textwrap.dedent("""
        from dataclasses import dataclass
        import torch.distributed as dist
        from utils import dist_setup_launch

        @dataclass
        class MNISTConfig:
            backend: str = "nccl"
            init_method: str = "tcp://127.0.0.1:23456"
            world_size: int = 2

        if __name__ == "__main__":
            args = MNISTConfig()
            dist_setup_launch(args)
            dist.destroy_process_group()
        """))
    found = [f for f in lint_file(str(script)) if f.id == "hard-coded-rendezvous"]
    assert [f.line for f in found] == [14] and "main_launch.py:9" in found[0].related
