"""`run_verify`: start the verification workers through torchrun and turn their files into a verdict.

    >>> from gpurig.comm.verify import run_verify
    >>> result = run_verify(device="cpu", nproc=2, timeout=30)   # two gloo processes
    >>> result.passed, [c.name for c in result.checks]
    (True, ['collectives', 'p2p', 'ddp', 'transport'])

This module runs in the parent process: it never imports torch nor initialises CUDA. The workers
(`gpurig.comm.workers.worker`) do the work; the transport check reads NCCL's log here, afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.comm.inject import ENV_VAR as INJECT_ENV
from gpurig.comm.inject import InjectError, parse_faults
from gpurig.comm.nccl_log import judge_transport, parse_nccl_log, read_nccl_logs
from gpurig.comm.progress import diagnose_hang, read_progress
from gpurig.comm.results import CheckResult, VerifyResult
from gpurig.errors import BadInput
from gpurig.launch.nodes import Nodes
from gpurig.launch.plan import plan_torchrun, resolve_device
from gpurig.launch.runner import raise_if_interrupted, run_plan

WORKER_CHECKS = ("collectives", "p2p", "ddp")
STARTUP_SECONDS = 120.0  # torchrun start, imports, rendezvous and NCCL set-up, before any check


def make_run_dir(out_dir: str | os.PathLike | None, prefix: str, flag: str = "--out") -> Path:
    """A fresh folder for this run, inside `out_dir` (default `runs/`, where every command keeps its
    runs); nothing already there is overwritten."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(out_dir) if out_dir is not None else Path("runs")
    if base.exists() and not base.is_dir():
        raise BadInput(f"{flag} {base}: exists and is not a folder")
    try:
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{prefix}-{stamp}-", dir=base))
    except OSError as exc:
        raise BadInput(f"{flag} {base}: cannot create a run folder there ({exc.strerror or exc})") from None


def nccl_debug_env(run_dir: Path) -> dict[str, str]:
    """NCCL's INFO log goes into the run folder, one file per process; INIT carries the channel lines."""
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV",
        "NCCL_DEBUG_FILE": str(run_dir / "nccl-%h-%p.log"),
    }


def live_facts() -> Any:
    """This machine's facts without the framework probes (a fraction of a second), or None."""
    try:
        from gpurig.probe.collect import collect_facts
    except ImportError:
        return None
    try:
        return collect_facts(frameworks=False)
    except Exception:  # the topology is then unknown, and the transport check says so
        return None


def read_node(run_dir: Path) -> dict[str, Any] | None:
    """This node's place in a run across machines (`node.json`, written by its local rank 0), or None."""
    try:
        return json.loads((run_dir / "node.json").read_text())
    except (OSError, ValueError):
        return None


def read_rank_results(run_dir: Path, world_size: int) -> dict[int, dict[str, Any]]:
    out = {}
    for rank in range(world_size):
        path = run_dir / f"result-rank{rank}.json"
        if path.exists():
            try:
                out[rank] = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, OSError):
                continue
    return out


