"""`gpurig lint SCRIPT`: the classic multi-GPU mistakes in a training script, read without running it."""

from __future__ import annotations

import re

import typer
from rich.markup import escape

from gpurig.errors import ProblemFound
from gpurig.report.output import console_for, emit_json

HELP = """Read a training script without running it and report the classic multi-GPU mistakes.

Each finding names the line and the fix: nn.DataParallel, a DistributedSampler without set_epoch,
DDP without set_device/device_ids, torch.load without map_location, printing or saving on every
rank, a hard-coded init_method/MASTER_PORT, download=True or pretrained=True on every rank,
find_unused_parameters=True, a DataLoader feeding a GPU without workers or pinned memory.

Exit code: 0 nothing found, 1 findings, 2 the file is missing, unreadable, not UTF-8 (or its declared
encoding) or not valid Python.

Example: [bold]gpurig lint train.py --json[/bold]
"""


def read_script(script: str) -> str:
    """The text of a script the user named, checked the way Python reads it: a missing, unreadable,
    undecodable or syntactically invalid file is bad input (exit 2), naming the file and the line."""
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
        compile(data, script, "exec", flags=0x400, dont_inherit=True)  # 0x400: ast.PyCF_ONLY_AST
    except SyntaxError as exc:
        raise BadInput(f"{label}: {_syntax_error_text(exc)}") from None
    except ValueError as exc:  # null bytes, on some Python versions
        raise BadInput(f"{label}: not valid Python ({exc})") from None
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


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


def lint_file(script: str) -> list:
    """Findings for a script on disk; a missing, unreadable or invalid file is bad input (exit 2)."""
    from gpurig.diagnose.lint import lint_source
    from gpurig.errors import BadInput

    source = read_script(script)
    try:
        return lint_source(source, script)
    except SyntaxError as exc:
        raise BadInput(f"SCRIPT {script}: {_syntax_error_text(exc)}") from None


def lint_path(script: str):
    return lint_file(script)


def render_findings(console, script: str, findings) -> None:
    if not findings:
        console.print(f"[green]lint:[/green] {escape(script)}: none of the known multi-GPU mistakes")
        return
    for f in findings:
        console.print(f"[yellow]warn[/yellow] {escape(script)}:{f.line} [bold]{f.id}[/bold]: {escape(f.title)}", soft_wrap=True)
        if f.code:
            console.print(f"    {f.code}", markup=False)
        console.print(f"    fix: {f.fix}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("lint", help=HELP)
    def lint(
        script: str = typer.Argument(..., help="The training script to read (it is not run)."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document: {script, findings: [...]}."),
    ) -> None:
        findings = lint_path(script)
        if json_out:
            emit_json({"script": script, "findings": [f.to_dict() for f in findings]})
        else:
            render_findings(console_for(False), script, findings)
        if findings:
            if json_out:
                raise typer.Exit(1)
            raise ProblemFound(f"{len(findings)} finding(s) in {script}")
