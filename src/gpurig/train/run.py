"""Start a training run from the parent process: validate, plan torchrun, run, read `summary.json`.

    from gpurig.train.config import preset
    from gpurig.train.run import run_training
    summary = run_training(preset("demo"), device="cpu", nproc=2, out_dir="runs/demo")
    print(summary["accuracy"], summary["samples_per_s"])

The parent never initialises CUDA: the workers (one per GPU, or two gloo processes on the CPU)
do all the work and rank 0 writes the summary into the run directory.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput, ProblemFound
from gpurig.launch.plan import plan_torchrun
from gpurig.launch.runner import STOP_SIGNAL_FILE, raise_if_interrupted, run_plan
from gpurig.launch.signals import signal_words
from gpurig.train.config import TrainConfig, from_dict, to_toml
from gpurig.train.plan import plan_file, plan_training
from gpurig.train.protocol import CHOICE, PROGRESS
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch.faults import parent_grace, stop_env

EventHandler = Callable[[str, dict[str, Any]], None]


def saved_config(run_dir: str | os.PathLike) -> TrainConfig | None:
    """The config a previous run in `run_dir` used (for `--resume auto` without a config):
    plan.json's (launch.json's in a run directory an earlier gpurig wrote), else config.toml's."""
    for p in (plan_file(run_dir), Path(run_dir) / "launch.json"):
        if p.is_file():
            try:
                return from_dict(json.loads(p.read_text())["config"])
            except (ValueError, KeyError) as exc:
                raise BadInput(f"--out {run_dir}: {p.name} is unreadable ({exc})") from None
    p = Path(run_dir) / "config.toml"
    if not p.is_file():
        return None
    try:
        return from_dict(tomllib.loads(p.read_text()))
    except (ValueError, KeyError) as exc:
        raise BadInput(f"--out {run_dir}: config.toml is unreadable ({exc})") from None


def check_timeout(timeout: float | None, flag: str = "--timeout") -> None:
    """A time limit must be positive seconds (None = no limit)."""
    if timeout is not None and not timeout > 0:
        raise BadInput(f"{flag} must be a positive number of seconds, got {timeout:g}")


def _handler(on_event: EventHandler | None) -> Callable[[str], None]:
    def echo(line: str) -> None:
        if on_event is None:
            return
        for prefix, kind in ((PROGRESS, "progress"), (CHOICE, "choice")):
            if prefix in line:
                try:
                    payload = json.loads(line.split(prefix, 1)[1])
                except ValueError:
                    break
                on_event(payload.get("event", kind) if kind == "progress" else "choice", payload)
                return
        if line.startswith("gpurig: error: "):
            return  # a worker's bad input: the parent says it once, from the error file, as it exits
        on_event("line", {"text": line})

    return echo


