"""Findings in different branches of one if / elif / else are one mistake: only one branch runs.
`if args.config_name: AutoConfig.from_pretrained(args.config_name) elif ...:
AutoConfig.from_pretrained(args.model_name_or_path)` fetches one config in every rank, and the
user is told so once, at the first branch, with the other branches' lines named."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file, lint_source

HEAD = """\
import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModel, AutoTokenizer

dist.init_process_group("nccl")
"""
TAIL = "dist.destroy_process_group()\n"


def lines(related: list[str]) -> list[int]:
    return [int(r.rpartition(":")[2]) for r in related]


def downloads(body: str, path=None):
    source = HEAD + textwrap.dedent(body) + TAIL
    found = lint_source(source, "train.py") if path is None else None
    if path is not None:
        path.write_text(source)
        found = lint_file(str(path))
    return [f for f in found if f.id == "download-on-every-rank"]


def test_alternative_branches_are_one_finding_that_names_the_others():
    found = downloads("""\
        if args.config_name:
            config = AutoConfig.from_pretrained(args.config_name)
        elif args.model_name_or_path:
            config = AutoConfig.from_pretrained(args.model_name_or_path)
        else:
            config = AutoConfig.from_pretrained("bert-base-uncased")
        """)
    assert [f.line for f in found] == [7]
    assert lines(found[0].related) == [9, 11]
    assert ":9, " in found[0].title and found[0].title.endswith(":11, in the other branches of the same if: one of them runs)")


def test_two_downloads_in_one_branch_stay_two_findings():
    """A tokenizer and a model of two sources fetched in the same branch are two fetches that both run."""
    found = downloads("""\
        if args.fast:
            tok = AutoTokenizer.from_pretrained("bert-base-uncased")
            model = AutoModel.from_pretrained("prajjwal1/bert-tiny")
        else:
            model = AutoModel.from_pretrained("roberta-base")
        """)
    assert [f.line for f in found] == [7, 8]
    assert lines(found[0].related) == [10] and found[1].related == []


def test_downloads_that_both_run_are_not_folded():
    """Not alternatives: a fetch before the if and one in it both run."""
    found = downloads("""\
        tok = AutoTokenizer.from_pretrained("bert-base-uncased")
        if args.big:
            model = AutoModel.from_pretrained("bert-large-uncased")
        """)
    assert [f.line for f in found] == [6, 8]
    assert all(not f.related for f in found)


def test_a_chain_inside_a_branch_is_folded_within_itself():
    """The innermost if holding a fetch is the one whose branches are alternatives."""
    found = downloads("""\
        if args.hub:
            if args.big:
                model = AutoModel.from_pretrained("bert-large-uncased")
            else:
                model = AutoModel.from_pretrained("bert-base-uncased")
            tok = AutoTokenizer.from_pretrained("bert-base-uncased")
        else:
            tok = AutoTokenizer.from_pretrained("roberta-base")
        """)
    assert [f.line for f in found] == [8, 11]
    assert lines(found[0].related) == [10]
    assert lines(found[1].related) == [13]


def test_a_big_script_read_in_groups_folds_the_same(tmp_path, monkeypatch):
    from gpurig.diagnose import lint

    monkeypatch.setattr(lint, "STREAM_BYTES", 10)  # read one group of top-level statements at a time
    found = downloads("""\
        if args.config_name:
            config = AutoConfig.from_pretrained(args.config_name)
        else:
            config = AutoConfig.from_pretrained(args.model_name_or_path)
        """, path=tmp_path / "train.py")
    assert [(f.line, f.related) for f in found] == [(7, ["train.py:9"])]


def test_saves_in_alternative_branches_are_one_finding():
    source = HEAD + textwrap.dedent("""\
        model = torch.nn.Linear(2, 2)
        if args.best:
            torch.save(model.state_dict(), "best.pt")
        else:
            torch.save(model.state_dict(), "last.pt")
        """) + TAIL
    found = [f for f in lint_source(source, "train.py") if f.id == "save-on-every-rank"]
    assert [(f.line, lines(f.related)) for f in found] == [(8, [10])]

