"""The trainer's checkpoints: the state it saves (model, optimizer, scheduler, sampler position,
every rank's RNG), writing it from rank 0, and loading it to resume exactly. A mixin of
`loop.Trainer`: it reads the trainer's attributes (`cfg`, `ctx`, `model`, `optimizer`, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gpurig.errors import BadInput
from gpurig.train.protocol import PROGRESS
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch import dcp, faults
from gpurig.train.torch.base import say


class Checkpointing:
    # -- checkpoint state ---------------------------------------------------------------------
    def _rng_state(self) -> dict[str, Any]:
        st: dict[str, Any] = {"cpu": torch.get_rng_state()}
        if self.ctx.device.type == "cuda":
            st["cuda"] = torch.cuda.get_rng_state(self.ctx.device)
        return st

    def _gather_rng(self) -> list[dict[str, Any]]:
        mine = self._rng_state()
        if self.ctx.world == 1:
            return [mine]
        out: list[Any] = [None] * self.ctx.world
        dist.all_gather_object(out, mine, group=self.ctx.control)
        return out

    def state(self, epoch: int, batch: int, step: int) -> dict[str, Any] | None:
        """The checkpoint (on rank 0; other ranks take part in the collectives and get None)."""
        rng = self._gather_rng()
        if self.fsdp:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
                get_optimizer_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
            model_sd = get_model_state_dict(self.raw_model, options=opts)
            optim_sd = get_optimizer_state_dict(self.raw_model, self.optimizer, options=opts)
        else:
            model_sd = self.raw_model.state_dict()
            optim_sd = self.optimizer.state_dict()
        if not self.ctx.main:
            return None
        return {
            "format": "gpurig-train-1",
            "model": model_sd,
            "optimizer": optim_sd,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "epoch": epoch,
            "step": step,
            "sampler": {"epoch": epoch, "batch": batch, "seed": self.cfg.seed, "world_size": self.ctx.world},
            "rng": rng,
            "config": self.cfg.to_dict(),
        }

    def save(self, epoch: int, batch: int, step: int) -> None:
        if not self.cfg.checkpoint.enabled:
            return
        if dcp.enabled(self):  # FSDP + checkpoint.sharded: every rank writes its shards (distributed checkpoint)
            dcp.save(self, epoch, batch, step)
            return
        st = self.state(epoch, batch, step)
        failed = None
        if self.ctx.main:
            try:
                path = ckpt.save_checkpoint(st, self.run_dir, step, keep=self.cfg.checkpoint.keep)
                print(PROGRESS + json.dumps({"event": "checkpoint", "step": step, "path": str(path)}), flush=True)
            except (OSError, RuntimeError) as exc:  # disk full, read-only: the previous checkpoint stays valid
                failed = faults.checkpoint_failed(exc, self.run_dir, step, self.cfg.checkpoint.on_error)
        faults.agree_checkpoint(failed, self.cfg.checkpoint.on_error, group=self.ctx.control)  # also the barrier

    def load(self) -> tuple[int, int, int, str | None]:
        """(epoch, batch, step, path) to start from."""
        if not self.resume or self.resume == "none":
            return 0, 0, 0, None
        if dcp.enabled(self) and (sharded := dcp.resume_point(self)) is not None:
            return sharded
        if self.resume == "auto":
            found = ckpt.load_latest(self.run_dir, fallback=self.resume_fallback, warn=self.ctx.main)
            if found is None:
                say(self.ctx, PROGRESS + json.dumps({"event": "note", "text": "no checkpoint to resume from: starting fresh"}))
                return 0, 0, 0, None
            path, st = found
        else:
            path = Path(self.resume)
            st = ckpt.load_checkpoint_file(path)
        ckpt.check_resume(st, self.cfg.to_dict(), self.ctx.world, path)
        if self.fsdp:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
                set_optimizer_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True)
            set_model_state_dict(self.raw_model, st["model"], options=opts)
            set_optimizer_state_dict(self.raw_model, self.optimizer, st["optimizer"], options=opts)
        else:
            try:
                self.raw_model.load_state_dict(st["model"])
            except RuntimeError as exc:
                raise BadInput(f"--resume: checkpoint {path} does not fit this model ({str(exc).splitlines()[0]})") from None
            self.optimizer.load_state_dict(st["optimizer"])
        self.scheduler.load_state_dict(st["scheduler"])
        if self.scaler and st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        rng = st.get("rng") or []
        if len(rng) == self.ctx.world:
            mine = rng[self.ctx.rank]
            torch.set_rng_state(mine["cpu"])
            if "cuda" in mine and self.ctx.device.type == "cuda":
                torch.cuda.set_rng_state(mine["cuda"], self.ctx.device)
        sampler = st["sampler"]
        if sampler.get("world_size") != self.ctx.world:
            say(self.ctx, PROGRESS + json.dumps({"event": "note", "text": f"checkpoint was written by {sampler.get('world_size')} "
                                                  f"processes, resuming on {self.ctx.world}: data order restarts at the epoch boundary"}))
            return int(sampler["epoch"]) + (1 if sampler["batch"] else 0), 0, int(st["step"]), str(path)
        return int(sampler["epoch"]), int(sampler["batch"]), int(st["step"]), str(path)
