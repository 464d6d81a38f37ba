"""A log as it reaches gpurig is not always as the program printed it: colour codes from a terminal
(captured with `tee`, rich or loguru output), typographic quotes and non-breaking spaces from text
copied out of a web page, a chat or a document, zero-width characters, Windows line ends. None of
that may change what `explain` reads."""

from __future__ import annotations

import re

import pytest
from tests.explain.test_catalogue import REFERENCE_ROWS

from gpurig.diagnose.catalogue import match_catalogue
from gpurig.diagnose.explain import explain_text
from gpurig.diagnose.loglines import bare, clean

PASTED = {
    "colour": lambda t: re.sub(r"(Error|ERROR|error|WARN|Warning|NCCL|CUDA)", "\x1b[1;31m\\1\x1b[0m", t),
    "typographic quotes": lambda t: t.replace("'", "\u2019").replace('"', "\u201c"),
    "non-breaking spaces": lambda t: t.replace(" ", "\u00a0"),
    "zero-width and BOM": lambda t: "\ufeff" + t.replace("Error", "Er\u200bror"),
    "CRLF": lambda t: t.replace("\n", "\r\n") + "\r\n",
}


@pytest.mark.parametrize("how", sorted(PASTED))
def test_every_reference_message_reads_the_same_however_it_was_pasted(how):
    changed = []
    for message, entry_id in REFERENCE_ROWS:
        first = [m.id for m in match_catalogue(message)][:1]
        if [m.id for m in match_catalogue(PASTED[how](message))][:1] != first:
            changed.append(entry_id)
    assert not changed, f"{how}: {changed}"


def test_a_coloured_windows_log_keeps_its_line_numbers_and_a_readable_evidence():
    log = ("Epoch 1:  10%|\u2588 | 1/10\r\n"
           "\x1b[33mWARNING\x1b[0m: something harmless\r\n"
           "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
           "capacity of 79.10 GiB of which 1.2 GiB is free. Process 77 has 78 GiB memory in use\r\n")
    coloured = log.replace("torch.OutOfMemoryError", "\x1b[31mtorch.OutOfMemoryError\x1b[0m")
    first = explain_text(coloured).matches[0]
    assert first.id == "cuda-out-of-memory" and first.line == 3
    assert "\x1b" not in first.evidence and "\r" not in first.evidence


def test_clean_changes_nothing_a_program_prints_and_keeps_every_line():
    plain = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1333, unhandled cuda error\n  File \"x.py\", line 3\n"
    assert clean(plain) is plain
    chinese = "错误: RuntimeError: CUDA error: out of memory\n进度 ━━━━ 100%\n"
    assert clean(chinese) == chinese
    messy = "a\x1b[31mb\x1b[0m\r\nc\u00a0d \u2018e\u2019\r\n\x1b]0;title\x07f"
    assert clean(messy) == "ab\nc d 'e'\nf" and clean(messy).count("\n") == messy.count("\r\n")


PREFIXED = {
    "a quoted reply": "> ",
    "torchrun's rank prefix": "[rank3]: ",
    "mpirun's output tag": "[1,3]<stderr>:",
    "srun -l": "3: ",
    "a logger's time and level": "2024-05-01 10:00:00,123 - root - ERROR - ",
}


@pytest.mark.parametrize("how", sorted(PREFIXED))
def test_every_reference_message_reads_the_same_with_a_prefix_on_every_line(how):
    prefix = PREFIXED[how]
    changed = []
    for message, entry_id in REFERENCE_ROWS:
        first = [m.id for m in match_catalogue(message)][:1]
        prefixed = "\n".join(prefix + line for line in message.split("\n"))
        if [m.id for m in match_catalogue(prefixed)][:1] != first:
            changed.append(entry_id)
    assert not changed, f"{how}: {changed}"


def test_a_message_of_several_lines_is_read_through_rank_prefixes_and_keeps_its_line():
    log = ("[rank1]: Traceback (most recent call last):\n"
           "[rank1]: RuntimeError: Version mismatch: The cluster was started with:\n"
           "[rank1]:     Ray: 2.43.0\n"
           "[rank1]:     Python: 3.11.10\n")
    first = explain_text(log).matches[0]
    assert first.id == "ray-version-mismatch-across-processes" and first.line == 2
    assert bare("RuntimeError: CUDA error: out of memory\n") is None  # an exception's name is no prefix


def test_a_json_log_is_read_through_its_records_and_keeps_its_lines():
    """Docker's json-file driver and JSON loggers write each line as a record: the message is the
    "log" / "msg" / "message" string, with its newlines, quotes and colour codes escaped."""
    import json

    records = [json.dumps({"log": "Epoch 1/10\n", "stream": "stdout", "time": "2024-01-01T00:00:00Z"}),
               json.dumps({"log": "\x1b[31mRuntimeError: Distributed package doesn't have NCCL built in\x1b[0m\n",
                           "stream": "stderr", "time": "2024-01-01T00:00:01Z"}),
               json.dumps({"level": "error", "msg": "RuntimeError: Version mismatch: The cluster was started with:\n"
                           "    Ray: 2.43.0\n    Python: 3.11.10", "ts": 1733400000.1})]
    log = "\n".join(records) + "\n"
    matches = explain_text(log).matches
    read = {(m.id, m.line) for m in matches}
    assert {("nccl-not-built-in", 2), ("ray-version-mismatch-across-processes", 3)} <= read, read
    assert clean(log).count("\n") == log.count("\n") and '"stream"' not in clean(log)
    assert clean('{"a": 1}\n{"msg": 5}\n') == '{"a": 1}\n{"msg": 5}\n'  # not a log record: left as it is
