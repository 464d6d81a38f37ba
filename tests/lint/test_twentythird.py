"""What the twenty-third round of real scripts taught. A port written `str(2345)` is a fixed port,
and so is one a helper class's `__init__` puts into the environment before the script starts the
group itself. A Hub dataset loaded twice (its train and test splits) is downloaded once; a model
name put under a folder of this machine (`'../pretrained_models/' + name`), or a path a helper sets
to a constant folder, is no download. The branch of a switch every caller leaves off (`if
pretrained:` in a copy of torchvision's ResNet the project builds as `resnet18()`) never runs, and
nothing after an unconditional `raise` runs. Each case is a small script in the shape of the public
code it comes from (HPC centres' examples, distillation, recommendation and music-generation
repositories); the expected findings are what a careful reader says."""

from __future__ import annotations

from tests.lint.lintcase import found

from gpurig.diagnose.lint import lint_file

# An HPC centre's example: mpi4py ranks turned into torch.distributed's environment.
PORT_SET_BY_THE_SCRIPT = """\
import os
import torch.distributed as dist
from mpi4py import MPI

RANK = MPI.COMM_WORLD.Get_rank()
os.environ["RANK"] = str(RANK)
os.environ["MASTER_ADDR"] = "node0"
os.environ["MASTER_PORT"] = THE_PORT
dist.init_process_group(backend="nccl", init_method="env://")
dist.destroy_process_group()
"""


def test_a_port_written_as_str_of_a_number_is_fixed(tmp_path):
    for port in ("str(2345)", '"2345"', 'f"{2345}"'):
        assert found(tmp_path, PORT_SET_BY_THE_SCRIPT.replace("THE_PORT", port), "hard-coded-rendezvous") == [
            ("hard-coded-rendezvous", 8)], port
    assert found(tmp_path, PORT_SET_BY_THE_SCRIPT.replace("THE_PORT", "str(args.port)"), "hard-coded-rendezvous") == []


# A supercomputer's example: a helper class reads Slurm's variables into torch's, port included.
ENVIRON_HELPER = {"pt_distr_env.py": """\
import os


class DistributedEnviron():
    def __init__(self):
        self._setup_distr_env()
        self.local_rank = int(os.environ["LOCAL_RANK"])

    def _setup_distr_env(self):
        os.environ["MASTER_ADDR"] = os.environ["SLURM_LAUNCH_NODE_IPADDR"]
        os.environ["MASTER_PORT"] = THE_PORT
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
"""}
SCRIPT_WITH_ENVIRON_HELPER = """\
import torch
import torch.distributed as dist
from pt_distr_env import DistributedEnviron

distr_env = DistributedEnviron()
dist.init_process_group(backend="nccl")
torch.cuda.set_device(distr_env.local_rank)
dist.destroy_process_group()
"""


def test_a_helper_class_fixing_master_port_before_the_script_starts_the_group(tmp_path):
    helper = {"pt_distr_env.py": ENVIRON_HELPER["pt_distr_env.py"].replace("THE_PORT", "'39591'")}
    assert found(tmp_path, SCRIPT_WITH_ENVIRON_HELPER, "hard-coded-rendezvous", helper) == [("hard-coded-rendezvous", 5)]
    [finding] = lint_file(str(tmp_path / "train.py"), select={"hard-coded-rendezvous"})
    assert "'39591' at pt_distr_env.py:11" in finding.title and "DistributedEnviron()" in finding.title


def test_a_helper_class_taking_the_port_from_slurm_is_fine(tmp_path):
    helper = {"pt_distr_env.py": ENVIRON_HELPER["pt_distr_env.py"].replace("THE_PORT", 'os.environ["SLURM_PORT"]')}
    assert found(tmp_path, SCRIPT_WITH_ENVIRON_HELPER, "hard-coded-rendezvous", helper) == []


# A workshop's fine-tuning script: the IMDb dataset loaded for training, then for evaluation.
DATASET_TWICE = """\
import os
import torch.distributed as dist
from datasets import load_dataset

dist.init_process_group("nccl")
train_dataset = load_dataset("imdb", split="train+unsupervised")
eval_dataset = load_dataset(SECOND)
dist.destroy_process_group()
"""


def test_a_hub_dataset_loaded_again_for_another_split_is_one_download(tmp_path):
    assert found(tmp_path, DATASET_TWICE.replace("SECOND", '"imdb", split="test"'), "download-on-every-rank") == [
        ("download-on-every-rank", 6)]
    # another dataset, or another configuration of it, is another download
    assert found(tmp_path, DATASET_TWICE.replace("SECOND", '"glue", "sst2", split="test"'), "download-on-every-rank") == [
        ("download-on-every-rank", 6), ("download-on-every-rank", 7)]
    assert found(tmp_path, DATASET_TWICE.replace("SECOND", '"imdb", name="plain_text_v2"'), "download-on-every-rank") == [
        ("download-on-every-rank", 6), ("download-on-every-rank", 7)]


