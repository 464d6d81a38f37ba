"""`gpurig train`: data-parallel training with fast, correct defaults on every GPU (or two CPU ranks)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from gpurig.errors import BadInput, ProblemFound
from gpurig.launch.nodes import RDZV_PORT
from gpurig.report.output import console_for, emit_json

HELP = """Train a model on every GPU of this machine (DDP or FSDP through torchrun), fast by default.

The run picks bf16/fp16/fp32, channels_last, torch.compile, fused optimizers and where the data
live, and prints each choice with its reason. Rank 0 prints progress (samples/s, ETA), writes
TensorBoard scalars, checkpoints and [bold]summary.json[/bold] (throughput, step-time split into data
wait / compute / exposed communication, memory, accuracy, a bottleneck verdict) into --out.

Defaults: --preset demo (scikit-learn's digits, an MLP; ~97% test accuracy in seconds),
--device auto (every visible GPU, else 2 CPU processes with gloo), --out runs/<time>.

Examples:
  gpurig train --preset demo
  gpurig train --model mymodels.py:build --data mydata.py:build   # your own model and Dataset
  gpurig train --config run.toml --set optim.lr=0.1 --set data.batch_size=256
  gpurig train --out runs/r1 --resume auto         # continue exactly where runs/r1 stopped
  gpurig train --show-config --preset resnet50     # print the config as TOML and exit
  gpurig train --max-restarts 3 --set checkpoint.every_steps=500   # survive a dead worker
  gpurig train --nnodes 2 --node-rank 0 --master-addr node0 --max-restarts 3 --out /shared/runs/r1
                                                   # on node0; node1 runs the same with --node-rank 1

Faults (see docs/faults.md): --max-restarts K lets torchrun restart the workers up to K times,
each time resuming from the newest checkpoint. SIGTERM (a scheduler's preemption) makes rank 0
checkpoint at the next stop check and every process exit within GPURIG_STOP_GRACE seconds
(default 20), exit code 143: requeue and run again with --resume auto. Ctrl-C exits 130. A
collective that waits longer than --timeout seconds (default 600; GPURIG_COLLECTIVE_TIMEOUT too)
ends the run naming the collective and the ranks that never arrived; --max-time limits the whole
run's wall clock. (--timeout means the same in every gpurig command: how long one collective or
step may wait before it is a hang.)
"""


_PREEMPTED = [False]


def _preempted() -> None:
    _PREEMPTED[0] = True  # exit 143, not Ctrl-C's 130: a scheduler requeues on it


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Renderer:
    """Turns worker events into terminal output: choices, a progress bar (or lines), evals."""

    def __init__(self, console, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.progress = None
        self.task = None

    def __call__(self, kind: str, p: dict[str, Any]) -> None:
        c = self.console
        if self.quiet and kind not in ("line",):
            return
        if kind == "complete":
            c.print(f"already complete at step {p.get('step')}: nothing to do, and the run's files stay as they were "
                    "(to train further, raise train.epochs or train.steps with --set)")
            return
        if kind == "launch":
            c.print(f"[bold]gpurig train[/bold]: {p['nproc']} process(es) on {p['device']} ({p['reason']})")
            c.print(f"  run directory: {p['run_dir']}")
            if p.get("config_sources"):
                c.print(f"  config: {p['config_sources']}", markup=False)
            if p.get("network"):
                c.print(f"  {p['network']}", markup=False, highlight=False)
            if p.get("min_nodes"):
                c.print(f"  elastic: {p['min_nodes']} to {p['nnodes']} nodes; global batch {p['global_batch']} kept "
                        "(data.global_batch_size): with fewer nodes each step accumulates more micro-batches; a node "
                        "that leaves is waited for, then training goes on without it (needs --max-restarts)")
            if p.get("nnodes"):
                c.print(f"  node {p['node_rank']} of {p['nnodes']}: waiting at {p['rdzv_endpoint']} until every node "
                        "has joined (start the same command on the others with their --node-rank)")
        elif kind == "choice":
            c.print(f"  [cyan]{p['name']}[/cyan] = {p['value']}  [dim]{p['reason']}[/dim]")
        elif kind == "start":
            c.print(f"  {p['total_steps']} steps, global batch {p['global_batch']}, "
                    f"{p['steps_per_epoch']} steps/epoch, {p['params']:,} parameters"
                    + (f", resuming at step {p['step']}" if p.get("step") else ""))
            if c.is_terminal:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

                self.progress = Progress(TextColumn("  train"), BarColumn(), MofNCompleteColumn(),
                                         TextColumn("{task.fields[info]}"), console=c, transient=False)
                self.progress.start()
                self.task = self.progress.add_task("train", total=p["total_steps"], completed=p.get("step", 0), info="")
        elif kind == "progress":
            rate = p.get("units_per_s") or 0
            info = (f"loss {p['loss']:.4f}  lr {p['lr']:.2e}  {rate:,.0f} {p.get('unit', 'samples')}/s  "
                    f"ETA {_fmt_eta(p.get('eta_s'))}")
            if self.progress is not None:
                self.progress.update(self.task, completed=p["step"], info=info)
            else:
                c.print(f"  step {p['step']}/{p['total_steps']}  epoch {p['epoch']}  {info}")
        elif kind == "eval":
            acc = p.get("accuracy")
            c.print(f"  eval after epoch {p['epoch']}: accuracy {acc:.2%} on {p['eval_samples']} samples "
                    f"(loss {p['eval_loss']:.4f})" if acc is not None else "  eval: no samples")
        elif kind == "checkpoint":
            c.print(f"  [dim]checkpoint step {p['step']}: {p['path']}[/dim]")
        elif kind in ("resumed", "note", "stopping"):
            # A signal's name is left to the parent's last line: the workers see SIGTERM even when
            # the user pressed Ctrl-C (gpurig stops them with it).
            why = "" if str(p.get("why", "")).startswith("SIG") else f" ({p.get('why')})"
            text = p.get("text") or (f"resumed from {p['path']} at step {p['step']}" if kind == "resumed"
                                     else f"stopping at step {p['step']}{why}"
                                     + ("; saving a checkpoint" if p.get("checkpoint", True) else ""))
            c.print(f"  [yellow]{text}[/yellow]")
        elif kind == "line":
            text = p["text"]
            if text.strip():
                c.print("  | " + text, markup=False, highlight=False)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def attach_verdicts(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's verdicts: the workers judge the run before they write summary.json; a summary
    without them (an older run, an interrupted one) is judged here, in memory. Nothing is rewritten."""
    if "verdicts" not in summary:
        from gpurig.diagnose.verdicts import judge_run

        summary["verdicts"] = judge_run(summary)
    return summary


def render_summary(console, s: dict[str, Any]) -> None:
    st = s.get("step_time") or {}

    def pct(v: Any) -> str:
        return f"{v:.0%}" if isinstance(v, (int, float)) else "n/a"

    unit = s.get("unit") or "samples"
    rate = s.get("units_per_s")
    per = s.get("units_per_s_per_device")
    console.print()
    console.print(f"[bold]done[/bold]: {s.get('steps')} steps in {s.get('seconds', 0):.1f} s on "
                  f"{s.get('world_size')} x {s.get('device_name', s.get('device'))}")
    if rate:
        console.print(f"  throughput: {rate:,.0f} {unit}/s ({per:,.0f} per device)"
                      + (f", MFU {s['mfu']:.1%}" if s.get("mfu") else ""))
    if st.get("mean_s"):
        console.print(f"  step time {st['mean_s'] * 1000:.1f} ms: data wait {pct(st.get('data_wait_fraction'))}, "
                      f"compute {pct(st.get('compute_fraction'))}, exposed communication "
                      f"{pct(st.get('comm_exposed_fraction'))}")
    if s.get("peak_memory_bytes"):
        total = s.get("memory_total_bytes")
        console.print(f"  peak memory {s['peak_memory_bytes'] / 2**30:.2f} GiB"
                      + (f" of {total / 2**30:.0f} GiB" if total else " (process RSS)"))
    clock = s.get("gpu_clock") or {}
    if clock.get("slowest_sm_clock_mhz"):
        capped = clock.get("slowest_power_capped_fraction")
        line = f"  GPU clock {clock['slowest_sm_clock_mhz']:,.0f} MHz"
        if (s.get("world_size") or 1) > 1:
            line = (f"  GPU clocks: slowest {clock['slowest_sm_clock_mhz']:,.0f} MHz (GPU {clock.get('slowest_gpu')}), "
                    f"fastest {clock['fastest_sm_clock_mhz']:,.0f} MHz (GPU {clock.get('fastest_gpu')})")
        if clock.get("sm_clock_max_mhz"):
            line += f", of {clock['sm_clock_max_mhz']:,.0f} MHz max"
        if capped:
            limit = f" ({clock['power_limit_w']:.0f} W)" if clock.get("power_limit_w") else ""
            line += f"; at the power limit{limit} {capped:.0%} of the time"
        console.print(line)
    if s.get("final_loss") is not None:
        console.print(f"  final loss {s['final_loss']:.4f}"
                      + (f", test accuracy {s['accuracy']:.2%} ({s.get('eval_samples')} samples, each counted once)"
                         if s.get("accuracy") is not None else ""))
    verdicts = s.get("verdicts") or []
    if verdicts:
        v = verdicts[0]
        console.print(f"  [bold]verdict[/bold]: {v.get('title')}" + (f" — {v['fix']}" if v.get("fix") else ""))
    console.print(f"  summary: {Path(s.get('run_dir', '.')) / 'summary.json'}")
    if s.get("stopped"):
        console.print(f"  [yellow]stopped ({s.get('stop_reason')}); continue with: gpurig train --out "
                      f"{s.get('run_dir')} --resume auto[/yellow]")


def _node_done(console: Any, summary: dict, json_out: bool) -> None:
    if json_out:
        emit_json(summary)
    else:
        console.print(f"node {summary['node_rank']} of {summary['nnodes']} finished; the node that holds global "
                      "rank 0 writes summary.json into its --out")


def _show_plan(cfg: Any, sources: str, out: Path | None, device: str, nproc: str, resume: str | None,
               resume_fallback: bool, nnodes: int, node_rank: int, master_addr: str | None,
               master_port: int | None, min_nodes: int | None = None) -> None:
    """`--show-plan`: every check a run gets before it starts, and what it would be, as JSON."""
    from gpurig.launch.plan import default_run_dir

    if cfg.framework == "tf":
        from gpurig.train.tf.runner import plan_tf

        planned = plan_tf(cfg, out or cfg.out_dir or default_run_dir(), device=device, nnodes=nnodes,
                          node_rank=node_rank, master_addr=master_addr, master_port=master_port,
                          resume=resume or False, nproc=nproc, config_sources=sources)
        emit_json(planned.to_dict())
        return
    from gpurig.train.plan import plan_training

    endpoint = f"{master_addr}:{master_port or RDZV_PORT}" if master_addr else None
    planned = plan_training(cfg, device, nproc, out, resume, resume_fallback, nnodes, node_rank, endpoint, sources,
                            min_nodes=min_nodes)
    emit_json(planned.to_dict())


def register(app: typer.Typer) -> None:
    @app.command("train", help=HELP)
    def train(
        preset_name: str | None = typer.Option(None, "--preset", help="Embedded config: demo, resnet50, resnet50-cifar, gpt."),
        config: Path | None = typer.Option(None, "--config", metavar="FILE", help="TOML config (applied over --preset)."),
        sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Override one key, e.g. --set optim.lr=0.1 (repeatable)."),
        framework: str | None = typer.Option(None, "--framework", help="torch or tf (same as --set framework=...)."),
        model: str | None = typer.Option(None, "--model", metavar="FILE.py:FUNCTION",
                                         help="Your own model: a function returning a torch.nn.Module (model.entry)."),
        data: str | None = typer.Option(None, "--data", metavar="FILE.py:FUNCTION",
                                        help="Your own data: a function returning a Dataset of (input, target), or a "
                                             "(train, test) pair (data.entry)."),
        loss: str | None = typer.Option(None, "--loss", metavar="FILE.py:FUNCTION",
                                        help="Your own loss(output, target) (train.loss_entry; default "
                                             "cross-entropy, or the model's own when its forward takes the targets)."),
        out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Run directory (default: runs/<time>)."),
        resume: str | None = typer.Option(None, "--resume", help="auto (newest checkpoint in --out) or a checkpoint file."),
        resume_fallback: bool = typer.Option(False, "--resume-fallback", help="If the newest checkpoint is corrupt, use the previous one."),
        nproc: str = typer.Option("auto", "--nproc-per-node", "--nproc_per_node", "--nproc", help="Processes: auto (one per visible GPU, or 2 on the CPU) or N. Also spelled --nproc or --nproc_per_node."),
        device: str = typer.Option("auto", "--device", help="auto, cuda or cpu."),
        max_time: float | None = typer.Option(None, "--max-time", metavar="SECONDS", help="Stop every worker after this many seconds of wall clock (default: no limit)."),
        timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS", help="How long one collective may wait for the other ranks before the run is stopped as hung, naming the rank that did not arrive (PyTorch; default 600)."),
        max_restarts: int = typer.Option(0, "--max-restarts", help="Restart the workers up to K times after a failure, "
                                         "resuming from the newest checkpoint (torchrun's --max-restarts)."),
        nnodes_text: str = typer.Option("1", "--nnodes", metavar="N|MIN:MAX",
                                        help="Machines in the job: run the same command on each with its "
                                        "--node-rank (PyTorch: torchrun agents meeting at a c10d rendezvous on "
                                        "--master-addr, run directory on a shared file system; TensorFlow: "
                                        "MultiWorkerMirroredStrategy from a TF_CONFIG gpurig writes). PyTorch "
                                        "MIN:MAX: elastic, training goes on while MIN nodes remain (with "
                                        "--max-restarts), the global batch kept."),
        node_rank: int = typer.Option(0, "--node-rank", help="This machine's index, 0 .. nnodes-1."),
        iface: str | None = typer.Option(None, "--iface", metavar="NAME",
                                         help="Across machines (PyTorch): the network interface to the other nodes "
                                              "(sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME); default: the one on "
                                              "the route to --master-addr."),
        master_addr: str | None = typer.Option(None, "--master-addr", help="Host of worker 0 (with --nnodes > 1)."),
        master_port: int | None = typer.Option(None, "--master-port", help="Port of worker 0 (default: a free one "
                                               "on a single machine; across machines 29400 for PyTorch's "
                                               "rendezvous, 12345 for TensorFlow)."),
        show_config: bool = typer.Option(False, "--show-config", help="Print the resolved config as TOML and exit."),
        show_plan: bool = typer.Option(False, "--show-plan", help="Check everything and print the run's plan as JSON "
                                       "(validated config, device, processes, nodes, run directory; for TensorFlow "
                                       "every choice), then exit without starting anything."),
        json_out: bool = typer.Option(False, "--json", help="Print summary.json on stdout (progress goes to stderr)."),
    ) -> None:
        from gpurig.launch.plan import check_nodes
        from gpurig.train.config import config_sources, load_config, to_toml
        from gpurig.train.run import check_timeout, run_training, saved_config

        check_timeout(max_time, "--max-time")
        check_timeout(timeout, "--timeout")

        overrides = list(sets) + ([f"framework={framework}"] if framework else [])
        overrides += [f"{key}={value}" for key, value in (("model.entry", model), ("data.entry", data),
                                                          ("train.loss_entry", loss)) if value]
        saved = saved_config(out) if (resume and out and not (preset_name or config)) else None
        # A resumed run continues with the config it was started with (plus any --set).
        cfg = load_config(path=config, preset_name=preset_name, overrides=overrides,
                          base=saved.to_dict() if saved else None)
        sources = config_sources(config, preset_name, overrides, saved_in=out if saved else None)
        if show_config:
            typer.echo(f"# {sources}\n" + to_toml(cfg), nl=False)
            return
        console = console_for(json_out)
        from gpurig.launch.nodes import node_range

        min_nodes, nnodes = node_range(nnodes_text)
        check_nodes(nnodes, node_rank)
        if min_nodes < nnodes and cfg.framework == "tf":
            raise BadInput(f"--nnodes {nnodes_text}: an elastic range is for PyTorch runs; TensorFlow's "
                           "MultiWorkerMirroredStrategy has a fixed set of workers (give --nnodes N)")
        if iface is not None and (nnodes == 1 or cfg.framework == "tf"):
            raise BadInput("--iface chooses the network between machines for PyTorch runs: it needs --nnodes 2 or "
                           "more" + (" and a PyTorch config (TensorFlow's workers are told theirs by TF_CONFIG)"
                                     if cfg.framework == "tf" else ""))
        if cfg.framework != "tf":
            from gpurig.errors import require_torch

            require_torch("train")
        if cfg.framework == "tf" and timeout is not None:
            raise BadInput("--timeout: the collective hang limit applies to PyTorch runs; TensorFlow's collectives "
                           "take none here (use --max-time for a wall-clock limit)")
        if show_plan:
            _show_plan(cfg, sources, out, device, nproc, resume, resume_fallback, nnodes, node_rank, master_addr,
                       master_port, min_nodes)
            return
        if cfg.framework == "tf":
            from gpurig.launch.plan import default_run_dir
            from gpurig.train.run import finished_run
            from gpurig.train.tf.runner import run_tf_training

            done = finished_run(Path(out), cfg) if (resume and out and nnodes == 1) else None
            if done is not None:  # as under torch: a finished run resumed trains nothing and keeps its files
                Renderer(console)("complete", {"step": done.get("steps")})
                if json_out:
                    emit_json({**done, "run_dir": str(out), "already_complete": True})
                return

            facts = findings = None
            if device != "cpu":
                # The doctor's facts and findings, so a TensorFlow blind to the GPUs is refused with
                # the likely cause (judged here, in the parent).
                from gpurig.diagnose.rules import judge
                from gpurig.probe.collect import collect_facts

                facts = collect_facts(frameworks=True)
                findings = judge(facts)
            summary = run_tf_training(cfg, out or cfg.out_dir or default_run_dir(), device=device, nproc=nproc,
                                      resume=resume or False, timeout=max_time, facts=facts, findings=findings,
                                      nnodes=nnodes, node_rank=node_rank, master_addr=master_addr,
                                      master_port=master_port,
                                      echo=lambda line: console.print(line, markup=False, highlight=False))
            attach_verdicts(summary)
        else:
            from gpurig.launch.signals import signal_words, sigterm_stops

            renderer = Renderer(console)
            try:
                with sigterm_stops(_preempted):
                    endpoint = f"{master_addr}:{master_port or RDZV_PORT}" if master_addr else None
                    summary = run_training(cfg, device=device, nproc=nproc, out_dir=out, resume=resume,
                                           resume_fallback=resume_fallback, timeout=max_time, on_event=renderer,
                                           env={"GPURIG_COLLECTIVE_TIMEOUT": f"{timeout:g}"} if timeout else None,
                                           max_restarts=max_restarts, nnodes=nnodes, node_rank=node_rank,
                                           rdzv_endpoint=endpoint, config_sources=sources, iface=iface,
                                           min_nodes=min_nodes)
            except KeyboardInterrupt as exc:  # stopped before rank 0 wrote a summary or a checkpoint
                renderer.close()
                signame = getattr(exc, "signame", "SIGINT")
                console.print(f"[yellow]stopped by {signal_words(signame)}[/yellow] before the run had anything to "
                              "continue from; every worker was stopped. Run the same command to start again.")
                raise typer.Exit(143 if signame == "SIGTERM" else 130) from None
            except ProblemFound as exc:
                if not _PREEMPTED[0]:
                    raise
                console.print(f"[yellow]preempted (SIGTERM)[/yellow]: {exc}; requeue and continue with --resume auto")
                raise typer.Exit(143) from None
            finally:
                renderer.close()
            if "world_size" not in summary and "node_rank" in summary:
                _node_done(console, summary, json_out)  # global rank 0's node judges and writes the summary
                return
            if summary.get("already_complete"):
                if json_out:
                    emit_json(summary)
                return
            launched = summary.get("launch") or {}
            if summary.get("stopped") and launched.get("interrupted"):
                # One line: what stopped it, where it stands, how to go on. summary.json has the rest.
                attach_verdicts(summary)
                if json_out:
                    emit_json(summary)
                signame = launched.get("signal") or ("SIGTERM" if _PREEMPTED[0] else "SIGINT")
                where = f"stopped by {signal_words(signame)} at step {summary.get('steps')} of {summary.get('total_steps')}"
                if cfg.checkpoint.enabled:
                    saved_ck = (summary.get("checkpoints") or ["saved"])[-1]
                    console.print(f"[yellow]{where}[/yellow]; checkpoint {saved_ck}; continue with: gpurig train --out "
                                  f"{summary.get('run_dir')} --resume auto", soft_wrap=True)
                else:
                    console.print(f"[yellow]{where}[/yellow]; checkpoint.enabled is false, so there is nothing to "
                                  "continue from", soft_wrap=True)
                raise typer.Exit(143 if signame == "SIGTERM" else 130)
            attach_verdicts(summary)
        loss = summary.get("final_loss")
        if json_out:
            emit_json(summary)
        else:
            render_summary(console, summary)
        if isinstance(loss, float) and not math.isfinite(loss):
            raise ProblemFound(f"the loss became {loss}: lower optim.lr, or use train.precision=fp32 to rule out overflow")
        if summary.get("stopped") and (summary.get("launch") or {}).get("interrupted"):
            raise typer.Exit(143 if _PREEMPTED[0] else 130)
        if summary.get("launch", {}).get("returncode") not in (0, None) and not summary.get("stopped"):
            raise ProblemFound(f"a worker exited with {summary['launch']['returncode']}; see {summary.get('run_dir')}/launcher.log")
