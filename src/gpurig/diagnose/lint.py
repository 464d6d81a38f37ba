"""Read a training script without running it (Python's `ast`) and report the classic multi-GPU
mistakes, each with its line and its fix.

    for finding in lint_source(open("train.py").read(), "train.py"):
        print(finding.line, finding.id, finding.fix)

Rules are deliberately conservative: a rule fires only on code it can see, and stays quiet when the
script shows it does the right thing somewhere (a rank check, a `set_epoch` call).
"""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_checks import _lint_scanned
from gpurig.diagnose.lint_guards import _RANK_CACHE
from gpurig.diagnose.lint_nodes import OUTPUT_LOG_METHODS
from gpurig.diagnose.lint_read import (  # noqa: F401  (re-exported: read_script, read_script_tree)
    _deep,
    _no_gc,
    _read_text,
    _size,
    _syntax_error_text,
    read_script,
    read_script_tree,
)
from gpurig.diagnose.lint_rules import DEFAULT_RULES, RULES, LintFinding, Rule  # noqa: F401  (re-exported)
from gpurig.diagnose.lint_scan import _Scanner
from gpurig.diagnose.lint_stream import _stream_scan


def lint_source(source: str, filename: str = "<script>", path=None, select=None, ignore=None,
                tree: ast.AST | None = None) -> list[LintFinding]:
    """The findings for one script, in line order. A syntax error is reported as bad input.

    `path` (the script's file) lets the linter read the project's own modules the script imports;
    `select` / `ignore` choose rules by id (default: every rule that is not cosmetic). A line ending
    in `# gpurig: ignore[rule-id]` (or a bare `# gpurig: ignore`) keeps its findings quiet; a
    `# gpurig: ignore-file[rule-id]` comment anywhere does so for the whole file.
    """
    tree = ast.parse(source, filename=filename) if tree is None else tree
    try:
        findings = _lint_tree(tree, source, path)
    finally:
        _RANK_CACHE.clear()  # it holds the tree's nodes
    return _chosen(findings, source, select, ignore)


def _rules_chosen(select, ignore) -> set[str]:
    """The rules a lint reports: `select` (default: every rule that is not cosmetic) less `ignore`."""
    return (set(select) if select else set(DEFAULT_RULES)) - set(ignore or ())


def _chosen(findings: list[LintFinding], source: str, select, ignore) -> list[LintFinding]:
    chosen = _rules_chosen(select, ignore)
    return _suppressed([f for f in findings if f.id in chosen], source)


def _lint_streamed(source: str, script: str, select, ignore) -> list[LintFinding]:
    """`lint_source` for a big script: scanned one group of top-level statements at a time."""
    _RANK_CACHE.clear()
    # Output calls (a print in every helper of a big file) are kept only when their rule is chosen.
    unjudged = frozenset() if "print-on-every-rank" in _rules_chosen(select, ignore) else _OUTPUT_CALLS
    try:
        scan = _stream_scan(source, script, script, unjudged)
        _RANK_CACHE.clear()  # the nodes it holds belong to groups already walked
        modules, flags, setters = _project_flags(scan, source, script)
        if flags or setters:
            scan = _stream_scan(source, script, script, unjudged, flags, setters)
            _RANK_CACHE.clear()
        findings = _lint_scanned(scan, source, script, modules)
    finally:
        _RANK_CACHE.clear()
    return _chosen(findings, source, select, ignore)


_OUTPUT_CALLS = frozenset({"print"} | OUTPUT_LOG_METHODS)  # what only print-on-every-rank looks at
_IGNORE = re.compile(r"#\s*gpurig:\s*ignore(-file)?(?:\[([\w\-, ]+)\])?")


