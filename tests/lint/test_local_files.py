"""`gpurig lint` reading what a load names: PEFT's `PeftModel.from_pretrained(model, adapter_dir)`
names its adapter second (the first is the model object), and the parts of a Trainer checkpoint
that hold no CUDA tensor (scheduler.pt, rng_state.pth, training_args.bin) need no map_location.
Shapes met in real fine-tuning scripts (OpenVLA's, a Qwen LoRA classifier's)."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_source

SCRIPT = """\
import os
import torch
import torch.distributed as dist
from peft import PeftModel
from transformers import AutoModelForCausalLM
dist.init_process_group("nccl")
base = AutoModelForCausalLM.from_pretrained("./models/base")
model = PeftModel.from_pretrained(base, {adapter})
scheduler_state = torch.load(os.path.join("out", {part!r}))
dist.destroy_process_group()
"""


def _found(**values) -> set[tuple[str, int]]:
    return {(f.id, f.line) for f in lint_source(textwrap.dedent(SCRIPT.format(**values)), "<script>")
            if f.id in ("download-on-every-rank", "torch-load-without-map-location")}


def test_a_peft_adapter_is_judged_by_its_own_argument():
    assert ("download-on-every-rank", 8) not in _found(adapter="adapter_dir", part="scheduler.pt")
    assert ("download-on-every-rank", 8) in _found(adapter='"tloen/alpaca-lora-7b"', part="scheduler.pt")


def test_checkpoint_parts_without_cuda_tensors_need_no_map_location():
    for part in ("scheduler.pt", "rng_state.pth", "training_args.bin"):
        assert ("torch-load-without-map-location", 9) not in _found(adapter="adapter_dir", part=part)
    for part in ("optimizer.pt", "pytorch_model.bin"):
        assert ("torch-load-without-map-location", 9) in _found(adapter="adapter_dir", part=part)


def test_a_helper_writing_a_file_of_its_own_name_in_the_folder_it_is_given(tmp_path):
    # IDDM's save_train_logging(arg, save_path): open(file=f"{save_path}/train.log", mode="a") on
    # every rank appends to one file; a folder with the rank in it is a file per rank
    (tmp_path / "utils.py").write_text(
        "import time\n"
        "def save_train_logging(arg, save_path):\n"
        "    with open(file=f\"{save_path}/train.log\", mode=\"a\") as f:\n"
        "        f.write(f\"{time.time()}: {arg}\\n\")\n")
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\nfrom utils import save_train_logging\n"
                      "dist.init_process_group('nccl')\nsave_train_logging(arg=None, save_path='results')\n"
                      "dist.destroy_process_group()\n")
    from gpurig.diagnose.lint import lint_file

    assert [f.line for f in lint_file(str(script)) if f.id == "save-on-every-rank"] == [4]
    (tmp_path / "utils.py").write_text((tmp_path / "utils.py").read_text().replace(
        "{save_path}/train.log", "{save_path}/train_{dist.get_rank()}.log"))
    assert [f.line for f in lint_file(str(script)) if f.id == "save-on-every-rank"] == []


def test_names_that_say_a_path_or_a_checkpoint_of_this_run_are_local():
    # an adapter's path (MedicalGPT's --peft_path), and the checkpoint a Trainer wrote (SimCSE's
    # load of state.best_model_checkpoint at the end): folders of this machine, no download
    for name in ("args.peft_path", "args.lora_path", "self.state.best_model_checkpoint", "last_checkpoint"):
        assert _found(adapter=name, part="scheduler.pt") == set(), name
    # a name that says neither may be a Hub id
    assert _found(adapter="args.adapter_name", part="scheduler.pt") == {("download-on-every-rank", 8)}
