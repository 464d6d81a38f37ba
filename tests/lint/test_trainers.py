"""Hugging Face Trainer scripts: any Trainer of the family (Seq2SeqTrainer, TRL's SFTTrainer, a
project's own subclass) read from the command line by HfArgumentParser / TrlParser runs in every
process torchrun or deepspeed starts; `trainer.is_world_process_zero()` picks one of them."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file, lint_source

SCRIPT = """\
import os
from transformers import AutoModel, AutoTokenizer, HfArgumentParser, Seq2SeqTrainingArguments
from trainer_seq2seq import Seq2SeqTrainer

def main():
    parser = HfArgumentParser((Seq2SeqTrainingArguments,))
    (training_args,) = parser.parse_args_into_dataclasses()
    tokenizer = AutoTokenizer.from_pretrained("org/model")
    model = AutoModel.from_pretrained("org/model")
    trainer = Seq2SeqTrainer(model=model, args=training_args, tokenizer=tokenizer)
    trainer.train()
    if trainer.is_world_process_zero():
        with open(os.path.join(training_args.output_dir, "predictions.txt"), "w") as out:
            out.write("done")

if __name__ == "__main__":
    main()
"""


def found(source: str) -> list[tuple[str, int]]:
    return [(f.id, f.line) for f in lint_source(textwrap.dedent(source), "<script>")]


def test_a_trainer_of_the_family_read_by_hfargumentparser_runs_on_every_rank():
    # (the tokenizer and the model of one Hub id: one download mistake, at the first fetch)
    assert found(SCRIPT) == [("download-on-every-rank", 8)]
    trl = SCRIPT.replace("HfArgumentParser", "TrlParser").replace("Seq2SeqTrainer(", "SFTTrainer(")
    assert found(trl) == [("download-on-every-rank", 8)]


def test_is_world_process_zero_picks_one_rank():
    unguarded = SCRIPT.replace("    if trainer.is_world_process_zero():\n", "    if True:\n")
    assert ("save-on-every-rank", 13) in found(unguarded)
    assert ("save-on-every-rank", 13) not in found(SCRIPT)


def test_without_a_command_line_parser_it_is_not_judged_a_launched_script():
    plain = SCRIPT.replace("    parser = HfArgumentParser((Seq2SeqTrainingArguments,))\n    (training_args,) = "
                           "parser.parse_args_into_dataclasses()\n", "    training_args = Seq2SeqTrainingArguments('out')\n")
    assert found(plain) == []


def test_accelerates_process_index_compared_with_zero_picks_one_rank():
    source = """\
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    if accelerator.local_process_index == 0:
        torch.save({}, "ckpt/last.pt")
    torch.save({}, "ckpt/every.pt")
    """
    assert [f for f in found(source) if f[0] == "save-on-every-rank"] == [("save-on-every-rank", 7)]


def test_a_leader_process_check_picks_one_rank():
    source = """\
    import torch
    import torch.distributed as dist
    from utils import is_leader_process

    dist.init_process_group("nccl")
    if is_leader_process():
        torch.save({}, "args.pt")
    dist.destroy_process_group()
    """
    assert [f for f in found(source) if f[0] == "save-on-every-rank"] == []


SAVING_TRAINER = """\
import os
import torch
from transformers import HfArgumentParser, Trainer, TrainingArguments


class SavePeftModelTrainer(Trainer):
    def save_model(self, output_dir=None, _internal_call=False):
        os.makedirs(output_dir, exist_ok=True)
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))
        self.model.save_pretrained(output_dir)


def save_model(model, args):
    model.save_pretrained(args.output_dir)


def main():
    (args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
    trainer = SavePeftModelTrainer(model=None, args=args)
    trainer.train()
    if trainer.is_world_process_zero():
        save_model(trainer.model, args)


main()
"""


def test_a_trainers_save_model_override_saves_on_every_rank(tmp_path):
    """MedicalGPT's shape: the Trainer's checkpointing calls save_model in every process, and this
    override writes with no should_save check; the file's own save_model, called on rank 0 only,
    is another function and stays quiet."""
    script = tmp_path / "sft.py"
    script.write_text(SAVING_TRAINER)
    assert [f.line for f in lint_file(str(script)) if f.id == "save-on-every-rank"] == [9, 10]
    # an override that checks should_save itself is right
    script.write_text(SAVING_TRAINER.replace("        os.makedirs(output_dir, exist_ok=True)\n",
                                             "        if not self.args.should_save:\n            return\n"))
    assert [f.line for f in lint_file(str(script)) if f.id == "save-on-every-rank"] == []


def test_a_callbacks_save_names_the_object_it_saves():
    """A TrainerCallback's hooks run in every process; the finding names what is saved as the
    script writes it (`kwargs['model'].save_pretrained()`), not a name with the key dropped."""
    source = SCRIPT.replace("def main():", textwrap.dedent("""\
        from transformers import TrainerCallback

        class SaveAdapter(TrainerCallback):
            def on_train_end(self, args, state, control, **kwargs):
                kwargs["model"].save_pretrained(args.output_dir)

        def main():"""))
    saves = [f for f in lint_source(source, "<script>") if f.id == "save-on-every-rank"]
    assert [f.line for f in saves] == [9]
    assert "kwargs['model'].save_pretrained() runs on every rank" in saves[0].title