def _suppressed(findings: list[LintFinding], source: str) -> list[LintFinding]:
    if "gpurig:" not in source:
        return findings
    lines = source.splitlines()
    whole_file: set[str] = set()
    for m in _IGNORE.finditer(source):
        if m.group(1):
            whole_file |= {r.strip() for r in (m.group(2) or "*").split(",")}
    kept = []
    for f in findings:
        if "*" in whole_file or f.id in whole_file:
            continue
        m = _IGNORE.search(lines[f.line - 1]) if 0 < f.line <= len(lines) else None
        if m and not m.group(1) and (m.group(2) is None or f.id in {r.strip() for r in m.group(2).split(",")}):
            continue
        kept.append(f)
    return kept


def _lint_tree(tree: ast.AST, source: str, path) -> list[LintFinding]:
    _RANK_CACHE.clear()
    scan = _Scanner()
    scan.visit(tree)
    modules, flags, setters = _project_flags(scan, source, path)
    if flags or setters:
        _RANK_CACHE.clear()
        scan = _Scanner()
        scan.project_flags, scan.device_setters = flags, setters
        scan.visit(tree)
    return _lint_scanned(scan, source, path, modules)


def _project_flags(scan: _Scanner, source: str, path) -> tuple[list, frozenset[str], frozenset[str]]:
    """(the project's modules, the flags and functions computed from the rank that the script names:
    `opt.log`, `is_first_worker()`, the project's functions and classes that set the device that it
    calls). Where there are any, the script is scanned again knowing them: a test of one tests the
    rank, a call of one sets the device (rarely needed; a script's own such function may come after its use)."""
    from gpurig.diagnose.lint_guards import rank_flags
    from gpurig.diagnose.lint_modules import _local_modules
    from gpurig.diagnose.lint_project import _device_setters
    from gpurig.diagnose.lint_rendezvous import option_names

    modules = _local_modules(None, path, scan.imports)
    # (not a name the script's or the project's parser gives an option: `--verbose` is the same on every rank)
    options = option_names([*(c for c, _ in scan.calls), *(n for m in modules for n in ast.walk(m))])
    flags = (rank_flags(modules) - options) | scan.rank_functions
    named = flags and re.search(r"\b(?:" + "|".join(map(re.escape, sorted(flags))) + r")\b", source)
    # (the project's helpers that set the device, where the script calls one before a DDP: `with Engine(args):`)
    setters = _device_setters(modules) & scan.short_names if "DistributedDataParallel" in source or "DDP" in source else set()
    return modules, frozenset(flags) if named else frozenset(), frozenset(setters)


def lint_file(script: str, select=None, ignore=None) -> list:
    """Findings for a script on disk; a missing, unreadable or invalid file is bad input (exit 2)."""
    import warnings

    from gpurig.errors import BadInput

    # Python's own complaints about the script's text (`"\d"`: invalid escape sequence) are not ours to print.
    with _no_gc(), warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        if _size(script) > STREAM_BYTES:
            source = _read_text(script)
            try:
                return _deep(lambda: _lint_streamed(source, script, select, ignore))
            except SyntaxError as exc:
                raise BadInput(f"SCRIPT {script}: {_syntax_error_text(exc)}") from None
            except ValueError as exc:  # null bytes
                raise BadInput(f"SCRIPT {script}: not valid Python ({exc})") from None
            except RecursionError:
                raise BadInput(f"SCRIPT {script}: nested too deeply to analyse (an expression or an elif chain "
                               "thousands deep)") from None
        source, tree = read_script_tree(script)
        try:
            return _deep(lambda: lint_source(source, script, path=script, select=select, ignore=ignore, tree=tree))
        except SyntaxError as exc:
            raise BadInput(f"SCRIPT {script}: {_syntax_error_text(exc)}") from None
        except RecursionError:
            raise BadInput(f"SCRIPT {script}: nested too deeply to analyse (an expression or an elif chain thousands deep)") from None


# A script bigger than this is read one group of top-level statements at a time: its whole syntax
# tree (about 170 bytes of memory per byte of source) is never held at once.
STREAM_BYTES = 512 * 1024
