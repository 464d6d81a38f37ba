"""`gpurig launch SCRIPT [ARGS...]`: run the user's own DDP script through torchrun with safe
defaults, and when it dies, say which rank and why."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import typer
from rich.markup import escape

from gpurig.errors import BadInput, check_user_file
from gpurig.report.output import console_for, emit_json

HELP = """Run your own DDP script through torchrun with safe defaults; when it fails, say why.

A thin front for [bold]torch.distributed.run[/bold]: one process per visible GPU (2 on the CPU), a free
rendezvous port, per-rank logs in the run directory, OMP_NUM_THREADS from the cores per process,
NCCL async error handling, a collective timeout (--timeout, default 600 s) and NCCL's flight
recorder dumping on a timeout. Each default is printed and can be changed with --env NAME=VALUE
or by setting the variable yourself. Multi-node: --nnodes, --node-rank, --rdzv-endpoint; inside
a Slurm job the nodes, this node's rank and the first host are read from Slurm's variables.

Before starting it runs the doctor's fast checks (stops on an error unless --no-preflight) and
`gpurig lint` on the script (prints warnings; --strict stops on them).

When a worker fails or the job hangs, it prints the root-cause rank's explanation first, then
that rank's log tail; for a hang, the collective and the ranks that never arrived.
Exit code: the failing worker's (128+N when killed by signal N), 130 after Ctrl-C, 143 after SIGTERM,
124 when --max-time ran out, 2 for bad usage or input (a script Python cannot read or compile, a
--run-dir that is a file), refused before anything runs.

The run directory (--out/--run-dir, default a new runs/launch-<time>-<pid>) holds one launch: a
folder that already holds an earlier launch's logs and result is refused, so they are never mixed
with this run's or lost; --force deletes that earlier launch's files (only those) and starts afresh.

torchrun's own spellings are accepted (--nproc_per_node, --master_addr, --rdzv_backend, ...), and
any torchrun option gpurig does not name goes through --torchrun-arg=--OPTION=VALUE.

Everything after SCRIPT goes to the script. Example:
  [bold]gpurig launch --dry-run train.py --epochs 3[/bold]
  [bold]gpurig launch --nproc-per-node 2 --timeout 120 train.py --epochs 3[/bold]
"""


# torchrun options gpurig builds itself: passing them again through --torchrun-arg would contradict them.
_OWNED_BY_GPURIG = {"--nproc-per-node": "--nproc-per-node", "--nnodes": "--nnodes", "--node-rank": "--node-rank",
                    "--rdzv-endpoint": "--rdzv-endpoint", "--rdzv-backend": "--rdzv-backend", "--rdzv-id": "--rdzv-endpoint",
                    "--max-restarts": "--max-restarts", "--log-dir": "--log-dir or --out", "--redirects": "--out",
                    "--master-addr": "--master-addr", "--master-port": "--master-port", "--standalone": "--standalone",
                    "--tee": "--tee", "--module": "-m", "--no-python": "--no-python"}


def _preflight(device: str) -> dict:
    """The doctor's fast checks, when that part of gpurig is present."""
    try:
        from gpurig.diagnose.rules import judge
        from gpurig.probe.collect import collect_facts
    except ImportError as exc:
        return {"ran": False, "note": f"doctor checks not available ({exc.name} missing); skipped", "findings": []}
    findings = judge(collect_facts(frameworks=False))
    # On the CPU a GPU, driver or link problem does not stop a gloo run.
    gpu_areas = {"gpus", "driver", "links", "frameworks"}
    blocking = [
        f for f in findings
        if f.severity == "error" and (device == "cuda" or getattr(f, "area", "") not in gpu_areas)
    ]
    return {
        "ran": True,
        "findings": [f.to_dict() for f in findings if f.severity in ("error", "warn")],
        "blocking": [f.to_dict() for f in blocking],
    }


def _render_plan(console, desc: dict) -> None:
    console.print(
        f"[bold]gpurig launch[/bold]: {desc['nproc_per_node']} process(es) per node on {desc['device']} "
        f"({desc['backend']}), {desc['nnodes']} node(s); run directory {escape(desc['run_dir'])}",
        soft_wrap=True,
    )
    for note in desc["notes"]:
        console.print(f"  • {note}", markup=False, soft_wrap=True)
    console.print("  environment:")
    for d in desc["defaults"]:
        console.print(f"    {d['name']}={d['value']}  ({d['source']}: {d['why']})", markup=False, soft_wrap=True)
    console.print("  command:", markup=False)
    console.print(f"    {desc['command']}", markup=False, soft_wrap=True)


