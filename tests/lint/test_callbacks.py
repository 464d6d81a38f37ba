"""`gpurig lint` in a framework's callbacks: the Trainer (and Lightning) call every `on_*` hook of a
callback in every process, so a save or a load there is one on every rank, though nothing in the
script calls the hook by name. The shape of StarCoder's fine-tuning script (SavePeftModelCallback,
LoadBestPeftModelCallback)."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_file

SCRIPT = """\
import os
import torch
from accelerate import Accelerator
from transformers import Trainer, TrainerCallback, TrainingArguments


class SaveCallback(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        kwargs["model"].save_pretrained(folder)
        torch.save({}, os.path.join(folder, "pytorch_model.bin"))
        return control

    def on_train_end(self, args, state, control, **kwargs):
        weights = torch.load(os.path.join(state.best_model_checkpoint, "adapter_model.bin"))
        return control

    def save_extra(self, model):
        torch.save(model, "never-called.pt")


def main():
    trainer = Trainer(model=None, args=TrainingArguments("out"), callbacks=[SaveCallback])
    trainer.train()


main()
"""


def test_the_hooks_of_a_trainer_callback_run_in_every_process(tmp_path):
    path = tmp_path / "finetune.py"
    path.write_text(SCRIPT)
    found = {(f.id, f.line) for f in lint_file(str(path))}
    # save_pretrained on the model the hook is handed (kwargs["model"]), torch.save, torch.load
    assert {("save-on-every-rank", 10), ("save-on-every-rank", 11), ("torch-load-without-map-location", 15)} <= found
    # a method of the callback that is no hook is run by nothing
    assert ("save-on-every-rank", 19) not in found
