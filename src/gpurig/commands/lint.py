"""`gpurig lint SCRIPT`: the classic multi-GPU mistakes in a training script, read without running it."""

from __future__ import annotations

import typer
from rich.markup import escape

from gpurig.errors import ProblemFound
from gpurig.report.output import console_for, emit_json

HELP = """Read a training script without running it and report the classic multi-GPU mistakes.

Each finding names the line and the fix: nn.DataParallel, a DistributedSampler without set_epoch,
DDP without set_device/device_ids, torch.load without map_location, printing or saving on every
rank, a hard-coded init_method/MASTER_PORT, download=True or pretrained=True on every rank,
find_unused_parameters=True, a DataLoader feeding a GPU without workers or pinned memory.

Exit code: 0 nothing found, 1 findings, 2 the file is missing or not valid Python.

Example: [bold]gpurig lint train.py --json[/bold]
"""


def lint_file(script: str) -> list:
    """Findings for a script on disk; a missing, unreadable or invalid file is bad input (exit 2)."""
    from pathlib import Path

    from gpurig.diagnose.lint import lint_source
    from gpurig.errors import BadInput, read_user_text

    path = Path(script)
    source = read_user_text(script, f"SCRIPT {script}", "script")
    try:
        return lint_source(source, str(path))
    except SyntaxError as exc:
        raise BadInput(f"SCRIPT {script}: not valid Python (line {exc.lineno}: {exc.msg})") from None


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
