"""Where one rank goes first and the others follow (`with main_process_first():`, the barrier pair
`if rank != 0: barrier()` ... `if rank == 0: barrier()`): the others fetch from the first one's
cache, but what the section writes, each of them writes again; and the section ends at the second
barrier. Also writes of a Hugging Face dataset, and a destroy that only an exception reaches."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_source

HEAD = """\
import json
import torch
import torch.distributed as dist
from datasets import load_dataset
"""


def found(body: str) -> list[tuple[str, int]]:
    return [(f.id, f.line) for f in lint_source(HEAD + textwrap.dedent(body), "<script>")]


def test_in_a_main_process_first_section_fetches_are_shared_but_writes_are_not():
    body = """\
    dist.init_process_group("nccl")
    with training_args.main_process_first(desc="vocab"):
        raw = load_dataset("org/speech")
        with open("out/vocab.json", "w") as f:
            json.dump([], f)
    dist.destroy_process_group()
    """
    assert found(body) == [("save-on-every-rank", 8)]


def test_the_barrier_pair_ends_the_section_where_rank_zero_goes_first():
    body = """\
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank != 0:
        dist.barrier()
    data = load_dataset("org/corpus")
    if rank == 0:
        dist.barrier()
    torch.save({}, "final.pt")
    dist.destroy_process_group()
    """
    assert found(body) == [("save-on-every-rank", 12)]


def test_save_to_disk_on_every_rank_writes_one_folder():
    body = """\
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    data = load_dataset("json", data_files="train.jsonl")
    data.save_to_disk("cache/tokenized")
    data.save_to_disk(f"cache/tokenized_{rank}")
    if rank == 0:
        data.save_to_disk("cache/final")
    dist.destroy_process_group()
    """
    assert found(body) == [("save-on-every-rank", 8)]


def test_a_destroy_only_an_exception_reaches_is_no_destroy():
    body = """\
    def main():
        dist.init_process_group("nccl")
        try:
            torch.zeros(1)
        except KeyboardInterrupt:
            dist.destroy_process_group()
    main()
    """
    assert ("no-destroy-process-group", 6) in found(body)
    assert found(body.replace("    except KeyboardInterrupt:", "    finally:")) == []


def test_a_cleanup_function_only_exception_handlers_call_is_no_destroy():
    # WaveGrad's shape: cleanup() destroys the group, but only `except KeyboardInterrupt:` calls it
    body = """\
    def cleanup():
        dist.destroy_process_group()
    def main():
        dist.init_process_group("nccl")
        try:
            torch.zeros(1)
        except KeyboardInterrupt:
            cleanup()
    main()
    """
    assert ("no-destroy-process-group", 8) in found(body)
    # called at the end of a normal run too, or handed to atexit: the group is destroyed
    assert found(body.replace("    main()\n", "    main()\n    cleanup()\n")) == []
    assert found(body.replace("    main()\n", "    import atexit\n    atexit.register(cleanup)\n    main()\n")) == []


def test_a_cache_the_first_rank_fills_is_read_by_the_others():
    body = """\
    import os
    from datasets import load_from_disk
    dist.init_process_group("nccl")
    with training_args.main_process_first(desc="tokenize"):
        try:
            data = load_from_disk("cache/tokenized")
        except Exception:
            data = load_dataset("json", data_files="train.jsonl")
            data.save_to_disk("cache/tokenized")
        if not os.path.exists("cache/vocab.json"):
            with open("cache/vocab.json", "w") as f:
                json.dump([], f)
    dist.destroy_process_group()
    """
    assert found(body) == []
    # outside a section one rank goes through first, every rank finds the cache missing at once
    assert found(body.replace('    with training_args.main_process_first(desc="tokenize"):\n', "    if True:\n")) == [
        ("save-on-every-rank", 13), ("save-on-every-rank", 15)]


def test_a_destroy_in_a_cleanup_function_nothing_calls_is_no_destroy():
    body = """\
    def cleanup():
        dist.destroy_process_group()

    def main():
        dist.init_process_group("nccl")
        torch.zeros(1)

    main()
    """
    assert ("no-destroy-process-group", 9) in found(body)
    assert found(body.replace("    torch.zeros(1)\n", "    torch.zeros(1)\n    cleanup()\n")) == []
