"""torchrun entry point of a training worker: `python -m torch.distributed.run ... -m gpurig.train.torch.worker`.

`main()` reads the job file (`plan.json`, the parent's `TrainPlan`), sets up the process group,
runs the `loop.Trainer`, judges the run and writes summary.json (rank 0), and leaves the process
group in the way that cannot hang (`leave_process_group`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from pathlib import Path

import torch.distributed as dist

from gpurig.diagnose.verdicts import judge_run
from gpurig.errors import BadInput
from gpurig.train.config import from_dict, validate
from gpurig.train.plan import plan_file
from gpurig.train.torch import faults
from gpurig.train.torch.base import _on_signal, quiet_known_torch_notices
from gpurig.train.torch.trainer import Trainer, setup


def exit_now(code: int) -> None:
    """Leave without interpreter finalization, once the run's results are written.

    `main()` has closed the TensorBoard writer, written the summary and destroyed the process
    group. What is left are C++ objects of torch.distributed that Python would free during
    finalization (pending gloo work held by a module or a future, a store client); freeing them
    there now and then calls std::terminate ("terminate called without an active exception"),
    which turns a finished run into a failed one (pytorch/pytorch#179291). Nothing is lost by
    skipping it: the buffered streams and log handlers are flushed here.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="gpurig.train.torch.worker", description="One gpurig training worker (run by torchrun).")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--resume", default=None, help="auto, none or a checkpoint path")
    ap.add_argument("--resume-fallback", action="store_true")
    ap.add_argument("--record-indices", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    run_dir = Path(args.run_dir)
    plan = json.loads(plan_file(run_dir).read_text())
    cfg = from_dict(plan["config"])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    quiet_known_torch_notices()
    ctx = setup(plan["device"])
    faults.install(ctx.rank, ctx.world)  # bounded exit after SIGTERM, the hang ledger, injected faults
    args.resume, args.resume_fallback = faults.resume_after_restart(args.resume, args.resume_fallback, run_dir)
    code = 0
    trainer = None
    try:
        if cfg.data.global_batch_size and ctx.world != plan.get("world_size"):
            # An elastic run going on with fewer (or more) nodes: the same global batch, in more (or
            # fewer) micro-batches per step.
            cfg.train.grad_accum = 1
            cfg = validate(cfg, ctx.world)
        trainer = Trainer(cfg, ctx, run_dir, args.resume, args.resume_fallback, args.record_indices,
                          plan.get("entries"))
        trainer.build()
        summary = trainer.run()
        if ctx.main and summary is not None:
            summary["faults"] = faults.report([r.get("restart_count", 0) for r in summary.get("per_rank") or []])
            summary["verdicts"] = judge_run(summary)  # before the file is written: nothing rewrites it
            tmp = run_dir / ".summary.json.tmp"
            tmp.write_text(json.dumps(summary, indent=2, default=str))
            os.replace(tmp, run_dir / "summary.json")
    except BadInput as exc:
        (run_dir / f"error-rank{ctx.rank}.json").write_text(json.dumps({"kind": "bad_input", "message": str(exc)}))
        if ctx.main:  # for the log; the parent says it to the user once, from the error file
            print(f"gpurig: error: {exc}", file=sys.stderr, flush=True)
        code = 2
    except Exception as exc:
        why = faults.describe_failure(exc, ctx.rank, ctx.world)  # a timeout or a vanished peer, in words
        (run_dir / f"error-rank{ctx.rank}.json").write_text(json.dumps(
            {"kind": "crash", "message": why or f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}))
        traceback.print_exc()
        if why:
            print(f"gpurig: rank {ctx.rank}: {why}", file=sys.stderr, flush=True)
        code = 1
    finally:
        if code == 0:
            with contextlib.suppress(Exception):
                dist.barrier(group=ctx.control)
        # Stop the background thread that talks to the store before the process group (and its
        # store) go away: a thread inside a C++ store call at interpreter exit aborts the process
        # ("terminate called without an active exception") after a run that had succeeded.
        # It also holds the process group and the store: drop them, so that destroy_process_group
        # really frees them now and not in a C++ destructor during interpreter shutdown.
        ledger = getattr(faults.Ledger, "current", None)
        if ledger is not None:
            ledger.close()
            ledger.thread.join(timeout=5)
            ledger.group = ledger.store = None
            faults.Ledger.current = None
        leave_process_group(code, trainer)
    return code


def leave_process_group(code: int, trainer: Trainer | None = None) -> None:
    """End this worker's part in the process group; after a failure on NCCL, end the process too.

    A collective that failed or timed out on NCCL leaves a kernel waiting for the missing peer, and
    destroy_process_group() then waits for it without end (seen on 2 H200s: rank 0 spun there after
    its collective timeout, so the run never ended). A failed worker leaves at once instead; the
    operating system frees its GPU memory and communicators, and torchrun sees its exit code.
    """
    if code != 0 and dist.is_initialized() and "nccl" in str(dist.get_backend()):  # also "cpu:gloo,cuda:nccl"
        if trainer is not None and trainer.tb is not None:
            with contextlib.suppress(Exception):
                trainer.tb.close()  # keep the scalars logged so far
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    exit_now(main())
