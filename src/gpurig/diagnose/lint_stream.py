"""A big script read one group of top-level statements at a time: each group is compiled and walked
by the same scanner, and of it only what the rules judge is kept (see `_stream_scan`)."""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_guards import _RANK_CACHE
from gpurig.diagnose.lint_scan import _Scanner

# A group is about 16 kB of source per 50,000 lines of the script, from 16 to 256 kB. Small groups
# compile faster (the memory of one group's tree is reused for the next), but each group is compiled
# after as many newlines as lines come before it, which costs more the longer the script.
_CHUNK_BYTES = 256 * 1024
_MIN_CHUNK_BYTES = 16 * 1024
_LINES_PER_MIN_CHUNK = 50_000
# A line that may start a top-level statement: not indented, not a comment or a closing bracket,
# not the continuation of a compound statement.
_MAY_START_LINE = re.compile(r"^(?!(?:else|elif|except|finally)\b)[^\s#)\]}]", re.M)


def _top_level_chunks(source: str, label: str):
    """The syntax trees of consecutive groups of top-level statements, of about `_chunk_bytes` each.

    A cut is tried only where a line could start a statement; a group that does not compile on
    its own (the cut fell inside a string, brackets, a decorator or a compound statement) grows to
    the next possible cut after twice its size (a literal of thousands of lines at column 0 is
    compiled a few times, not once per line). Python's own SyntaxError (with its true line) is raised for a script
    that does not compile at all. Line numbers are the script's: each group is compiled after as
    many newlines as lines come before it."""
    end_of_source = len(source)
    chunk = _chunk_bytes(source.count("\n"))
    start, line = 0, 0  # where the group starts, and the number of lines before it
    while start < end_of_source:
        end = _next_cut(source, start + chunk)
        while True:
            text = source[start:end]
            try:
                tree = compile("\n" * line + text, label, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
                break
            except SyntaxError:
                if end >= end_of_source:
                    # Not a bad cut: the script itself does not compile. Python's own words and line.
                    compile(source, label, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
                    raise
                end = _next_cut(source, max(end + 1, start + 2 * (end - start)))
        yield tree
        line += text.count("\n")
        start = end


def _chunk_bytes(lines: int) -> int:
    """The size of a script's groups: see _MIN_CHUNK_BYTES."""
    return min(_CHUNK_BYTES, _MIN_CHUNK_BYTES * max(1, lines // _LINES_PER_MIN_CHUNK))


def _next_cut(source: str, pos: int) -> int:
    """The first place at or after `pos` where a line may start a top-level statement (or the end).
    Only the places near a group's end are looked for: a big script has a million lines."""
    found = _MAY_START_LINE.search(source, pos) if pos < len(source) else None
    return found.start() if found else len(source)


# (and a class: `CustomDataParallel(net)` of `class CustomDataParallel(nn.DataParallel)` is judged as what it is built on)
_DEF_NAME = re.compile(r"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+(\w+)", re.M)
_IMPORT_TOP = re.compile(r"^[ \t]*(?:from[ \t]+(\w+)|import[ \t]+(\w+))", re.M)


def _stream_scan(source: str, label: str, path=None, unjudged=frozenset(), project_flags=frozenset(),
                 device_setters=frozenset()) -> _Scanner:
    """One scan of a big script, top-level statement groups parsed and walked one after another,
    keeping only what the rules judge (the rest is freed with its group). `unjudged`: names of calls
    no chosen rule looks at (`print` when print-on-every-rank is off), not kept for their name."""
    from pathlib import Path

    scan = _Scanner()
    scan.compact = True
    scan.unjudged = unjudged
    scan.project_flags, scan.device_setters = project_flags, device_setters
    # (`super().__init__()` is not kept for its name: a class is built by its own name.)
    scan.keep_names = set(_DEF_NAME.findall(source)) - {"__init__"}
    # (the packages it imports, as the whole-tree reading finds the project's root above one of them)
    scan.import_tops = frozenset(m.group(1) or m.group(2) for m in _IMPORT_TOP.finditer(source))
    scan.script_dir = Path(path).resolve().parent if path else None
    state = scan.block_start()
    for chunk in _top_level_chunks(source, label):
        for stmt in chunk.body:
            scan.block_step(state, stmt)
        chunk = stmt = None  # the group's tree goes now, but for what the scan keeps of it
        _RANK_CACHE.clear()  # it holds the group's nodes
    scan.block_end(state)
    return scan