# A recommendation study: BERT or RoBERTa from a folder the README has users fill first.
UNDER_A_LOCAL_FOLDER = """\
import torch.distributed as dist
from transformers import RobertaModel


def train(args):
    bert_model_load = PATH
    bert_model = RobertaModel.from_pretrained(bert_model_load)


dist.init_process_group("nccl")
train(parse())
dist.destroy_process_group()
"""


def test_a_model_name_under_a_folder_of_this_machine_is_no_download(tmp_path):
    for path in ("'../pretrained_models/' + args.bert_model_load", "f'/data/models/{args.name}'",
                 "'./weights/' + args.name + '/hf'"):
        assert found(tmp_path, UNDER_A_LOCAL_FOLDER.replace("PATH", path), "download-on-every-rank") == [], path
    # a Hub organisation put before the name is a Hub id: every rank downloads
    assert found(tmp_path, UNDER_A_LOCAL_FOLDER.replace("PATH", "'facebook/' + args.name"), "download-on-every-rank") == [
        ("download-on-every-rank", 7)]


# Music generation: the text encoder's helper ignores the Hub id it is given and loads a fixed folder.
LOCAL_FOLDER_HELPER = {"conditioner.py": """\
from transformers import T5EncoderModel


class HFEmbedder:
    def __init__(self, version):
        local_path = WHERE
        self.hf_module = T5EncoderModel.from_pretrained(local_path)
"""}
MUSIC_SCRIPT = """\
import torch.distributed as dist
from conditioner import HFEmbedder

dist.init_process_group("nccl")
t5 = HFEmbedder("google/t5-v1_1-xxl")
dist.destroy_process_group()
"""


def test_a_helper_loading_from_a_constant_folder_of_this_machine_downloads_nothing(tmp_path):
    helper = {"conditioner.py": LOCAL_FOLDER_HELPER["conditioner.py"].replace("WHERE", "'/maindata/ckpts/text_encoder_3'")}
    assert found(tmp_path, MUSIC_SCRIPT, "download-on-every-rank", helper) == []
    helper = {"conditioner.py": LOCAL_FOLDER_HELPER["conditioner.py"].replace("WHERE", "version")}
    assert found(tmp_path, MUSIC_SCRIPT, "download-on-every-rank", helper) == [("download-on-every-rank", 5)]


# Knowledge distillation: a copy of torchvision's ResNet; the student is built as `resnet18()`.
RESNET_COPY = {"models/__init__.py": "", "models/resnet.py": """\
from torch.hub import load_state_dict_from_url

model_urls = {"resnet18": "https://download.pytorch.org/models/resnet18-5c106cde.pth"}


class ResNet:
    def __init__(self, layers, **kwargs):
        self.layers = layers


def _resnet(arch, layers, pretrained, progress, **kwargs):
    model = ResNet(layers, **kwargs)
    if pretrained:
        model.load_state_dict(load_state_dict_from_url(model_urls[arch], progress=progress))
    return model


def resnet18(pretrained=False, progress=True, **kwargs):
    return _resnet("resnet18", [2, 2, 2, 2], pretrained, progress, **kwargs)


def resnet50(pretrained=False, progress=True, **kwargs):
    return _resnet("resnet50", [3, 4, 6, 3], pretrained, progress, **kwargs)
""", "models/kd.py": """\
from models.resnet import resnet18


def build_student(name):
    return resnet18(BUILD)
"""}
KD_SCRIPT = """\
import torch.distributed as dist
from models.kd import build_student

dist.init_process_group("nccl")
model = build_student("resnet18")
dist.destroy_process_group()
"""


def test_a_switch_every_caller_leaves_off_keeps_its_download_from_running(tmp_path):
    files = {k: v.replace("BUILD", "") for k, v in RESNET_COPY.items()}
    assert found(tmp_path, KD_SCRIPT, "download-on-every-rank", files) == []
    for given in ("pretrained=False", "None"):
        files = {k: v.replace("BUILD", given) for k, v in RESNET_COPY.items()}
        assert found(tmp_path, KD_SCRIPT, "download-on-every-rank", files) == [], given


def test_a_switch_a_caller_turns_on_downloads_in_every_rank(tmp_path):
    for given in ("pretrained=True", "True", "pretrained=args.pretrained"):
        files = {k: v.replace("BUILD", given).replace("def build_student(name)", "def build_student(name, args=None)")
                 for k, v in RESNET_COPY.items()}
        assert found(tmp_path, KD_SCRIPT, "download-on-every-rank", files) == [("download-on-every-rank", 5)], given


