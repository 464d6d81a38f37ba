"""`gpurig check`: the main job — doctor, verify, bench comm, bench train — with one report.

Each step is a library call that returns data; this module runs them in order with a progress
display, stops early with a clear reason when the doctor finds an `error`, and writes the same
content as a self-contained HTML report and (with --json) as one JSON document.
"""

from __future__ import annotations

import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from gpurig import __version__
from gpurig.errors import BadInput
from gpurig.report.output import console_for, emit_json

HELP = """Run everything once and write a report: doctor -> verify -> bench comm (short) -> bench train (short).

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


@dataclass
class StepResult:
    name: str
    status: str  # "passed", "failed", "skipped", "interrupted"
    seconds: float = 0.0
    reason: str = ""
    data: Any = None

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2), "reason": self.reason}


@dataclass
class CheckContext:
    device: str
    nproc: str
    out_dir: Path
    quick: bool
    echo: Callable[[str], None]
    facts: Any = None
    device_choice: Any = None
    results: dict[str, Any] = field(default_factory=dict)


def _step_doctor(ctx: CheckContext) -> StepResult:
    from gpurig.commands.doctor import doctor_data, doctor_document, gather
    from gpurig.diagnose.findings import has_error

    facts, findings = doctor_data(gather(None, frameworks=True, use_cache=True, refresh=True))
    ctx.facts = facts
    doc = doctor_document(facts, findings)
    errors = [f for f in findings if f.severity == "error"]
    if has_error(findings):
        return StepResult("doctor", "failed", reason="; ".join(f.title for f in errors), data=doc)
    warns = sum(1 for f in findings if f.severity == "warn")
    return StepResult("doctor", "passed", reason=f"no error finding, {warns} warning(s)", data=doc)


def _step_verify(ctx: CheckContext) -> StepResult:
    from gpurig.comm.verify import run_verify

    result = run_verify(
        device=ctx.device, nproc=ctx.nproc, out_dir=str(ctx.out_dir / "verify"), quick=ctx.quick, facts=ctx.facts
    )
    data = result.to_dict() if hasattr(result, "to_dict") else result
    failed = [c["name"] for c in data.get("checks", []) if not c.get("passed")]
    if data.get("passed"):
        return StepResult("verify", "passed", reason=f"{len(data.get('checks', []))} checks passed", data=data)
    return StepResult("verify", "failed", reason="failed: " + ", ".join(failed), data=data)


def _size(nbytes: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor} {unit}"
    return f"{nbytes} B"


def _step_bench_comm(ctx: CheckContext) -> StepResult:
    from gpurig.comm.bench import run_bench_comm

    data = run_bench_comm(
        device=ctx.device, nproc=ctx.nproc, out_dir=str(ctx.out_dir / "bench-comm"), short=True, facts=ctx.facts
    )
    data = data.to_dict() if hasattr(data, "to_dict") else data
    results = data.get("results", [])
    mem = data.get("memory")
    if not results and mem:
        host, dev = mem.get("host_link") or {}, mem.get("device_memory") or {}

        def of(eff: float | None, what: str | None) -> str:
            return f" ({eff:.0%} of {what})" if eff is not None and what else ""

        return StepResult(
            "bench comm", "passed" if data.get("ok") else "failed",
            reason=(f"one GPU, no link between GPUs: host → device {mem.get('h2d_gbps', 0):.1f} GB/s"
                    f"{of(mem.get('h2d_efficiency'), host.get('how'))}, device memory {mem.get('d2d_gbps', 0):.0f} GB/s"
                    f"{of(mem.get('d2d_efficiency'), 'its datasheet peak' if dev.get('gbps') else None)}"),
            data=data,
        )
    if not results:
        return StepResult("bench comm", "failed", reason="no measurement came back", data=data)
    best = max(results, key=lambda r: r.get("busbw_gbps") or 0)
    return StepResult(
        "bench comm",
        "passed",
        reason=f"{len(results)} points; best {best['op']} busbw {best.get('busbw_gbps', 0):.2f} GB/s"
               f" at {_size(best['bytes'])}",
        data=data,
    )


def _step_bench_train(ctx: CheckContext) -> StepResult:
    from gpurig.train.bench import run_bench_train

    data = run_bench_train(
        device=ctx.device, nproc=ctx.nproc, out_dir=str(ctx.out_dir / "bench-train"), short=True, facts=ctx.facts
    )
    data = data.to_dict() if hasattr(data, "to_dict") else data
    rows = data.get("results", [])
    if not rows:
        return StepResult("bench train", "failed", reason="no training run completed", data=data)
    last = rows[-1]
    eff = last.get("scaling_efficiency")
    reason = (f"{data.get('workload', 'workload')}: {last.get('samples_per_s_per_device', 0):,.0f} samples/s"
              f" per device at {last.get('nproc')} process(es)")
    if eff is not None and len(rows) > 1:
        reason += f", scaling efficiency {eff:.2f}"
    elif len(rows) == 1:
        reason += " (one process count: no scaling to measure)"
    return StepResult("bench train", "passed", reason=reason, data=data)


STEPS: list[tuple[str, Callable[[CheckContext], StepResult]]] = [
    ("doctor", _step_doctor),
    ("verify", _step_verify),
    ("bench comm", _step_bench_comm),
    ("bench train", _step_bench_train),
]


def _verdicts(summary: dict | None, verify: dict | None, doctor: dict | None) -> list[dict[str, Any]]:
    """Bottleneck verdicts for the short training run, told what verify saw of the transport."""
    if not summary:
        return []
    from gpurig.diagnose.verdicts import training_verdicts

    enriched = dict(summary)
    for entry in ((verify or {}).get("transport") or {}).get("verdict") or []:
        if entry.get("src_gpu") is None or entry.get("dst_gpu") is None:
            continue
        a, b = sorted((entry["src_gpu"], entry["dst_gpu"]))
        enriched.setdefault("transport", {})[f"{a}-{b}"] = entry.get("main")
        if entry.get("link"):
            enriched.setdefault("links", {})[f"{a}-{b}"] = entry["link"]
    found = [f.to_dict() for f in training_verdicts(enriched)]
    summary["verdicts"] = found
    return found


def run_check(ctx: CheckContext, on_step: Callable[[str, StepResult | None], None] | None = None) -> dict[str, Any]:
    """Run every step; returns the `gpurig check --json` document (see `gpurig.report.html`).

    A Ctrl-C or SIGTERM during a step (its workers already stopped) marks that step "interrupted",
    skips the rest and returns at once; the document's `interrupted` names the step and `signal`
    the signal."""
    from gpurig.launch.runner import signal_words

    steps: list[StepResult] = []
    stop_reason = ""
    interrupted: tuple[str, str] | None = None  # (step, signal)
    for name, fn in STEPS:
        if on_step:
            on_step(name, None)
        if stop_reason:
            res = StepResult(name, "skipped", reason=stop_reason)
        else:
            t0 = time.monotonic()
            try:
                res = fn(ctx)
            except BadInput:
                raise
            except KeyboardInterrupt as exc:
                signame = getattr(exc, "signame", "SIGINT")
                interrupted = (name, signame)
                res = StepResult(name, "interrupted", reason=f"stopped by {signal_words(signame)}")
                stop_reason = f"not run: the check was interrupted during {name}"
            except Exception as exc:  # a step that crashes is a failed step with its reason, not a dead check
                res = StepResult(name, "failed", reason=f"{type(exc).__name__}: {exc}")
                (ctx.out_dir / f"{name.replace(' ', '-')}-error.txt").write_text(traceback.format_exc())
            res.seconds = time.monotonic() - t0
            if name == "doctor" and res.status == "failed":
                stop_reason = f"the doctor found an error ({res.reason}); fix it first: `gpurig doctor`"
        steps.append(res)
        if on_step:
            on_step(name, res)
    by_name = {s.name: s for s in steps}
    doctor = by_name["doctor"].data
    verify = by_name["verify"].data
    bench_comm = by_name["bench comm"].data
    bench_train = by_name["bench train"].data
    train_summary = (bench_train or {}).get("summary") if isinstance(bench_train, dict) else None
    verdicts = _verdicts(train_summary, verify, doctor)
    return {
        "gpurig_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "device": ctx.device_choice.device if ctx.device_choice else ctx.device,
        "passed": all(s.status == "passed" for s in steps),
        **({"interrupted": interrupted[0], "signal": interrupted[1]} if interrupted else {}),
        "steps": [s.summary() for s in steps],
        "doctor": doctor,
        "verify": verify,
        "bench_comm": bench_comm,
        "bench_train": bench_train,
        "train": train_summary,
        "verdicts": verdicts,
    }


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
    ) -> None:
        from gpurig.errors import check_output_file
        from gpurig.launch.plan import resolve_device
        from gpurig.launch.runner import signal_words, sigterm_stops

        choice = resolve_device(device, nproc)
        out_dir = out or Path("runs") / f"check-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
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
            device_choice=choice,
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