def merge_check(name: str, ranks: dict[int, dict[str, Any]], world_size: int) -> CheckResult | None:
    """One check as all ranks saw it: failed if any rank failed, with each failing rank named."""
    outcomes = {}
    for rank, data in ranks.items():
        for c in data.get("checks", []):
            if c.get("name") == name:
                outcomes[rank] = c
    if not outcomes:
        return None
    per_rank = {str(r): f"{c['status']}: {c.get('detail', '')}" for r, c in sorted(outcomes.items())}
    seconds = max(float(c.get("seconds") or 0) for c in outcomes.values())
    failing = {r: c for r, c in sorted(outcomes.items()) if c["status"] == "fail"}
    if failing:
        detail = "; ".join(f"rank {r}: {c.get('detail', '')}" for r, c in failing.items())
        return CheckResult(name, False, detail, seconds, "fail", per_rank)
    missing = [r for r in range(world_size) if r not in outcomes]
    if missing:
        return CheckResult(name, False, f"rank(s) {', '.join(map(str, missing))} never reported this check", seconds, "fail", per_rank)
    statuses = {c["status"] for c in outcomes.values()}
    first = outcomes[min(outcomes)]
    if len({c.get("detail") for c in outcomes.values()}) == 1:
        per_rank = {}  # every rank said the same: once is enough
    if statuses == {"n/a"}:
        return CheckResult(name, True, first.get("detail", ""), seconds, "n/a", per_rank)
    detail = first.get("detail", "")
    if name == "p2p":
        speeds = {}
        for c in outcomes.values():
            speeds.update(c.get("speeds_gbps") or {})
        if speeds:
            shown = ", ".join(f"GPU {k.replace('->', '→')} {v:.0f} GB/s" for k, v in sorted(speeds.items()))
            detail = f"copies up to 256 MiB exact between every ordered GPU pair ({shown}); NCCL send/recv exact between every ordered rank pair"
            median = sorted(speeds.values())[len(speeds) // 2]
            slow = [k for k, v in speeds.items() if v < 0.25 * median]
            if slow:
                detail += f"; slow (under a quarter of the median pair): {', '.join(slow)}"
    return CheckResult(name, True, detail, seconds, "pass", per_rank)


def transport_check(device: str, nproc: int, run_dir: Path, facts: Any, env: dict[str, str],
                    local_ranks: list[int] | None = None) -> tuple[CheckResult, dict[str, Any], list[dict]]:
    """NCCL's transport per pair against this machine's links. `local_ranks` (across machines): only
    the pairs within this machine are judged, the others go over the network by nature."""
    if device != "cuda":
        return CheckResult("transport", True, "not applicable (gloo): NCCL transports exist only between GPUs", 0.0, "n/a"), {}, []
    if (len(local_ranks) if local_ranks is not None else nproc) < 2:
        why = "one GPU on this machine: the other ranks are reached over the network" if local_ranks is not None \
            else "one GPU: no traffic between GPUs"
        return CheckResult("transport", True, why, 0.0, "n/a"), {}, []
    start = time.monotonic()
    report = parse_nccl_log(read_nccl_logs(run_dir))
    if local_ranks is not None:  # this machine's pairs only: its facts say nothing of the others' GPUs
        mine = set(local_ranks)
        report.pairs = {k: p for k, p in report.pairs.items() if p.src_rank in mine and p.dst_rank in mine}
    verdict = judge_transport(report, facts, env)
    transport = report.to_dict()
    transport["verdict"] = verdict["pairs"]
    seconds = time.monotonic() - start
    status = verdict["status"]
    return CheckResult("transport", status != "fail", verdict["detail"], seconds, status), transport, verdict["findings"]


def run_verify(
    device: str = "auto",
    nproc: str | int = "auto",
    out_dir: str | os.PathLike | None = None,
    timeout: float = 60.0,
    facts: Any = None,
    profile: str = "full",
    echo: Callable[[str], None] | None = None,
    checks: tuple[str, ...] = WORKER_CHECKS,
    quick: bool = False,
    nodes: Nodes | None = None,
) -> VerifyResult:
    """Run every check and return the verdict; raises `BadInput` for bad arguments.

    out_dir: where to keep the run folder; without it the folder is temporary and removed after a
      run that passed (a failed run keeps it for inspection; `run_dir` says where).
    timeout: seconds any single collective may wait before it counts as a hang.
    facts: a `RigFacts` to judge the transport against (default: read this machine's).
    profile: "full" (GPU messages up to 400 MB) or "quick" (up to 64 MB), for `gpurig check`.
    echo: receives a line as each check finishes (rank 0's progress).
    quick: the same as profile="quick".
    nodes: a run across machines (every node calls this with its own node_rank); each node's
      result covers every rank, and `result.node` says which node this was.
    """
    if quick:
        profile = "quick"
    if timeout <= 0:
        raise BadInput(f"--timeout must be a positive number of seconds, got {timeout:g}")
    if profile not in ("full", "quick"):
        raise BadInput(f"profile must be 'full' or 'quick', got {profile!r}")
    try:
        parse_faults(os.environ.get(INJECT_ENV))  # a typo in an injected fault is bad input, not a failed check
    except InjectError as exc:
        raise BadInput(str(exc)) from None
    choice = resolve_device(device, nproc)
    run_dir = make_run_dir(out_dir, "verify")
    env = nccl_debug_env(run_dir) if choice.device == "cuda" else {}
    entry = ["-m", "gpurig.comm.workers.worker", "verify", "--run-dir", str(run_dir), "--device", choice.device,
             "--timeout", f"{timeout:g}", "--profile", profile, "--checks", ",".join(checks)]
    plan = plan_torchrun(entry, choice.nproc, choice.device, run_dir=str(run_dir), env=env, nodes=nodes,
                         rdzv_id="gpurig-verify")
    world = choice.nproc * (nodes.nnodes if nodes else 1)

    def on_line(line: str) -> None:
        if echo and line.startswith("gpurig-progress: "):
            echo(line[len("gpurig-progress: "):])

    overall = STARTUP_SECONDS + timeout * (len(checks) + 2)
    if choice.device == "cuda" and facts is None:
        facts = live_facts()
    run = run_plan(plan, timeout=overall, echo=on_line)
    raise_if_interrupted(run)
    result = collect_verify(run_dir, choice, run, facts, timeout, checks, plan.full_env(), world=world)
    if result.node is not None:
        result.node["network"] = plan.network
    if out_dir is None and result.passed:
        # Nothing to inspect: the temporary folder goes. A failed run keeps it, and says where.
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            run_dir.parent.rmdir()  # runs/ itself, when this run was all it held
        result.run_dir = None
    return result


def collect_verify(run_dir: Path, choice: Any, run: Any, facts: Any, timeout: float,
                   checks: tuple[str, ...], env: dict[str, str], world: int | None = None) -> VerifyResult:
    """Turn the run folder's files (and the launcher's exit) into a `VerifyResult`."""
    ws = world or choice.nproc
    ranks = read_rank_results(run_dir, ws)
    hangs = [dict(d["hang"], rank=r) for r, d in ranks.items() if d.get("hang")]
    hang = None
    if hangs or run.timed_out:
        hang = diagnose_hang(read_progress(run_dir, ws), hangs, ws, timeout)
    results: list[CheckResult] = []
    stopped_at = None
    for name in checks:
        merged = merge_check(name, ranks, ws)
        if hang and hang.get("check") == name:
            seconds = merged.seconds if merged else None
            detail = f"hang: {hang['message']}"
            if merged and merged.status == "fail" and not merged.detail.endswith("never reported this check"):
                detail += f"; {merged.detail}"  # what the rank that left the collectives reported
            results.append(CheckResult(name, False, detail, seconds, "fail", merged.per_rank if merged else {}))
            stopped_at = name
        elif merged is None or (merged.status == "fail" and merged.detail.endswith("never reported this check")):
            stopped_after = next((d["stopped_after"] for d in ranks.values() if d.get("stopped_after")), None)
            stopped_at = stopped_at or stopped_after
            why = f"the run stopped in check '{stopped_at}'" if stopped_at else "the workers stopped before it"
            results.append(CheckResult(name, False, f"not run: {why}", None, "not run"))
        else:
            results.append(merged)
    if hang and hang.get("check") not in checks:
        # A hang outside the checks (start-up or teardown) still fails the run and names its op.
        results.append(CheckResult(str(hang.get("check") or "run"), False, f"hang: {hang['message']}", None, "fail"))
    node = read_node(run_dir)
    transport_result, transport, findings = transport_check(choice.device, ws, run_dir, facts, env,
                                                            local_ranks=node["ranks"] if node else None)
    results.append(transport_result)
    worker_failed = run.returncode != 0 and not hang
    if worker_failed:
        tail = [ln for ln in run.output_tail if ln.strip() and "Warning" not in ln][-8:]
        results.append(CheckResult(
            "workers", False,
            f"torchrun exited with status {run.returncode}" + (" (stopped at the time limit)" if run.timed_out else "")
            + (": " + " | ".join(tail) if tail else "") + f"; full log: {run.log_path}",
            run.seconds, "fail",
        ))
    passed = all(c.status != "fail" and c.status != "not run" for c in results)
    meta = ranks.get(0, {})
    if transport and meta.get("nccl_version") and not transport.get("nccl_version"):
        transport["nccl_version"] = meta["nccl_version"]
    return VerifyResult(
        passed=passed, device=choice.device, nproc=ws, backend=choice.backend, checks=results,
        transport=transport, hang=hang, run_dir=str(run_dir), seconds=run.seconds, reason=choice.reason,
        findings=findings, node=node,
    )
