"""What the trainer tells: its progress lines, TensorBoard scalars and the run's summary
(`summary.py`'s schema). A mixin of `loop.Trainer`: it reads the trainer's attributes.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist

from gpurig.launch.runner import stop_signal_of
from gpurig.launch.signals import signal_words
from gpurig.train.clocks import across_ranks as clocks_across_ranks
from gpurig.train.protocol import PROGRESS
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch import faults
from gpurig.train.torch.base import PEAK_FLOPS_16BIT, BackgroundTB, Timers, _memory, _Stop
from gpurig.train.torch.choices import Choice


class Reporting:
    def _open_tb(self) -> None:
        self.tb = BackgroundTB(self.run_dir / "tensorboard")
        self.choose(Choice("tensorboard", str(self.run_dir / "tensorboard"),
                           "scalars: loss, lr, throughput, step-time parts, memory"))

    def _progress(self, step: int, epoch: int, loss: float, window: dict, wall: float, busy: float,
                  gbatch: int, per_sample_units: int, unit: str) -> None:
        if not self.ctx.main:
            return
        steps = max(1, window["steps"])
        rate = gbatch * steps / wall if wall > 0 else None
        step_s = wall / steps
        lr = self.scheduler.get_last_lr()[0]
        peak, total = _memory(self.ctx)
        eta = (self.total_steps - step) * step_s
        rec = {"event": "progress", "step": step, "total_steps": self.total_steps, "epoch": epoch, "loss": loss,
               "lr": lr, "samples_per_s": rate, "units_per_s": rate * per_sample_units if rate else None,
               "unit": unit, "step_time_s": step_s, "eta_s": eta, "peak_memory_bytes": peak}
        print(PROGRESS + json.dumps(rec), flush=True)
        if self.tb is not None:
            self.tb.add_scalar("train/loss", loss, step)
            self.tb.add_scalar("train/lr", lr, step)
            if rate:
                self.tb.add_scalar("throughput/samples_per_s", rate, step)
            self.tb.add_scalar("step_time/total_s", step_s, step)
            self.tb.add_scalar("step_time/data_wait_s", min(window["data"], max(0.0, wall - busy)) / steps, step)
            self.tb.add_scalar("step_time/busy_s", busy / steps, step)
            if peak is not None:
                self.tb.add_scalar("memory/peak_bytes", peak, step)

    def _summary(self, timers: Timers, step: int, last_loss: float | None, evals: list, stopped: bool,
                 resumed_from: str | None, gbatch: int, unit: str, per_sample_units: int, seconds: float) -> dict[str, Any]:
        ctx = self.ctx
        steps = max(1, timers.steps)
        mean = timers.wall_s / steps if timers.steps else None
        comm = min(timers.comm_exposed_per_step_s, (timers.busy_s / steps) if timers.steps else 0.0)
        compute = (timers.busy_s / steps - comm) if timers.steps else None
        data_wait = timers.data_wait_s / steps if timers.steps else None
        peak, total = _memory(ctx)
        mine = {"rank": ctx.rank, "step_time_s": mean, "data_wait_s": data_wait, "compute_s": compute,
                "comm_exposed_s": comm if timers.steps else None, "peak_memory_bytes": peak, "steps_timed": timers.steps,
                "restart_count": faults.restart_count(),
                # the SM clock, power and power-limit share of this rank's GPU over the timed steps
                "gpu_clock": self.gpu_clock}
        per_rank: list[Any] = [None] * ctx.world
        dist.all_gather_object(per_rank, mine, group=ctx.control)
        if self.record:
            recs: list[Any] = [None] * ctx.world
            dist.all_gather_object(recs, self.loader_record, group=ctx.control)
            if ctx.main:
                (self.run_dir / "indices.json").write_text(json.dumps({str(r): rec for r, rec in enumerate(recs)}))
        if not ctx.main:
            return {}

        def avg(key: str) -> float | None:
            vals = [r[key] for r in per_rank if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        mean_all = avg("step_time_s")
        rate = gbatch / mean_all if mean_all else None
        def frac(k):
            return ((avg(k) / mean_all) if (mean_all and avg(k) is not None) else None)
        name = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu"
        mfu = None
        if rate and self.flops_per_sample and ctx.device.type == "cuda" and self.precision in ("bf16", "fp16"):
            peak_flops = next((v for k, v in PEAK_FLOPS_16BIT.items() if k in name), None)
            if peak_flops:
                mfu = self.flops_per_sample * rate / ctx.world / peak_flops
        last_eval = evals[-1] if evals else {}
        summary = {
            "world_size": ctx.world,
            "device": ctx.device.type,
            "device_name": name,
            "strategy": "fsdp" if self.fsdp else ("ddp" if ctx.world > 1 else "single"),
            "model": self.cfg.model.entry or self.cfg.model.name,
            "dataset": self.cfg.data.entry or self.cfg.data.dataset,
            "params": self.n_params,
            "unit": unit,
            "samples_per_s": rate,
            "samples_per_s_per_device": rate / ctx.world if rate else None,
            "units_per_s": rate * per_sample_units if rate else None,
            "units_per_s_per_device": rate * per_sample_units / ctx.world if rate else None,
            "model_flops_per_sample": self.flops_per_sample,
            "mfu": mfu,
            "step_time": {
                "mean_s": mean_all,
                "data_wait_fraction": frac("data_wait_s"),
                "compute_fraction": frac("compute_s"),
                "comm_exposed_fraction": frac("comm_exposed_s"),
                "steps_timed": timers.steps,
                "comm_method": ("calibrated: fwd+bwd with gradient sync minus without (best of 3)"
                                if getattr(self, "calibrated", False) else None),
            },
            "per_rank": per_rank,
            "gpu_clock": clocks_across_ranks(per_rank),
            "peak_memory_bytes": max((r["peak_memory_bytes"] for r in per_rank if r.get("peak_memory_bytes")), default=None),
            "memory_total_bytes": total,
            "batch_size_per_device": self.cfg.data.batch_size,
            "global_batch_size": gbatch,
            "grad_accum": self.cfg.train.grad_accum,
            "steps": step,
            "total_steps": self.total_steps,
            "final_loss": last_loss,
            "accuracy": last_eval.get("accuracy"),
            "eval_loss": last_eval.get("eval_loss"),
            "eval_samples": last_eval.get("eval_samples"),
            "evals": evals,
            "seconds": seconds,
            "stopped": stopped,
            "stop_reason": self._stop_reason() if stopped else None,
            "resumed_from": resumed_from,
            "checkpoints": [str(p) for p in ckpt.list_checkpoints(self.run_dir)],
            "choices": [{"name": c.name, "value": c.value, "reason": c.reason} for c in self.choices],
            # Judged by main() before summary.json is written (gpurig.diagnose.verdicts).
            "verdicts": [],
        }
        if self.tb is not None:
            self.tb.close()
        return summary

    def _stop_reason(self) -> str:
        """What stopped the run in the user's words: the signal gpurig recorded when the user pressed
        Ctrl-C (the workers then get SIGTERM), else the signal this worker got, else --max-time."""
        recorded = stop_signal_of(self.run_dir)
        if recorded:
            return signal_words(recorded)
        return _Stop.signal_name or "max_seconds"
