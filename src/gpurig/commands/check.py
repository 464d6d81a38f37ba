"""`gpurig check`: the main job — doctor, verify, bench comm, bench train — with one report.

The steps and their runner are the library's (`check/runner.py`); this module reads the flags, shows
the progress, and writes the result as a self-contained HTML report and (with --json) as one JSON
document.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gpurig.errors import BadInput
from gpurig.report.output import console_for, emit_json
from gpurig.suite.runner import CheckContext, StepResult, run_check

HELP = """Run everything once and write a report: doctor -> verify -> bench comm (short) -> bench train (short).

With --burn, a quick burn-in of every GPU (`gpurig burn --quick`) runs after the doctor.

On a machine with GPUs the workers use every visible GPU with NCCL; without a GPU they run as two gloo
processes on the CPU, so the whole tool can be seen working anywhere. Stops early, with the reason,
when the doctor finds an error. Finishes in a few minutes at most.

Examples:
  gpurig check                      report in runs/check-<time>/
  gpurig check --report rig.html    the report where you want it
  gpurig check --json > check.json  the same content as JSON
  gpurig check --device cpu         the CPU path on a GPU machine

An earlier check's results are never replaced silently: --out must not hold a check.json and
--report must not exist, unless --force is given. Ctrl-C (or SIGTERM) stops the whole check at
once: every worker is stopped, the report says which step was interrupted, exit 130 (143).

Exit status: 0 every step passed, 1 a step failed or the doctor found an error, 2 bad usage,
130/143 stopped by Ctrl-C/SIGTERM.
"""


def register(app: typer.Typer) -> None:
    @app.command("check", help=HELP)
    def check(
        device: str = typer.Option("auto", "--device", help="auto (GPUs with NCCL if usable, else CPU), cuda or cpu."),
        nproc: str = typer.Option("auto", "--nproc-per-node", "--nproc_per_node", "--nproc", help="Processes: auto (every visible GPU, or 2 on CPU) or N. Also spelled --nproc or --nproc_per_node."),
        report: Path | None = typer.Option(
            None, "--report", metavar="FILE", help="Where to write the HTML report (default: <out>/report.html)."
        ),
        out: Path | None = typer.Option(
            None, "--out", metavar="DIR", help="Run directory for logs and results (default: runs/check-<time>)."
        ),
        force: bool = typer.Option(False, "--force", help="Replace an earlier check's results in --out and an "
                                   "existing --report file."),
        json_out: bool = typer.Option(False, "--json", help="Print the whole result as one JSON document on stdout."),
        burn: bool = typer.Option(False, "--burn", help="Also screen every GPU (`gpurig burn --quick`, about 30 s) "
                                                        "after the doctor; its verdicts go in the report."),
    ) -> None:
        from gpurig.errors import check_output_file
        from gpurig.launch.plan import default_run_dir, resolve_device
        from gpurig.launch.signals import signal_words, sigterm_stops

        choice = resolve_device(device, nproc)
        out_dir = out or Path(default_run_dir("check-"))
        if out_dir.exists() and not out_dir.is_dir():
            raise BadInput(f"--out {out_dir}: exists and is not a directory")
        if (out_dir / "check.json").exists() and not force:
            raise BadInput(f"--out {out_dir}: holds an earlier check's results (check.json); choose another --out, "
                           "or add --force to replace them")
        if report is not None:
            check_output_file(str(report), "--report", force)
        elif (out_dir / "report.html").exists() and not force:
            raise BadInput(f"--out {out_dir}: holds an earlier report.html; choose another --out, or add --force "
                           "to replace it")
        _writable_dir(out_dir, "--out")
        if report is not None:
            _writable_file(report, "--report")
        console = console_for(json_out)
        console.print(f"[bold]gpurig check[/bold] — {choice.nproc} {choice.device} process(es): {choice.reason}")
        console.print(f"run directory: {out_dir}")
        ctx = CheckContext(
            device=choice.device, nproc=str(choice.nproc), out_dir=out_dir, quick=True, echo=console.print,
            device_choice=choice, burn=burn,
        )
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        # One line per step: a spinner and a pulsing bar while it runs (a step's length is not known
        # ahead), its elapsed time, then its result. On a pipe or in a log, plain lines only.
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                            TimeElapsedColumn(), console=console, transient=True,
                            disable=not console.is_terminal)
        tasks: dict[str, int] = {}

        def on_step(name: str, res: StepResult | None) -> None:
            if res is None:
                tasks[name] = progress.add_task(f"{name} …", total=None)
                if not console.is_terminal:
                    console.print(f"▶ {name} …")
                return
            progress.remove_task(tasks.pop(name))
            style = {"passed": "green", "failed": "bold red", "skipped": "dim", "interrupted": "yellow"}[res.status]
            console.print(f"  [{style}]{res.status.upper()}[/{style}] {name} ({res.seconds:.1f} s): {res.reason}")

        with progress, sigterm_stops():
            doc = run_check(ctx, on_step)
        from gpurig.errors import write_file_atomic
        from gpurig.report.output import to_json

        write_file_atomic(str(out_dir / "check.json"), to_json(doc) + "\n", "--out")
        report_path = report or out_dir / "report.html"
        try:
            from gpurig.report.html import render_report

            write_file_atomic(str(report_path), render_report(doc), "--report")
            console.print(f"report: {report_path} (open file://{report_path.resolve()} in a browser)")
        except ImportError:
            console.print("report: the HTML renderer is not available in this installation")
        if json_out:
            emit_json(doc)
        if doc.get("interrupted"):
            signame = doc.get("signal")
            console.print(f"[yellow]interrupted during {doc['interrupted']}[/yellow] by {signal_words(signame)}; "
                          f"every worker was stopped; results so far: {out_dir / 'check.json'}")
            raise typer.Exit(143 if signame == "SIGTERM" else 130)
        if doc["verdicts"]:
            head = doc["verdicts"][0]
            console.print(f"bottleneck verdict: {head['title']}")
            if head.get("severity") != "ok" and head.get("fix"):
                console.print(f"  fix: {head['fix']}")
        console.print(f"results: {out_dir / 'check.json'}")
        verdict = "[green]all steps passed[/green]" if doc["passed"] else "[bold red]some steps failed[/bold red]"
        console.print(verdict)
        raise typer.Exit(0 if doc["passed"] else 1)


def _writable_dir(path: Path, flag: str) -> None:
    """Make the run directory now, so a bad --out fails before minutes of work, naming the flag."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".gpurig-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None


def _writable_file(path: Path, flag: str) -> None:
    """Check the report can be written before the steps run; an existing file is left as it is."""
    existed = path.exists()
    try:
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None
