"""The torchrun worker behind `gpurig verify` and `gpurig bench comm` (imports torch).

Started by the parent through `gpurig.launch` (never by hand, though it can be):

    python -m torch.distributed.run --nproc-per-node=2 -m gpurig.comm.workers.worker verify --run-dir RUN --device cpu

Each rank writes `result-rank<R>.json` into the run directory (rewritten after every check, so a
crash or a hang still leaves what was done) and `progress-rank<R>.jsonl` before every collective.
Rank 0 alone prints, one `gpurig-progress:` line per finished step.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpurig.comm.inject import ENV_VAR, Fault, InjectError, find, parse_faults
from gpurig.comm.progress import Progress

NCCL_ENV_KEYS = (
    "NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE",
    "NCCL_CUMEM_ENABLE", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)


def result_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"result-rank{rank}.json"


def node_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "node.json"


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class Context:
    """What every check needs: who this rank is, where it runs, and how to run a collective safely."""

    rank: int
    world_size: int
    local_rank: int
    device: Any  # torch.device
    backend: str
    run_dir: Path
    timeout: float
    progress: Progress
    faults: list[Fault]
    profile: str = "full"  # "full" | "quick": how large the largest messages are
    cpu_group: Any = None  # a gloo group of its own for barriers and agreement (never on the GPU)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def say(self, text: str) -> None:
        """One place decides which rank speaks: rank 0."""
        if self.rank == 0:
            print(f"gpurig-progress: {text}", flush=True)

    def collective(self, check: str, op: str, what: str, fn: Callable[[], Any] | None) -> Any:
        """Run `fn` as the next numbered collective, under the watchdog; every rank calls this.

        `fn` is None on a rank that takes no part (a send/recv between two other ranks): it still
        counts the step so that sequence numbers agree across ranks.
        """
        import torch

        fault = find(self.faults, "skip-collective", self.rank, op)
        if fault is not None:
            fault.fired = True
            seq = self.progress.next_seq()
            print(f"injected fault: rank {self.rank} never arrives at {op} #{seq} ({what})", file=sys.stderr, flush=True)
            while True:  # a rank stuck outside the collective, as in a data loader or a skipped branch
                time.sleep(1)
        fault = find(self.faults, "raise", self.rank, op)
        if fault is not None:
            fault.fired = True
            self.progress.next_seq()  # the step is taken, as a crashing rank would leave it
            raise RuntimeError(f"injected fault: rank {self.rank} raised instead of entering {op} ({what})")
        with self.progress.op(check, op, what):
            out = fn() if fn is not None else None
            if self.is_cuda:
                # NCCL calls return at once; the wait (and so the hang) happens here.
                torch.cuda.synchronize(self.device)
        return out

    def cpu_barrier(self, check: str, what: str = "") -> None:
        import torch.distributed as dist

        self.collective(check, "barrier", what, lambda: dist.barrier(group=self.cpu_group))


def setup_context(run_dir: str | Path, device: str, timeout: float = 60.0, profile: str = "full") -> Context:
    """Join the torchrun job as a worker (process group, watchdog, per-rank files); for scripts too."""
    return _setup(argparse.Namespace(run_dir=str(run_dir), device=device, timeout=timeout, profile=profile))


def _setup(args: argparse.Namespace) -> Context:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        faults = parse_faults(os.environ.get(ENV_VAR))
    except InjectError as exc:
        print(f"gpurig: {exc}", file=sys.stderr)
        sys.exit(2)

    state: dict[str, Any] = {"rank": rank, "world_size": world_size, "checks": [], "hang": None}

    def on_hang(record: dict[str, Any]) -> None:
        state["hang"] = record
        write_json_atomic(result_path(run_dir, rank), state)
        number = f" #{record['seq']}" if record.get("seq") is not None else ""
        print(f"gpurig: rank {rank} waited {record['waited_s']} s in {record['op']}{number}", file=sys.stderr, flush=True)

    progress = Progress(run_dir, rank, timeout=args.timeout, on_hang=on_hang)
    # The process group's own timeout is longer than the watchdog's, so the watchdog reports first.
    pg_timeout = timedelta(seconds=args.timeout + 30)
    # Joining is watched too: with device_id NCCL connects the ranks here, and that can hang.
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        with progress.op("setup", "init_process_group", "nccl"):
            dist.init_process_group("nccl", timeout=pg_timeout, device_id=device)
        with progress.op("setup", "new_group", "gloo, for barriers off the GPU"):
            cpu_group = dist.new_group(backend="gloo", timeout=pg_timeout)
    else:
        device = torch.device("cpu")
        with progress.op("setup", "init_process_group", "gloo"):
            dist.init_process_group("gloo", timeout=pg_timeout)
        # Barriers and the agreement between checks get a group of their own here too: on the
        # group of the checks, a crashed rank's agreement would pair with a peer's pending collective.
        with progress.op("setup", "new_group", "gloo, for barriers and agreement"):
            cpu_group = dist.new_group(backend="gloo", timeout=pg_timeout)
    ctx = Context(
        rank=rank, world_size=world_size, local_rank=local_rank, device=device, backend=dist.get_backend(),
        run_dir=run_dir, timeout=args.timeout, progress=progress, faults=faults, profile=args.profile,
        cpu_group=cpu_group, record=state,
    )
    state.update(_environment(ctx))
    return ctx


def _environment(ctx: Context) -> dict[str, Any]:
    import torch

    env = {k: os.environ[k] for k in NCCL_ENV_KEYS if k in os.environ}
    info: dict[str, Any] = {"device": str(ctx.device), "backend": ctx.backend, "torch": torch.__version__, "env": env,
                            "host": socket.gethostname(), "node": int(os.environ.get("GROUP_RANK", 0))}
    if ctx.is_cuda:
        try:
            v = torch.cuda.nccl.version()
            info["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception as exc:  # an older torch without the call: the version is simply unknown
            info["nccl_version"] = None
            info["nccl_version_error"] = str(exc)
        info["gpu_name"] = torch.cuda.get_device_name(ctx.device)
        info["visible_gpus"] = torch.cuda.device_count()
    return info


def _run_verify(ctx: Context, checks: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from gpurig.comm.workers import checks as check_mod

    table = {"collectives": check_mod.check_collectives, "p2p": check_mod.check_p2p, "ddp": check_mod.check_ddp}
    path = result_path(ctx.run_dir, ctx.rank)
    for name in checks:
        fn = table[name]
        start = time.monotonic()
        crashed = False
        try:
            outcome = fn(ctx)
        except Exception as exc:  # the check's own failure is a result, reported with its rank
            outcome = {"status": "fail", "detail": f"{type(exc).__name__}: {exc}"}
            crashed = True
        outcome["name"] = name
        outcome["seconds"] = round(time.monotonic() - start, 3)
        ctx.record["checks"].append(outcome)
        write_json_atomic(path, ctx.record)
        ctx.say(f"{name} {outcome['status']} {outcome['seconds']:.1f}s")
        # A rank that raised left its sequence of collectives part-way; the ranks agree to stop
        # rather than pair up different collectives in the next check.
        flag = torch.tensor([1 if crashed else 0])
        ctx.collective(name, "agree_to_continue", "after the check", lambda flag=flag: dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=ctx.cpu_group))
        if int(flag.item()):
            ctx.record["stopped_after"] = name
            break
    ctx.record["finished"] = True
    write_json_atomic(path, ctx.record)
    return 0


def _run_bench(ctx: Context, config: dict[str, Any]) -> int:
    from gpurig.comm.workers import benchmark

    ctx.record["bench"] = benchmark.run(ctx, config, lambda: write_json_atomic(result_path(ctx.run_dir, ctx.rank), ctx.record))
    ctx.record["finished"] = True
    write_json_atomic(result_path(ctx.run_dir, ctx.rank), ctx.record)
    return 0


def _share_results(ctx: Context) -> None:
    """Across machines: every rank's record to every node, so the parent on each node judges the whole
    run from its own run folder (shared or not). Local rank 0 writes the other nodes' records and
    `node.json` (this node's index among the nodes, its ranks, and the hosts)."""
    import torch.distributed as dist

    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
    if local_world >= ctx.world_size:
        return
    records: list[Any] = [None] * ctx.world_size
    ctx.collective("teardown", "all_gather_object", "every rank's results to every node",
                   lambda: dist.all_gather_object(records, ctx.record, group=ctx.cpu_group))
    if ctx.local_rank != 0:
        return
    first = ctx.rank - ctx.local_rank
    mine = range(first, first + local_world)
    for r, record in enumerate(records):
        if r not in mine and record is not None:
            write_json_atomic(result_path(ctx.run_dir, r), record)
    write_json_atomic(node_path(ctx.run_dir), {
        "node": ctx.record.get("node", 0), "nnodes": ctx.world_size // local_world, "world_size": ctx.world_size,
        "ranks": list(mine), "hosts": {str(r): (rec or {}).get("host") for r, rec in enumerate(records)},
    })


TEARDOWN_SECONDS = 30.0


def _leave_after_teardown_hang(rank: int) -> None:
    print(f"gpurig: rank {rank}: process group teardown still running after {TEARDOWN_SECONDS:g} s; leaving", file=sys.stderr, flush=True)
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpurig.comm.workers.worker", description=__doc__)
    parser.add_argument("mode", choices=("verify", "bench"))
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cpu")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one collective may wait")
    parser.add_argument("--profile", choices=("full", "quick"), default="full")
    parser.add_argument("--checks", default="collectives,p2p,ddp")
    parser.add_argument("--config", default=None, help="bench: a JSON file with the sweep settings")
    args = parser.parse_args(argv)

    import torch.distributed as dist

    ctx = _setup(args)
    try:
        if args.mode == "verify":
            rc = _run_verify(ctx, [c for c in args.checks.split(",") if c])
        else:
            config = json.loads(Path(args.config).read_text()) if args.config else {}
            rc = _run_bench(ctx, config)
        _share_results(ctx)
        # Every rank leaves together, so no rank tears down NCCL while a peer still talks to it.
        ctx.collective("teardown", "barrier", "end of run", lambda: dist.barrier(group=ctx.cpu_group))
    finally:
        ctx.progress.close()
    # Every result is written by now. Should NCCL's teardown hang (it can after CUDA graph capture,
    # pytorch issue 115388), leave anyway rather than hold the run until the parent's time limit.
    guard = threading.Timer(TEARDOWN_SECONDS, _leave_after_teardown_hang, args=(ctx.rank,))
    guard.daemon = True
    guard.start()
    dist.destroy_process_group()
    guard.cancel()
    return rc


if __name__ == "__main__":
    sys.exit(main())
