"""`gpurig lint SCRIPT`: the classic multi-GPU mistakes in a training script, read without running it."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from gpurig.diagnose.lint import lint_file
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

Quiet one line with `# gpurig: ignore\\[rule-id]` (or `# gpurig: ignore` for every rule), a whole
file with `# gpurig: ignore-file\\[rule-id]`.

Exit code: 0 nothing found, 1 findings, 2 the file is missing, unreadable, not UTF-8 (or its declared
encoding) or not valid Python (with --json, a JSON document that says so), 3 gpurig lint itself
failed on the file (a bug to report; no finding was decided).

Examples:
  [bold]gpurig lint train.py --json[/bold]
  [bold]gpurig lint train.py --all --ignore tqdm-on-every-rank[/bold]
"""


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
        unnamed = [r for r in f.related if r not in f.title]  # the places the title had no room for
        if unnamed:
            console.print(f"    also: {', '.join(unnamed)}", markup=False, soft_wrap=True)
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
        except Exception as exc:  # a fault of the linter, not of the script: never read as "findings" (1)
            error = (f"gpurig lint failed on {script} ({type(exc).__name__}: {exc}): a bug of gpurig lint, not of the "
                     "script; no finding was decided. Please report it with the script if you can.")
            if json_out:
                emit_json({"script": script, "error": error, "findings": []})
            else:
                print(error, file=sys.stderr)
            raise typer.Exit(3) from None
        if json_out:
            emit_json({"script": script, "findings": [f.to_dict() for f in findings]})
        else:
            render_findings(console_for(False), script, findings)
        if findings:
            if json_out:
                raise typer.Exit(1)
            raise ProblemFound(f"{len(findings)} finding(s) in {script}")
