"""FSDP checkpoints in PyTorch's distributed checkpoint format (DCP), resumable on another number
of processes.

With `strategy = "fsdp"` and `checkpoint.sharded = true`, every rank writes its own shards of the
parameters and optimizer state (`torch.distributed.checkpoint.save`); nothing is gathered on rank
0, so the model never has to fit one process. A checkpoint is the directory
`<run>/checkpoints/step-<N>.dcp/` (DCP's `.metadata` and shard files, plus `extra.pt` with the
step, scheduler, sampler, RNG and config). It is written under a temporary name and renamed when
complete, so a crash leaves the previous one intact. Loading reshards to the current world size.

    python -m torch.distributed.checkpoint.format_utils dcp_to_torch_save runs/x/checkpoints/step-000000020.dcp out.pt
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from gpurig.train.protocol import PROGRESS
from gpurig.train.torch import checkpoint as ckpt

_NAME = re.compile(r"^step-(\d{9})\.dcp$")
EXTRA = "extra.pt"


def dcp_path(run_dir: str | os.PathLike, step: int) -> Path:
    return ckpt.checkpoint_dir(run_dir) / f"step-{step:09d}.dcp"


def list_sharded(run_dir: str | os.PathLike) -> list[Path]:
    """Complete DCP checkpoints, oldest first (a directory without its metadata is not one)."""
    d = ckpt.checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir()
             if (m := _NAME.match(p.name)) and (p / ".metadata").is_file() and (p / EXTRA).is_file()]
    return [p for _, p in sorted(found)]


def enabled(trainer: Any) -> bool:
    return bool(trainer.fsdp and getattr(trainer.cfg.checkpoint, "sharded", False))


def save(trainer: Any, epoch: int, batch: int, step: int) -> Path:
    """Every rank writes its shards; rank 0 adds the small state and renames the directory into place."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    ctx = trainer.ctx
    model_sd, optim_sd = get_state_dict(trainer.raw_model, trainer.optimizer)
    rng = trainer._gather_rng()
    final = dcp_path(trainer.run_dir, step)
    tmp = final.with_name(f".{final.name}.tmp")
    if ctx.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier(group=ctx.control)
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(tmp))  # fsyncs each file
    if ctx.main:
        extra = {
            "format": "gpurig-train-dcp-1",
            "step": step,
            "scheduler": trainer.scheduler.state_dict(),
            "scaler": trainer.scaler.state_dict() if trainer.scaler else None,
            "sampler": {"epoch": epoch, "batch": batch, "seed": trainer.cfg.seed, "world_size": ctx.world},
            "rng": rng,
            "config": trainer.cfg.to_dict(),
        }
        ckpt.save_atomic(extra, tmp / EXTRA)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        ckpt._fsync_dir(final.parent)
        for old in list_sharded(trainer.run_dir)[:-trainer.cfg.checkpoint.keep]:
            shutil.rmtree(old, ignore_errors=True)
        print(PROGRESS + json.dumps({"event": "checkpoint", "step": step, "path": str(final)}), flush=True)
    dist.barrier(group=ctx.control)
    return final


def load(trainer: Any, path: Path) -> tuple[int, int, int, str]:
    """Load a DCP checkpoint into the (sharded) model and optimizer; (epoch, batch, step, path)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


    extra = _load_extra(path)
    ckpt.check_resume(extra, trainer.cfg.to_dict(), trainer.ctx.world, path)
    model_sd, optim_sd = get_state_dict(trainer.raw_model, trainer.optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    dcp.load(state, checkpoint_id=str(path))  # reshards to this world size
    set_state_dict(trainer.raw_model, trainer.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
    trainer.scheduler.load_state_dict(extra["scheduler"])
    if trainer.scaler and extra.get("scaler"):
        trainer.scaler.load_state_dict(extra["scaler"])
    sampler = extra["sampler"]
    rng = extra.get("rng") or []
    if sampler.get("world_size") == trainer.ctx.world and len(rng) == trainer.ctx.world:
        torch.set_rng_state(rng[trainer.ctx.rank]["cpu"])
        if "cuda" in rng[trainer.ctx.rank] and trainer.ctx.device.type == "cuda":
            torch.cuda.set_rng_state(rng[trainer.ctx.rank]["cuda"], trainer.ctx.device)
        return int(sampler["epoch"]), int(sampler["batch"]), int(extra["step"]), str(path)
    # Another number of processes: the shards are redistributed; the data order starts the next epoch.
    return int(sampler["epoch"]) + (1 if sampler["batch"] else 0), 0, int(extra["step"]), str(path)


def _load_extra(path: Path) -> dict[str, Any]:
    import io

    import torch

    from gpurig.errors import BadInput

    f = path / EXTRA
    try:
        return torch.load(io.BytesIO(f.read_bytes()), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BadInput(f"--resume: sharded checkpoint {path} is incomplete or corrupt ({type(exc).__name__}: {exc})") from None


def resume_point(trainer: Any) -> tuple[int, int, int, str | None] | None:
    """For `--resume auto` with sharded checkpoints: the newest one loaded, or None to fall through."""
    if trainer.resume == "auto":
        found = list_sharded(trainer.run_dir)
        return load(trainer, found[-1]) if found else None
    if trainer.resume and Path(trainer.resume).is_dir():
        return load(trainer, Path(trainer.resume))
    return None