def finished_run(run_dir: Path, cfg: TrainConfig) -> dict[str, Any] | None:
    """The summary of a run in `run_dir` that reached its last step, when `cfg` asks for no more
    (the same train.epochs and train.steps as the run was started with); else None. Resuming it
    would train nothing and must not replace what the finished run recorded."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        # config.toml: what the run was started with, under either framework
        started_with = tomllib.loads((run_dir / "config.toml").read_text())["train"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(summary, dict) or summary.get("stopped"):
        return None
    steps, total = summary.get("steps"), summary.get("total_steps")
    if not isinstance(steps, int) or not isinstance(total, int) or steps < total:
        return None
    newest = ckpt.list_checkpoints(run_dir)
    if newest and ckpt.step_of(newest[-1]) != steps:
        return None  # a later checkpoint than the summary: the summary is not the run's last word
    same_length = (started_with.get("epochs"), started_with.get("steps")) == (cfg.train.epochs, cfg.train.steps)
    return summary if same_length else None


def _written_since(path: Path, t: float) -> bool:
    try:
        return path.stat().st_mtime >= t - 1.0  # file systems round modification times
    except OSError:
        return False


def run_training(
    config: TrainConfig,
    device: str = "auto",
    nproc: str | int = "auto",
    out_dir: str | os.PathLike | None = None,
    resume: str | None = None,
    resume_fallback: bool = False,
    timeout: float | None = None,
    on_event: EventHandler | None = None,
    record_indices: bool = False,
    env: dict[str, str] | None = None,
    max_restarts: int = 0,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    config_sources: str | None = None,
    iface: str | None = None,
    min_nodes: int | None = None,
) -> dict[str, Any]:
    """Train `config` on `nproc` processes of `device`; return the summary (also in <out>/summary.json).

    With `nnodes` > 1 this is one node of the job: every node runs the same call with its own
    `node_rank` and the same `rdzv_endpoint` (host:port on node 0), the run directory on a file
    system all nodes share. Multi-node workers always resume from the newest checkpoint there, so
    a node that died and is started again with the same command rejoins (torchrun's c10d
    rendezvous; the surviving nodes need `max_restarts` > 0 to wait for it). Only node 0 gets the
    summary; the other nodes get `{"node_rank": R, ...}` with their exit status.

    `config_sources` (from `config.config_sources()`) is printed and kept in plan.json.

    Raises BadInput (exit 2) for a bad config, data path or checkpoint, ProblemFound (exit 1) when
    the workers fail; an interrupted run returns its summary with `stopped` true, or, stopped before
    rank 0 wrote one, raises KeyboardInterrupt (`signals.Stop` for SIGTERM). A run resumed after its
    last step trains nothing and returns the finished summary with `already_complete` true.
    """
    check_timeout(timeout)
    if max_restarts < 0:
        raise BadInput(f"--max-restarts must be 0 or more, got {max_restarts}")
    planned = plan_training(config, device, nproc, out_dir, resume, resume_fallback, nnodes, node_rank, rdzv_endpoint,
                            config_sources, min_nodes=min_nodes)
    cfg, run_dir, resume = planned.config, Path(planned.run_dir), planned.resume
    device, nproc_here, reason = planned.device, planned.nproc_per_node, planned.device_reason
    if resume and nnodes == 1:
        done = finished_run(run_dir, cfg)
        if done is not None:
            if on_event:
                on_event("complete", {"step": done.get("steps"), "run_dir": str(run_dir)})
            return {**done, "run_dir": str(run_dir), "already_complete": True}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # An earlier summary.json stays until this run writes its own (only one written after the
        # start counts): a run that fails before its end loses nothing the earlier one recorded.
        for stale in [*run_dir.glob("error-rank*.json"), run_dir / STOP_SIGNAL_FILE] if node_rank == 0 else []:
            stale.unlink(missing_ok=True)
        plan_file(run_dir).write_text(planned.to_json())
        (run_dir / "config.toml").write_text(to_toml(cfg))
    except OSError as exc:
        raise BadInput(f"--out {run_dir}: cannot write the run directory ({exc.strerror or exc})") from None

    flags = (["--resume-fallback"] if resume_fallback else []) + (["--record-indices"] if record_indices else [])
    args = ["-m", "gpurig.train.torch.worker", "--run-dir", str(run_dir), *(["--resume", str(resume)] if resume else []),
            *flags]
    env = dict(env or {})
    if device == "cuda":
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env = {**stop_env(env), **env}  # torchrun gives the workers as long as they need to checkpoint after SIGTERM
    if nnodes > 1:
        from gpurig.train.nodes import plan_node

        plan, _ = plan_node(cfg, run_dir, nnodes, node_rank, rdzv_endpoint, nproc_per_node=nproc_here,
                            device=device, max_restarts=max_restarts, env=env, extra_args=flags, iface=iface,
                            min_nodes=planned.min_nodes)
    else:
        plan = plan_torchrun(args, nproc_here, device, run_dir=str(run_dir), env=env, max_restarts=max_restarts)
    if on_event:
        on_event("launch", {"device": device, "nproc": nproc_here, "reason": reason,
                            "run_dir": str(run_dir), "command": plan.command_line(),
                            "config_sources": config_sources,
                            **({"nnodes": nnodes, "node_rank": node_rank, "rdzv_endpoint": rdzv_endpoint,
                                "network": plan.network, "min_nodes": planned.min_nodes,
                                "global_batch": cfg.data.global_batch_size} if nnodes > 1 else {})})
    started = time.time()
    result = run_plan(plan, timeout=timeout, echo=_handler(on_event), grace=parent_grace(env), hide_agent=True)
    launched = {"device": device, "nproc": nproc_here, "reason": reason,
                "returncode": result.returncode, "interrupted": result.interrupted, "signal": result.signal}

    summary_path = run_dir / "summary.json"
    fresh = _written_since(summary_path, started)
    if nnodes > 1 and result.returncode == 0 and not fresh:
        # The rendezvous numbers the nodes as they join: global rank 0, which writes the summary,
        # may be on another node (and the run directory not shared with this one).
        return {"node_rank": node_rank, "nnodes": nnodes, "run_dir": str(run_dir), "launch": launched}
    if fresh:
        summary = json.loads(summary_path.read_text())
        summary["run_dir"] = str(run_dir)
        summary["launch"] = launched
        if result.interrupted:  # the workers saw the SIGTERM gpurig sent them; the user pressed Ctrl-C
            summary["stop_reason"] = signal_words(result.signal)
        return summary
    if result.returncode == 0 and resume:
        # The workers found the checkpoint at the last step and left the finished summary as it was.
        if summary_path.is_file():
            return {**json.loads(summary_path.read_text()), "run_dir": str(run_dir), "already_complete": True}
        for line in reversed(result.output_tail):
            if PROGRESS in line and '"complete"' in line:
                done = json.loads(line.split(PROGRESS, 1)[1])
                return {"steps": done.get("step"), "total_steps": done.get("total_steps"), "run_dir": str(run_dir),
                        "already_complete": True, "launch": launched}
    errors = []
    for p in sorted(run_dir.glob("error-rank*.json")):
        try:
            errors.append(json.loads(p.read_text()))
        except ValueError:
            continue
    bad = [e for e in errors if e.get("kind") == "bad_input"]
    if bad:
        raise BadInput(bad[0]["message"])
    raise_if_interrupted(result)  # stopped before rank 0 wrote a summary: nothing to continue from
    if result.timed_out:
        raise ProblemFound(f"training timed out after {timeout:.0f} s; every worker was stopped; log: {result.log_path}")
    if errors:
        raise ProblemFound(f"training failed: {errors[0].get('message')} (traceback in {run_dir}/error-rank*.json; "
                           f"log: {result.log_path})")
    tail = "\n".join(result.output_tail[-15:])
    raise ProblemFound(f"training failed (exit {result.returncode}) without a summary; log: {result.log_path}\n{tail}")
