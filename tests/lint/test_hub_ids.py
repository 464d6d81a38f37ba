"""`gpurig lint` telling a Hugging Face Hub id from a folder of this machine by the value an option
is given, not by its name: `--model_path` defaulting to "bigcode/starcoder" downloads, however much
its name sounds like a path; "model_hub/chinese-bert-wwm-ext" is a folder, however much it looks
like an `org/name`. Shapes met in real fine-tuning scripts (StarCoder's, Chinese-Vicuna's)."""

from __future__ import annotations

import textwrap

import pytest

from gpurig.diagnose.lint import lint_file
from gpurig.diagnose.lint_nodes import _HUB_ID

SCRIPT = """\
import argparse
import torch.distributed as dist
from datasets import load_dataset
from transformers import AutoModelForCausalLM
parser = argparse.ArgumentParser()
parser.add_argument("--model_path", type=str, default={model!r})
parser.add_argument("--dataset_name", type=str, default={data!r})
parser.add_argument("--subset", type=str, default="data/finetune")
args = parser.parse_args()
dist.init_process_group("nccl")
data = load_dataset(args.dataset_name, data_dir=args.subset, split="train")
model = AutoModelForCausalLM.from_pretrained(args.model_path)
dist.destroy_process_group()
"""


def _downloads(tmp_path, **values) -> list[int]:
    path = tmp_path / "finetune.py"
    path.write_text(SCRIPT.format(**values))
    return [f.line for f in lint_file(str(path), select={"download-on-every-rank"})]


def test_options_defaulting_to_hub_ids_download_whatever_their_names_say(tmp_path):
    assert _downloads(tmp_path, model="bigcode/starcoder", data="HuggingFaceH4/CodeAlpaca_20K") == [11, 12]


def test_options_defaulting_to_folders_of_this_machine_do_not(tmp_path):
    assert _downloads(tmp_path, model="model_hub/chinese-bert-wwm-ext", data="data/code_alpaca") == []


def test_a_hub_dataset_named_in_the_call_downloads_even_with_a_data_dir(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent("""\
        import torch.distributed as dist
        from datasets import load_dataset
        dist.init_process_group("nccl")
        code = load_dataset("bigcode/the-stack", data_dir="data/python", split="train")
        wiki = load_dataset("wikihow", "all", data_dir="./wikihow")
        dist.destroy_process_group()
        """))
    assert [f.line for f in lint_file(str(path), select={"download-on-every-rank"})] == [4]


@pytest.mark.parametrize("value, hub", [
    ("meta-llama/Llama-2-7b-hf", True), ("databricks/dolly-v2-3b", True), ("sentence-transformers/all-MiniLM-L6-v2", True),
    ("data/train", False), ("checkpoints/run1", False), ("saved_models/bert", False), ("org/train.json", False),
    ("./models/llama", False), ("/data/llama", False), ("gpt2", False),
])
def test_what_counts_as_a_hub_id(value, hub):
    assert (_HUB_ID.fullmatch(value) is not None) is hub
