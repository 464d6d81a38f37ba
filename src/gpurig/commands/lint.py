"""`gpurig lint SCRIPT`: the classic multi-GPU mistakes in a training script, read without running it."""

from __future__ import annotations

import re

import typer
from rich.markup import escape

from gpurig.errors import ProblemFound
from gpurig.report.output import console_for, emit_json

HELP = """Read a training script without running it and report the classic multi-GPU mistakes.

Each finding has a rule id, a severity, the line, why it matters and the fix. Rules on by default:
nn.DataParallel, DDP without set_device/device_ids on some path, the global rank used as the GPU
index, a DistributedSampler without set_epoch, torch.load without map_location, saving or
downloading on every rank, a hard-coded rendezvous (MASTER_PORT, init_method, a --dist-url
default), no destroy_process_group. Cosmetic rules, off unless selected (--all or --select):
printing or a tqdm bar on every rank, find_unused_parameters=True, a DataLoader without workers or
pinned memory. Guards are followed: rank checks under any usual name, helpers only called on
rank 0, early returns, print silenced in the project's own modules.

Quiet one line with `# gpurig: ignore[rule-id]` (or `# gpurig: ignore` for every rule), a whole
file with `# gpurig: ignore-file[rule-id]`.

Exit code: 0 nothing found, 1 findings, 2 the file is missing, unreadable, not UTF-8 (or its declared
encoding) or not valid Python (with --json, a JSON document that says so).

Examples:
  [bold]gpurig lint train.py --json[/bold]
  [bold]gpurig lint train.py --all --ignore tqdm-on-every-rank[/bold]
"""


def read_script(script: str) -> str:
    """The text of a script the user named, checked the way Python reads it: a missing, unreadable,
    undecodable or syntactically invalid file is bad input (exit 2), naming the file and the line."""
    return read_script_tree(script)[0]


def read_script_tree(script: str):
    """(text, syntax tree) of a script, read as `read_script` does."""
    import io
    import tokenize
    from pathlib import Path

    from gpurig.errors import BadInput, check_user_file

    label = f"SCRIPT {script}"
    check_user_file(script, label, "script")
    try:
        data = Path(script).read_bytes()
    except OSError as exc:
        raise BadInput(f"{label}: cannot read it ({exc.strerror or exc})") from None
    try:
        # From bytes, as the interpreter does: the encoding is UTF-8 unless the file declares another.
        tree = _deep(lambda: compile(data, script, "exec", flags=0x400, dont_inherit=True))  # 0x400: ast.PyCF_ONLY_AST
    except RecursionError:
        raise BadInput(f"{label}: nested too deeply for Python to compile (an expression or an elif chain thousands deep)") from None
    except SyntaxError as exc:
        raise BadInput(f"{label}: {_syntax_error_text(exc)}") from None
    except ValueError as exc:  # null bytes, on some Python versions
        raise BadInput(f"{label}: not valid Python ({exc})") from None
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), tree


def _syntax_error_text(exc: SyntaxError) -> str:
    """Python's own words for a script it cannot compile, with the line (and its code) they are about."""
    where = f"line {exc.lineno}: " if exc.lineno else ""
    msg = exc.msg or "invalid syntax"
    found = re.search(r"'([\w-]+)' codec can't decode byte (0x[0-9a-f]{2})", msg)
    if found:  # bytes the file's encoding (UTF-8 unless a coding line says otherwise) cannot decode
        codec, byte = found.groups()
        name = "UTF-8" if codec.replace("_", "-").lower() in ("utf-8", "utf8") else codec
        return f"not {name} text ({where}byte {byte}); save it as UTF-8 or declare its encoding in a coding line"
    text = (exc.text or "").strip()
    code = f": {text if len(text) <= 120 else text[:120] + ' …'}" if text else ""
    return f"not valid Python ({where}{msg}){code}"


def lint_file(script: str, select=None, ignore=None) -> list:
    """Findings for a script on disk; a missing, unreadable or invalid file is bad input (exit 2)."""
    from gpurig.diagnose.lint import lint_source
    from gpurig.errors import BadInput

    source, tree = read_script_tree(script)
    try:
        return _deep(lambda: lint_source(source, script, path=script, select=select, ignore=ignore, tree=tree))
    except SyntaxError as exc:
        raise BadInput(f"SCRIPT {script}: {_syntax_error_text(exc)}") from None
    except RecursionError:
        raise BadInput(f"SCRIPT {script}: nested too deeply to analyse (an expression or an elif chain thousands deep)") from None


def _deep(work):
    """Run `work` in a thread with a large stack and recursion limit: valid Python with a
    500-term expression or a long elif chain is deeper than the default limit of the tree walk."""
    import sys
    import threading

    result: dict = {}

    def run() -> None:
        old = sys.getrecursionlimit()
        try:
            sys.setrecursionlimit(max(old, 50_000))
            result["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc
        finally:
            sys.setrecursionlimit(old)

    size = threading.stack_size()
    try:
        try:
            threading.stack_size(512 * 1024 * 1024)
        except (ValueError, RuntimeError):  # a platform that refuses the size: the default stack
            pass
        t = threading.Thread(target=run, name="gpurig-lint")
        t.start()
    finally:
        threading.stack_size(size)
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def parse_rules(value: str | None, flag: str) -> set[str] | None:
    from gpurig.diagnose.lint import RULES
    from gpurig.errors import BadInput

    if not value:
        return None
    chosen = {r.strip() for r in value.split(",") if r.strip()}
    for rule in sorted(chosen):
        if rule not in RULES:
            raise BadInput(f"{flag}: unknown rule {rule!r}; rules: {', '.join(sorted(RULES))}")
    return chosen


def render_findings(console, script: str, findings) -> None:
    if not findings:
        console.print(f"[green]lint:[/green] {escape(script)}: none of the known multi-GPU mistakes")
        return
    colour = {"error": "red", "warn": "yellow", "info": "cyan"}
    for f in findings:
        console.print(f"[{colour.get(f.severity, 'yellow')}]{f.severity}[/] {escape(script)}:{f.line} [bold]{f.id}[/bold]: "
                      f"{escape(f.title)}", soft_wrap=True)
        if f.code:
            console.print(f"    {f.code}", markup=False, soft_wrap=True)
        if f.why:
            console.print(f"    why: {f.why}", markup=False, soft_wrap=True)
        console.print(f"    fix: {f.fix}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("lint", help=HELP)
    def lint(
        script: str = typer.Argument(..., help="The training script to read (it is not run)."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document: {script, findings: [...]} (or {script, error})."),
        select: str = typer.Option(None, "--select", help="Only these rules (comma-separated ids; cosmetic ones included when named)."),
        ignore: str = typer.Option(None, "--ignore", help="Leave out these rules (comma-separated ids)."),
        every_rule: bool = typer.Option(False, "--all", help="Every rule, the cosmetic ones too."),
    ) -> None:
        from gpurig.diagnose.lint import RULES
        from gpurig.errors import BadInput

        try:
            chosen = parse_rules(select, "--select")
            if every_rule and chosen is None:
                chosen = set(RULES)
            findings = lint_file(script, select=chosen, ignore=parse_rules(ignore, "--ignore"))
        except BadInput as exc:
            if json_out:
                emit_json({"script": script, "error": str(exc), "findings": []})
                raise typer.Exit(2) from None
            raise
        if json_out:
            emit_json({"script": script, "findings": [f.to_dict() for f in findings]})
        else:
            render_findings(console_for(False), script, findings)
        if findings:
            if json_out:
                raise typer.Exit(1)
            raise ProblemFound(f"{len(findings)} finding(s) in {script}")
