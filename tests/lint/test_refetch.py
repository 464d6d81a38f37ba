"""`gpurig lint` and a second `from_pretrained` of the same files: once the first fetch has run in
every rank (the race it reports), a later one of the same class and source on its path reads the
cache, as the reference model of a DPO run built after the policy model (Firefly) or the base model
reloaded at each save to merge an adapter (OpenVLA). Other files of the same source (the config,
the tokenizer, a subfolder) race with it as one mistake: one finding that names their lines. A
fetch in a sibling branch or another function stays a finding of its own."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def _downloads(tmp_path, body: str) -> list[int]:
    path = tmp_path / "train.py"
    path.write_text("import torch.distributed as dist\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
                    "dist.init_process_group('nccl')\n" + textwrap.dedent(body) + "dist.destroy_process_group()\n")
    return [f.line for f in lint_file(str(path), select={"download-on-every-rank"})]


def test_the_same_model_fetched_again_later_on_its_path_is_one_finding(tmp_path):
    assert _downloads(tmp_path, """\
        def main(name, dpo):
            model = AutoModelForCausalLM.from_pretrained(name, torch_dtype="auto")
            if dpo:
                ref_model = AutoModelForCausalLM.from_pretrained(name, torch_dtype="auto")
            for step in range(3):
                base = AutoModelForCausalLM.from_pretrained(name)
        main("Qwen/Qwen2-7B", True)
        """) == [5]


def test_other_files_of_the_same_source_are_one_finding_that_names_every_line(tmp_path):
    # The tokenizer, the weights and each subfolder of one repository race in every rank as one
    # mistake with one fix (fetch it once before training): one finding, the other fetches its places.
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent("""\
        import torch.distributed as dist
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        dist.init_process_group('nccl')
        def main(name, other):
            cfg = AutoConfig.from_pretrained(name)
            tok = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, config=cfg)
            unet = AutoModelForCausalLM.from_pretrained(name, subfolder="unet")
            reward = AutoModelForCausalLM.from_pretrained(other)
        main("org/model", "org/reward")
        dist.destroy_process_group()
        """))
    found = lint_file(str(path), select={"download-on-every-rank"})
    assert [f.line for f in found] == [5, 9]
    assert found[0].related == ["train.py:6", "train.py:7", "train.py:8"]
    assert "from the same source at lines 6, 7, 8" in found[0].title
    assert found[1].related == []


def test_a_fetch_in_another_function_or_a_sibling_branch_is_not_on_its_path(tmp_path):
    assert _downloads(tmp_path, """\
        def train(name):
            return AutoModelForCausalLM.from_pretrained(name)
        def evaluate(name):
            return AutoModelForCausalLM.from_pretrained(name)
        def other(name, cond):
            if cond:
                print("first")
            else:
                AutoTokenizer.from_pretrained(name)
            AutoTokenizer.from_pretrained(name)
        train("org/model")
        evaluate("org/model")
        other("org/model", True)
        """) == [5, 7, 12, 13]