def test_a_switch_that_a_call_by_lookup_gives_stays_on(tmp_path):
    # `models.__dict__[arch](pretrained=True)` may build the copy's resnet50: _resnet's switch is on
    files = {k: v.replace("BUILD", "") for k, v in RESNET_COPY.items()}
    files["models/__init__.py"] = "from models.resnet import resnet18, resnet50\n"
    script = KD_SCRIPT.replace('model = build_student("resnet18")',
                               'import models\nteacher = models.__dict__["resnet50"](pretrained=True)')
    assert found(tmp_path, script, "download-on-every-rank", files) == [("download-on-every-rank", 6)]


# Low-rank pretraining: the FSDP path was retired with a `raise` at its top; its save stays below.
RETIRED_PATH = """\
import torch.distributed as dist


def save_model_fsdp(model, save_dir):
    RETIRE
    model.module.save_pretrained(save_dir)


dist.init_process_group("nccl")
model = build()
save_model_fsdp(model, "out")
dist.destroy_process_group()
"""


def test_nothing_after_an_unconditional_raise_runs(tmp_path):
    retired = RETIRED_PATH.replace("RETIRE", 'raise RuntimeError("FSDP is not supported anymore.")')
    assert found(tmp_path, retired, "save-on-every-rank") == []
    # a raise under a condition leaves the rest of the function running on every rank
    conditional = RETIRED_PATH.replace("RETIRE", 'if save_dir is None:\n        raise ValueError("no folder")')
    assert found(tmp_path, conditional, "save-on-every-rank") == [("save-on-every-rank", 7)]


# LLM pruning's LoRA recovery (alpaca-lora's shape): the Trainer starts the group; the script only
# reads the launcher's WORLD_SIZE to split its gradient accumulation, and is run with torchrun.
ALPACA_LORA_SHAPE = """\
import os
import torch
import transformers
from datasets import load_dataset


def main(args):
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    ddp = world_size != 1
    if ddp:
        args.accumulation = args.accumulation // world_size
    data = load_dataset(args.data_path)
    if args.cache_dataset and os.path.exists("datasets/cache/{}.bin".format(args.data_path)):
        data = torch.load("datasets/cache/{}.bin".format(args.data_path))
    trainer = transformers.Trainer(model=args.model, train_dataset=data["train"])
    trainer.train()
    args.model.save_pretrained(args.output_dir)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_path", type=str, default="yahma/alpaca-cleaned")
    main(parser.parse_args())
"""


def test_a_script_reading_the_launchers_world_size_runs_in_every_rank(tmp_path):
    assert found(tmp_path, ALPACA_LORA_SHAPE, "download-on-every-rank") == [("download-on-every-rank", 12)]
    assert found(tmp_path, ALPACA_LORA_SHAPE, "save-on-every-rank") == [("save-on-every-rank", 17)]
    # without the launcher's variables nothing says more than one process runs it
    single = ALPACA_LORA_SHAPE.replace('int(os.environ.get("WORLD_SIZE", 1))', "1")
    assert found(tmp_path, single, "download-on-every-rank") == []


def test_a_file_in_a_datasets_folder_is_data_not_a_checkpoint(tmp_path):
    assert found(tmp_path, ALPACA_LORA_SHAPE, "torch-load-without-map-location") == []
    checkpoint = ALPACA_LORA_SHAPE.replace('torch.load("datasets/cache/{}.bin"', 'torch.load("checkpoints/{}.bin"')
    assert found(tmp_path, checkpoint, "torch-load-without-map-location") == [("torch-load-without-map-location", 14)]


def test_the_same_dataset_on_two_branches_is_one_finding_naming_both(tmp_path):
    branches = DATASET_TWICE.replace(
        'train_dataset = load_dataset("imdb", split="train+unsupervised")\neval_dataset = load_dataset(SECOND)',
        'if FULL:\n    data = load_dataset("imdb")\nelse:\n    data = load_dataset("imdb", split="train[:100]")')
    assert found(tmp_path, branches, "download-on-every-rank") == [("download-on-every-rank", 7)]
    [finding] = lint_file(str(tmp_path / "train.py"), select={"download-on-every-rank"})
    assert "train.py:9" in finding.related


def test_nothing_after_an_unconditional_raise_runs_in_a_project_helper_either(tmp_path):
    helper = {"saving.py": """\
        import torch


        def save_model_fsdp(model, save_dir):
            RETIRE
            torch.save(model.state_dict(), save_dir + "/model.pt")
        """}
    script = """\
    import torch.distributed as dist
    from saving import save_model_fsdp

    dist.init_process_group("nccl")
    model = build()
    save_model_fsdp(model, "out")
    dist.destroy_process_group()
    """
    retired = {k: v.replace("RETIRE", 'raise RuntimeError("FSDP is not supported anymore.")') for k, v in helper.items()}
    assert found(tmp_path, script, "save-on-every-rank", retired) == []
    kept = {k: v.replace("RETIRE", "model = model") for k, v in helper.items()}
    assert found(tmp_path, script, "save-on-every-rank", kept) == [("save-on-every-rank", 6)]