def _earlier_launch(run_dir: Path) -> list[str]:
    """What an earlier `gpurig launch` left in `run_dir` (empty when nothing)."""
    from gpurig.launch.plan import TRACE_PREFIX

    found = [name for name in ("result.json", "plan.json", "launcher.log") if (run_dir / name).exists()]
    if any(run_dir.glob("logs/*/attempt_*")):
        found.append("logs/")
    if any(run_dir.glob(TRACE_PREFIX + "*")):
        found.append(f"{TRACE_PREFIX}* dumps")
    return found


def _check_run_dir(run_dir: str, given: bool, force: bool, try_create: bool = False) -> None:
    """Before anything runs: the run directory is a folder gpurig can create or write, and holds no
    earlier launch (unless --force). `BadInput` naming --run-dir otherwise. `try_create`: a folder
    that does not exist yet is made and removed again, for what permissions alone do not tell."""
    label = f"--run-dir {run_dir}" if given else f"run directory {run_dir}"
    other = "" if given else " (choose another with --run-dir)"
    p = Path(run_dir)
    if p.is_symlink() and not p.exists():
        raise BadInput(f"{label}: is a link to {os.readlink(p)}, which does not exist{other}")
    if p.exists() and not p.is_dir():
        raise BadInput(f"{label}: exists and is a file, not a folder{other}")
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise BadInput(f"{label}: the folder is not writable{other}")
        earlier = _earlier_launch(p)
        if earlier and not force:
            raise BadInput(
                f"{label}: holds an earlier launch ({', '.join(earlier)}); give a new folder, "
                "or add --force to delete that launch's files and start afresh"
            )
        return
    ancestor = next((a for a in p.parents if a.exists()), Path("."))
    if not ancestor.is_dir():
        raise BadInput(f"{label}: {ancestor} is a file, not a folder; cannot create the run directory under it{other}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise BadInput(f"{label}: cannot create it: {ancestor} is not writable{other}")
    if try_create:
        missing = [d for d in (p, *p.parents) if not d.exists()]  # the folder first, then its parents
        try:
            p.mkdir(parents=True)
        except OSError as exc:
            raise BadInput(f"{label}: cannot create it ({exc.strerror or exc}){other}") from None
        for d in missing:  # the run creates it again; a stop before then leaves nothing behind
            try:
                d.rmdir()
            except OSError:
                break


def _clear_earlier_launch(run_dir: str, label: str) -> None:
    """--force: delete what an earlier launch left in the run directory, and nothing else."""
    import shutil

    from gpurig.launch.plan import TRACE_PREFIX

    p = Path(run_dir)
    if not p.is_dir():
        return
    try:
        for name in ("result.json", "plan.json", "launcher.log"):
            (p / name).unlink(missing_ok=True)
        for dump in p.glob(TRACE_PREFIX + "*"):
            dump.unlink()
        logs = p / "logs"
        for run in {a.parent for a in logs.glob("*/attempt_*")}:
            shutil.rmtree(run)
        if logs.is_dir() and not any(logs.iterdir()):
            logs.rmdir()
    except OSError as exc:
        raise BadInput(f"{label}: cannot delete the earlier launch's {exc.filename}: {exc.strerror or exc}") from None


def render_diagnosis(console, diag: dict) -> None:
    status = diag["status"]
    colour = {"ok": "green", "failed": "red", "hang": "red", "interrupted": "yellow"}.get(status, "white")
    console.print(f"[{colour}][bold]{status.upper()}[/bold][/{colour}]: {escape(diag['summary'])}", soft_wrap=True)
    if diag.get("where"):
        console.print(f"  at: {diag['where']}", markup=False)
    for i, m in enumerate(diag.get("matches", [])[:3]):
        head = "why" if i == 0 else "also"
        console.print(f"  {head}: [bold]{escape(m['title'])}[/bold] ({m['id']}, confidence {m['confidence']:.2f})")
        console.print(f"    cause: {m['cause']}", markup=False, soft_wrap=True)
        console.print(f"    fix: {m['fix']}", markup=False, soft_wrap=True)
        console.print(f"    evidence: {m['evidence']}", markup=False, soft_wrap=True)
    for step in diag.get("next_steps", []):
        console.print(f"  next: {step}", markup=False, soft_wrap=True)
    if diag.get("log_tail"):
        where = diag.get("log_path") or "launcher log"
        rank = diag.get("root_rank")
        console.print(
            f"--- {'rank ' + str(rank) if rank is not None else 'torchrun'} log, last lines ({where}) ---",
            markup=False, soft_wrap=True,
        )
        for line in diag["log_tail"]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command(
        "launch",
        help=HELP,
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )
    def launch(
        script: str = typer.Argument(..., help="The training script (or module with -m)."),
        script_args: list[str] = typer.Argument(None, help="Arguments for the script."),
        nproc_per_node: str = typer.Option("auto", "--nproc-per-node", "--nproc_per_node", "--nproc", help="Processes per node: auto (visible GPUs, or 2 on the CPU), gpu, cpu (one per core) or N. Also spelled --nproc or --nproc_per_node."),
        device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
        nnodes: str = typer.Option(None, "--nnodes", help="Number of nodes, N or MIN:MAX (default 1, or Slurm's)."),
        node_rank: int = typer.Option(None, "--node-rank", "--node_rank", help="This node's rank (multi-node)."),
        rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", "--rdzv_endpoint", help="HOST:PORT where the nodes meet (default: a free local port)."),
        rdzv_id: str = typer.Option(None, "--rdzv-id", "--rdzv_id", help="Rendezvous id shared by the nodes of one job."),
        max_restarts: int = typer.Option(0, "--max-restarts", "--max_restarts", help="Restarts torchrun allows after a failure."),
        timeout: float = typer.Option(600.0, "--timeout", help="Collective timeout in seconds for init_process_group() called without timeout= (0: torch's default)."),
        max_time: float = typer.Option(None, "--max-time", help="Stop the whole run after this many seconds (default: no limit)."),
        run_dir: str = typer.Option(None, "--run-dir", "--out", help="Where logs, dumps and the report go (default runs/launch-<time>-<pid>, beside every other command's runs); a folder holding an earlier launch is refused unless --force."),
        force: bool = typer.Option(False, "--force", help="The --run-dir folder holds an earlier launch: delete that launch's files (only those) and start afresh."),
        env: list[str] = typer.Option(None, "--env", help="NAME=VALUE for the workers; repeatable; overrides a default."),
        module: bool = typer.Option(False, "-m", "--module", help="Run SCRIPT as a module (python -m)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (argv and environment) and exit."),
        no_preflight: bool = typer.Option(False, "--no-preflight", help="Skip the doctor's checks before starting."),
        strict: bool = typer.Option(False, "--strict", help="Stop when lint finds a mistake in the script."),
        no_slurm: bool = typer.Option(False, "--no-slurm", help="Ignore Slurm variables in the environment."),
        json_out: bool = typer.Option(False, "--json", help="One JSON document on stdout: plan, preflight, lint, result."),
        standalone: bool = typer.Option(False, "--standalone", help="torchrun's single-node mode: what gpurig does by default (a free local port)."),
        master_addr: str = typer.Option(None, "--master-addr", "--master_addr", help="torchrun's rendezvous host (with --master-port; same as --rdzv-endpoint HOST:PORT)."),
        master_port: int = typer.Option(None, "--master-port", "--master_port", help="torchrun's rendezvous port (default: a free one on one node, 29500 with --master-addr)."),
        rdzv_backend: str = typer.Option("c10d", "--rdzv-backend", "--rdzv_backend", help="torchrun's rendezvous backend: c10d, static, etcd, etcd-v2."),
        rdzv_conf: str = typer.Option(None, "--rdzv-conf", "--rdzv_conf", help="Passed to torchrun as given (KEY=VALUE,...)."),
        log_dir: str = typer.Option(None, "--log-dir", "--log_dir", help="torchrun's log folder: the same as --run-dir (the rank logs go to DIR/logs)."),
        tee: str = typer.Option(None, "--tee", help="torchrun's --tee (0 none, 1 stdout, 2 stderr, 3 both; default 3; the logs always keep both)."),
        local_ranks_filter: str = typer.Option(None, "--local-ranks-filter", "--local_ranks_filter", help="Passed to torchrun: show only these local ranks on the terminal (e.g. 0)."),
        no_python: bool = typer.Option(False, "--no-python", "--no_python", help="Passed to torchrun: run SCRIPT as a program, not with python."),
        monitor_interval: float = typer.Option(None, "--monitor-interval", "--monitor_interval", help="Passed to torchrun."),
        start_method: str = typer.Option(None, "--start-method", "--start_method", help="Passed to torchrun (spawn, fork, forkserver)."),
        torchrun_arg: list[str] = typer.Option([], "--torchrun-arg", metavar="OPTION", help="Any other torchrun option, passed as given before the script, e.g. --torchrun-arg=--local-addr=IP (repeatable; write it with '=' so its own value stays attached)."),
        role: str = typer.Option(None, "--role", help="Passed to torchrun."),
        iface: str = typer.Option(None, "--iface", metavar="NAME", help="Across machines: the network interface to the other nodes (sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME); default: the one on the route to the rendezvous host."),
    ) -> None:
        from gpurig.launch.plan import LaunchOptions, parse_env_assignments, plan_launch

        if master_addr is not None or master_port is not None:
            if rdzv_endpoint:
                raise BadInput("--master-addr/--master-port and --rdzv-endpoint name the same thing: give one")
            rdzv_endpoint = f"{master_addr or '127.0.0.1'}:{master_port or 29500}"
        if standalone and nnodes not in (None, "1", "1:1"):
            raise BadInput(f"--standalone is one node, but --nnodes is {nnodes}")
        if log_dir is not None:
            if run_dir is not None:
                raise BadInput("--log-dir and --run-dir name the same folder: give one")
            run_dir = log_dir
        if rdzv_backend not in ("c10d", "static", "etcd", "etcd-v2"):
            raise BadInput(f"--rdzv-backend must be c10d, static, etcd or etcd-v2, got {rdzv_backend!r}")
        if tee is not None and tee not in ("0", "1", "2", "3") and not re.fullmatch(r"\d+:[0-3](,\d+:[0-3])*", tee):
            raise BadInput(f"--tee must be 0, 1, 2, 3 or LOCAL_RANK:N,..., got {tee!r}")
        torchrun_args = [f"--{name}={value}" for name, value in (
            ("rdzv-conf", rdzv_conf), ("tee", tee), ("local-ranks-filter", local_ranks_filter),
            ("monitor-interval", monitor_interval), ("start-method", start_method), ("role", role)) if value is not None]
        if no_python:
            torchrun_args.append("--no-python")
        for extra in torchrun_arg:
            if not re.fullmatch(r"--[a-z][a-z0-9_-]*(=.*)?", extra, re.S):
                raise BadInput(f"--torchrun-arg {extra!r}: give one torchrun option as it is typed, e.g. "
                               "--torchrun-arg=--local-addr=10.0.0.2")
            name = extra.split("=", 1)[0].replace("_", "-")
            if name in _OWNED_BY_GPURIG:
                raise BadInput(f"--torchrun-arg {extra!r}: gpurig sets {name} itself; use gpurig's own option "
                               f"({_OWNED_BY_GPURIG[name]})")
            torchrun_args.append(extra)

        if timeout < 0:
            raise BadInput(f"--timeout must be 0 or more seconds, got {timeout:g}")
        if max_time is not None and max_time <= 0:
            raise BadInput(f"--max-time must be more than 0 seconds, got {max_time:g}")
        lint_findings = []
        if not module and not no_python:
            from gpurig.diagnose.lint import lint_file

            try:
                check_user_file(script, f"SCRIPT {script}", "script")
            except BadInput as exc:
                if not Path(script).exists():
                    raise BadInput(f"{exc} (use -m for a module)") from None
                raise
            # A script Python cannot read or compile would only fail in every worker: stop here.
            try:
                lint_findings = lint_file(script)
            except BadInput:
                raise
            except Exception as exc:  # a fault of the preflight lint never stops the user's run
                print(f"gpurig: the preflight lint failed on {script} ({type(exc).__name__}: {exc}), a bug of "
                      "gpurig lint; launching without it", file=sys.stderr)
        options = LaunchOptions(
            script=script,
            script_args=list(script_args or []),
            module=module,
            nproc_per_node=nproc_per_node,
            device=device,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
            rdzv_id=rdzv_id,
            max_restarts=max_restarts,
            collective_timeout_s=timeout or None,
            run_dir=run_dir,
            env_overrides=parse_env_assignments(list(env or [])),
            use_slurm=not no_slurm,
            rdzv_backend=rdzv_backend,
            torchrun_args=torchrun_args,
            iface=iface,
        )
        plan, desc = plan_launch(options)
        _check_run_dir(desc["run_dir"], given=run_dir is not None, force=force, try_create=not dry_run)
        console = console_for(json_out)
        if not dry_run:  # the plan can be shown without PyTorch; running it needs torchrun
            from gpurig.errors import require_torch

            require_torch("launch")
        if dry_run:
            if json_out:
                emit_json({"dry_run": True, "plan": desc})
            else:
                _render_plan(console, desc)
            return

        report: dict = {"plan": desc}
        _render_plan(console, desc)
        from gpurig.launch.plan import endpoint_port_taken

        if desc["nnodes"] == "1" and rdzv_endpoint and endpoint_port_taken(desc["rdzv_endpoint"]):
            from gpurig.diagnose.catalogue import load_catalogue

            entry = next(e for e in load_catalogue() if e.id == "rendezvous-port-in-use")
            report["result"] = {"status": "not-started", "reason": f"{desc['rdzv_endpoint']} is already in use",
                                "matches": [{"id": entry.id, "title": entry.title, "cause": entry.cause, "fix": entry.fix,
                                             "confidence": 1.0, "evidence": f"--rdzv-endpoint {desc['rdzv_endpoint']}: bind failed (errno 98)"}]}
            if json_out:
                emit_json(report)
            console.print(f"[red]stopped[/red]: --rdzv-endpoint {desc['rdzv_endpoint']}: {entry.title.lower()} "
                          f"(another program holds it). {entry.fix}", soft_wrap=True)
            raise typer.Exit(1)
        # Preflight: lint the script, then the doctor's fast checks.
        if lint_findings:
            from gpurig.commands.lint import render_findings

            render_findings(console, script, lint_findings)
        report["lint"] = [f.to_dict() for f in lint_findings]
        if lint_findings and strict:
            report["result"] = {"status": "not-started", "reason": "lint findings with --strict"}
            if json_out:
                emit_json(report)
            console.print("[red]stopped[/red]: --strict and lint found mistakes (see above)")
            raise typer.Exit(1)
        if no_preflight:
            report["preflight"] = {"ran": False, "note": "--no-preflight"}
        else:
            pre = _preflight(plan.device)
            report["preflight"] = pre
            if not pre["ran"]:
                console.print(f"  preflight: {pre['note']}", markup=False)
            else:
                for f in pre["findings"]:
                    console.print(f"  doctor {f['severity']}: {f['title']} — fix: {f['fix']}", markup=False, soft_wrap=True)
                if pre["blocking"]:
                    report["result"] = {"status": "not-started", "reason": "doctor found an error"}
                    if json_out:
                        emit_json(report)
                    console.print("[red]stopped[/red]: the doctor found an error (above); fix it or pass --no-preflight")
                    raise typer.Exit(1)
                console.print(f"  preflight: doctor checks passed ({len(pre['findings'])} warning(s))", markup=False)

        from gpurig.diagnose.run_diagnosis import explain_run
        from gpurig.launch.runner import run_launch

        out = sys.stderr if json_out else sys.stdout

        def echo(line: str) -> None:
            print(line, file=out, flush=True)

        if force:
            _clear_earlier_launch(plan.run_dir, f"--run-dir {plan.run_dir}")
        console.print("--- workers ---", markup=False)
        result, record = run_launch(plan, desc, max_time=max_time, echo=echo)
        # Which signal stopped an interrupted run (Ctrl-C's SIGINT or a scheduler's SIGTERM).
        stop_signal = (getattr(result, "signal", None) or "SIGINT") if result.interrupted else None
        again = ("run the same command again with --force to start over in it"
                 if run_dir is not None and not force else "run the same command again to start over")
        diagnosis = explain_run(record, result.returncode, timed_out=result.timed_out, interrupted=result.interrupted,
                                stop_signal=stop_signal, again=again)
        diag = diagnosis.to_dict()
        diag["seconds"] = round(result.seconds, 2)
        report["result"] = diag
        from gpurig.report.output import to_json

        Path(plan.run_dir, "result.json").write_text(to_json(report) + "\n", encoding="utf-8")
        if diag["status"] != "interrupted":  # the user stopped it: one quiet line, no report
            console.print("--- result ---", markup=False)
        render_diagnosis(console, diag)
        if json_out:
            emit_json(report)
        if diagnosis.exit_code:
            raise typer.Exit(diagnosis.exit_code)
