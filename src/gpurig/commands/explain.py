"""`gpurig explain [FILE|-]`: why a multi-GPU job died, from its log, a pasted report, or the last
`gpurig launch` run."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape

from gpurig.errors import BadInput
from gpurig.report.output import console_for, emit_json

HELP = """Explain an error log: what happened, why, the fix, and the line it was read from.

Reads a log file, stdin ('-'), a `gpurig launch` run directory, or with no argument the last run of
`gpurig launch` in this directory. Two tiers, best first:

  1. a catalogue of the errors users meet on multi-GPU machines (CUDA, NCCL, torchrun,
     DataLoader, TensorFlow, containers, drivers), each with a precise cause and fix;
  2. when the catalogue is not sure, the closest of about 3,000 resolved public threads
     (issues and forum posts), with the cause that thread established, its fix and its URL, or
     the catalogue entry whose real examples the log resembles (a typo, another version's words).

Each answer has a confidence: for an index answer, how often answers of that score named the
right cause when each development thread was answered by all the others. When nothing is close it says so, with next steps that fit the log
(a TensorFlow, Docker or WSL log gets no NCCL advice). Pasted output of
`python -m torch.utils.collect_env` or `nvidia-smi` is turned into facts and judged by the
doctor's rules (e.g. a cu128 torch on a 470 driver).

Exit code: 0 nothing explained, 1 a problem was explained, 2 the input cannot be read, is empty
or is not text.

Examples:
  [bold]gpurig explain train.log[/bold]
  [bold]pbpaste | gpurig explain - --json[/bold]
"""

MAX_BYTES = 32 * 1024 * 1024


def _read_input(source: str | None) -> tuple[str, str | None]:
    """(text, run_dir): run_dir is set when the input is a launch run directory."""
    if source is None:
        from gpurig.launch.runner import last_run_dir

        run = last_run_dir()
        if run is None:
            raise BadInput("FILE: none given and no earlier `gpurig launch` run in ./runs (pass a log file, or - for stdin)")
        return "", run
    if source == "-":
        return sys.stdin.read(MAX_BYTES), None
    path = Path(source)
    if path.is_dir():
        if not (path / "plan.json").is_file() and not (path / "launcher.log").is_file():
            raise BadInput(f"FILE {source}: a directory, but not a `gpurig launch` run directory (no plan.json)")
        return "", str(path)
    if not path.is_file():
        raise BadInput(f"FILE {source}: no such file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES)
    except OSError as exc:
        raise BadInput(f"FILE {source}: cannot read it ({exc.strerror})") from None
    return data.decode("utf-8", errors="replace"), None


def render_explanation(console, data: dict) -> None:
    for note in data.get("notes", []):
        console.print(f"note: {note}", markup=False)
    matches = data["matches"]
    if not matches:
        if data.get("facts") is not None:
            console.print("The pasted report shows nothing the doctor's rules flag.")
        if data.get("benign") and data.get("failed"):
            # A traceback or an error line gpurig does not know, beside notices it does: the notices
            # are not the failure, and "no error found" would be untrue.
            console.print("[yellow]No known error matched.[/yellow] The log reports a failure, but not one gpurig "
                          "knows; the messages it recognises are harmless:")
            for m in data["benign"]:
                console.print(f"  • {m['title']}", markup=False, soft_wrap=True)
            console.print("Next steps:")
        elif data.get("benign"):
            console.print("[green]No error found.[/green] Known harmless messages in this log:")
            for m in data["benign"]:
                console.print(f"  • {m['title']}: {m['cause']}", markup=False, soft_wrap=True)
                console.print(f"    evidence: {m['evidence']}", markup=False, soft_wrap=True)
            console.print("If the run still failed, the failure is not in this text. Next steps:")
        else:
            console.print("[yellow]No known error matched.[/yellow] Next steps:")
        for step in data.get("next_steps", []):
            console.print(f"  • {step}", markup=False)
        return
    for i, m in enumerate(matches, 1):
        what = m["class"] if m.get("kind") == "thread" else m["id"]
        console.print(f"{i}. [bold]{escape(m['title'])}[/bold] ({escape(what)}, confidence {m['confidence']:.2f})")
        console.print(f"   cause: {m['cause']}", markup=False, soft_wrap=True)
        console.print(f"   fix: {m['fix']}", markup=False, soft_wrap=True)
        line = f" (line {m['line']})" if m.get("line") else ""
        console.print(f"   evidence{line}: {m['evidence']}", markup=False, soft_wrap=True)
        if m.get("kind") == "thread":
            console.print(f"   thread: {m['source']}", markup=False, soft_wrap=True)
        for url in m.get("see_also", [])[:2]:
            console.print(f"   same cause, resolved: {url}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("explain", help=HELP)
    def explain(
        source: str = typer.Argument(None, help="A log file, '-' for stdin, a run directory; default: the last `gpurig launch` run."),
        json_out: bool = typer.Option(False, "--json", help='One JSON document: "matches" (each with id, title, cause, fix, confidence, evidence, source, kind, class, see_also), "input", "world", "next_steps" and "raised_in" (when nothing matched: the library whose own code raised the error, if any) and "benign" (harmless notices, with "failed": whether the log also reports a failure they do not explain). Bad input: {"source", "error", "matches": []} and exit 2.'),
    ) -> None:
        try:
            problem = _explain(source, json_out)
        except BadInput as exc:
            if not json_out:
                raise
            emit_json({"source": source, "error": str(exc), "matches": []})  # (stdout holds one document, as always)
            raise typer.Exit(2) from None
        if problem:
            raise typer.Exit(1)


def _explain(source: str | None, json_out: bool) -> bool:
    """Explain `source` and print the answer; whether it reports a problem (exit 1)."""
    from gpurig.diagnose.explain import explain_text
    from gpurig.diagnose.run_diagnosis import explain_run

    text, run_dir = _read_input(source)
    console = console_for(json_out)
    if run_dir is not None:
        from gpurig.commands.launch import render_diagnosis
        from gpurig.launch.collect import collect_run

        record = collect_run(run_dir)
        if not record.launcher_tail and not record.ranks:
            raise BadInput(f"FILE {run_dir}: the run directory holds no logs yet")
        returncode, timed_out, interrupted = (1 if record.failures else 0), False, False
        saved = Path(run_dir, "result.json")
        if saved.is_file():  # how the run ended, as `gpurig launch` saw it
            import json

            try:
                ended = json.loads(saved.read_text()).get("result", {})
                returncode = int(ended.get("exit_code", returncode))
                timed_out = ended.get("status") == "hang" and returncode == 124
                interrupted = ended.get("status") == "interrupted"  # stopped on purpose: no failure
            except (ValueError, TypeError, AttributeError):
                pass
        diagnosis = explain_run(record, returncode=returncode, timed_out=timed_out, interrupted=interrupted,
                                stop_signal="SIGTERM" if returncode == 143 else "SIGINT").to_dict()
        data = {"run_dir": run_dir, "matches": diagnosis["matches"], "run": diagnosis}
        if json_out:
            emit_json(data)
        else:
            console.print(f"run directory: {run_dir}", markup=False)
            render_diagnosis(console, diagnosis)
        problem = diagnosis["status"] in ("failed", "hang")
    else:
        result = explain_text(text)
        if result.input != "text":
            what = "stdin" if source == "-" else source
            raise BadInput(f"FILE {what}: {'empty: nothing to explain' if result.input == 'empty' else 'not text (a binary file?); pass the log as text'}")
        data = result.to_dict()
        if json_out:
            emit_json(data)
        else:
            render_explanation(console, data)
        problem = bool(result.matches)
    return problem
