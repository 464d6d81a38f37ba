"""The PyTorch `Trainer` that runs inside each torchrun worker (DDP or FSDP): data, model, the step.

Started by `gpurig train` through `torch.distributed.run`; one process per GPU (or two gloo
processes on the CPU). Directly, for debugging:

    torchrun --nproc-per-node=2 -m gpurig.train.torch.worker --run-dir runs/x   # runs/x/config.json must exist

Rank 0 alone prints, writes TensorBoard scalars, checkpoints and `summary.json`. Every rank seeds
its dropout with seed + rank; model initialisation uses the same seed everywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpurig.errors import BadInput
from gpurig.train.clocks import ClockWatch
from gpurig.train.config import TrainConfig, global_batch
from gpurig.train.protocol import CHOICE, PROGRESS
from gpurig.train.torch import data as D
from gpurig.train.torch import entries, faults
from gpurig.train.torch.base import Context, Timers, _Stop, say
from gpurig.train.torch.checkpointing import Checkpointing
from gpurig.train.torch.choices import (
    Choice,
    choose_channels_last,
    choose_fused,
    choose_precision,
    default_workers,
)
from gpurig.train.torch.models import build_model, count_params, flops_per_sample
from gpurig.train.torch.optim import build_optimizer, lr_factor
from gpurig.train.torch.reporting import Reporting
from gpurig.train.torch.user import UserEntries
from gpurig.train.torch.wrap import wrap_model

ON_DEVICE_FRACTION = 0.10  # tensor datasets up to this share of GPU memory are held on the GPU
STOP_CHECK_EVERY = 10  # optimizer steps between the ranks' agreement on stopping (a host-only collective)
WARMUP_STEPS = 5  # steps excluded from timing (allocator warm-up, cudnn autotune, compile)


# torch.cuda._sleep counts SM cycles. No NVIDIA GPU's SM clock exceeds this, so a sleep sized with it
# lasts at least as long as asked (1.5x on an H200 at 1.98 GHz).
SLEEP_CYCLES_PER_S = 3e9


# ---------------------------------------------------------------------------------------------


def setup(device_kind: str) -> Context:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device, timeout=faults.collective_timeout(), **faults.init_kwargs())
        control = dist.new_group(backend="gloo", timeout=faults.collective_timeout())
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=faults.collective_timeout(), **faults.init_kwargs())
        control = None  # the default group is gloo already
    return Context(rank, world, local, device, control)


class Trainer(Checkpointing, Reporting, UserEntries):
    def __init__(self, cfg: TrainConfig, ctx: Context, run_dir: Path, resume: str | None,
                 resume_fallback: bool, record_indices: bool, entries: dict[str, Any] | None = None) -> None:
        self.cfg, self.ctx, self.run_dir = cfg, ctx, run_dir
        self.entries = entries or {}  # what the parent's probe found of your own model and data (plan.json)
        self.resume, self.resume_fallback = resume, resume_fallback
        self.record = record_indices
        self.choices: list[Choice] = []
        self.tb = None
        self.clock_watch: ClockWatch | None = None
        self.gpu_clock: dict[str, Any] | None = None

    def choose(self, c: Choice) -> Choice:
        self.choices.append(c)
        if self.ctx.main:
            print(CHOICE + json.dumps({"name": c.name, "value": c.value, "reason": c.reason}), flush=True)
        return c

    # -- setup ------------------------------------------------------------------------------
    def build(self) -> None:
        cfg, ctx = self.cfg, self.ctx
        dev = ctx.device
        if ctx.main:
            self._open_tb()  # first: its import overlaps with loading the data and building the model
        if dev.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed input shapes: autotune convolutions once
            torch.set_float32_matmul_precision("high")  # TF32 for any fp32 matmul left
            self.choose(Choice("tf32", True, "TF32 tensor cores for fp32 matmuls and convolutions"))
        # Your own data first (its classes, counted over every target, size your model), then your model
        # (whether it has convolutions decides channels_last, which the loaders need).
        user_arrays = self._user_data() if cfg.data.entry else None
        user_model = self._user_model(user_arrays.num_classes if user_arrays is not None else None) \
            if cfg.model.entry else None
        conv = None if user_model is None else any(isinstance(m, nn.Conv2d) for m in user_model.modules())
        self.channels_last = self.choose(choose_channels_last(cfg, dev, conv)).value
        if cfg.model.entry or cfg.data.entry or cfg.train.loss_entry:
            self._user_loss()
        self.precision = self.choose(choose_precision(cfg, dev)).value

        # Data.
        self.eval_data = None
        self.eval_items = None
        ds = cfg.data.dataset
        if isinstance(user_arrays, entries.Streamed):  # your Dataset, too big to hold: a DataLoader
            self._streamed_input(user_arrays)
        elif ds.startswith("synthetic") and not cfg.data.entry:
            arrays = D.synthetic_pool(cfg, ctx.world, dev)
            self.choose(Choice("data_placement", "device", "synthetic data is generated on the device: no input cost"))
            self.loader = D.ArrayLoader(arrays, cfg, ctx.rank, ctx.world, dev, dev, False, self.channels_last)
            self.kind, self.num_classes = arrays.kind, arrays.num_classes
            self.in_shape = tuple(arrays.x_train.shape[1:])
            if arrays.kind == "token":
                self.in_shape = (cfg.data.seq_len,)
        elif ds == "imagefolder" and not cfg.data.entry:
            classes, train_items, val_items = D.imagefolder_split(cfg)
            decode = cfg.data.decode
            if decode == "auto":
                decode = "gpu" if dev.type == "cuda" else "cpu"
                why = ("CUDA: batched nvJPEG decoding on the GPU; CPU decoding gives ~400 images/s per core, "
                       "too few to feed thousands per GPU" if decode == "gpu" else "CPU run: decode in DataLoader workers")
                if decode == "gpu":
                    failure = D.gpu_decode_failure(train_items, dev)
                    if failure:
                        decode, why = "cpu", f"GPU decoding is not available here ({failure}): decoding on the CPU"
            else:
                why = "asked for in the config"
            if decode == "gpu" and dev.type != "cuda":
                raise BadInput("data.decode: gpu needs a CUDA run (--device cuda)")
            self.choose(Choice("jpeg_decode", decode, why))
            workers = cfg.data.workers if cfg.data.workers != "auto" else default_workers(ctx.world)
            self.choose(Choice("loader_workers", workers, "asked for in the config" if cfg.data.workers != "auto" else
                               f"CPU cores per process minus one; pinned memory, persistent workers, prefetch {cfg.data.prefetch}"))
            augment = cfg.data.augment != "off"
            self.loader = D.FileLoader(train_items, cfg, ctx.rank, ctx.world, dev, workers, decode, augment,
                                       self.channels_last, len(classes))
            self.eval_items, self.decode = val_items, decode
            self.kind, self.num_classes = "image", len(classes)
            size = cfg.data.image_size or 224
            self.in_shape = (3, size, size)
        else:
            arrays = user_arrays if user_arrays is not None else D.load_arrays(cfg)
            on = cfg.data.on_device
            hold = torch.device("cpu")
            if dev.type == "cuda":
                limit = torch.cuda.get_device_properties(dev).total_memory * ON_DEVICE_FRACTION
                if on == "on" or (on == "auto" and arrays.nbytes <= limit):
                    hold = dev
                    why = (f"{arrays.nbytes / 2**20:.0f} MiB fits in GPU memory: batches are gathered and augmented "
                           "on the GPU, no loader workers")
                else:
                    why = "asked for in the config" if on == "off" else f"{arrays.nbytes / 2**30:.1f} GiB is too big for the GPU"
            else:
                why = "CPU run: batches are indexed from memory, no loader workers needed"
            placement = "memory" if dev.type == "cpu" else ("device" if hold == dev else "host")
            self.choose(Choice("data_placement", placement, why))
            augment = cfg.data.augment == "on" or (cfg.data.augment == "auto" and ds == "cifar10")
            self.loader = D.ArrayLoader(arrays, cfg, ctx.rank, ctx.world, dev, hold, augment, self.channels_last)
            self.eval_data = arrays if (arrays.x_test is not None and cfg.eval.enabled) else None
            self.kind, self.num_classes = "image", arrays.num_classes
            self.in_shape = tuple(arrays.x_train.shape[1:])
            if cfg.data.image_size and arrays.kind == "image":
                self.in_shape = (self.in_shape[0], cfg.data.image_size, cfg.data.image_size)
        if self.record:
            self.loader_record: dict[int, list[int]] = {}

        accum = cfg.train.grad_accum
        self.steps_per_epoch = self.loader.batches_per_epoch // accum
        if self.steps_per_epoch < 1:
            raise BadInput(f"train.grad_accum: {accum} micro-batches per step, but an epoch has only "
                           f"{self.loader.batches_per_epoch} per device")
        self.total_steps = cfg.train.steps or cfg.train.epochs * self.steps_per_epoch

        # Model. The same seed on every rank gives identical initial weights (DDP also broadcasts).
        torch.manual_seed(cfg.seed)
        model = (user_model if user_model is not None else build_model(cfg, self.in_shape, self.num_classes)).to(dev)
        if self.channels_last and cfg.train.strategy != "fsdp":  # FSDP: the inputs alone (choose_channels_last)
            model = model.to(memory_format=torch.channels_last)
        self.n_params = count_params(model)
        if user_model is not None:
            self.flops_per_sample = entries.flops_of(model, *self._one_sample())
        else:
            self.flops_per_sample = flops_per_sample(model, cfg, self.in_shape)
        torch.manual_seed(cfg.seed + 1000 * ctx.rank + 1)  # dropout masks differ between ranks
        if dev.type == "cuda":
            torch.cuda.manual_seed(cfg.seed + 1000 * ctx.rank + 1)
        self.raw_model = model

        # The distributed wrapper and compilation, in the order wrap.py explains.
        wrapped = wrap_model(model, cfg, ctx, self.total_steps, self.choose, self.entries.get("compile"))
        self.dist_model, self.step_model, self.backward_ctx = wrapped.dist_model, wrapped.step_model, wrapped.backward_ctx
        self.fsdp, self.buffers_from_rank0_at_eval = wrapped.fsdp, wrapped.buffers_from_rank0_at_eval

        fused = self.choose(choose_fused(cfg, dev, self.fsdp)).value
        self.optimizer = build_optimizer(cfg, model.parameters(), fused)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(cfg, self.total_steps))
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        if self.precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
            self.autocast = lambda: torch.autocast(dev.type, dtype=dtype)
        else:
            self.autocast = contextlib.nullcontext
        # About 20 reads per run, at least 10 steps apart: each read drains the GPU queue.
        every = cfg.train.log_every or min(max(10, self.total_steps // 20), max(1, self.total_steps))
        self.log_every = every
        self.choose(Choice("loss_read_every", every, "the loss is read from the device every this many steps: "
                           "no host synchronisation in between"))

    # -- the step -----------------------------------------------------------------------------
    def loss_of(self, x: torch.Tensor, y: torch.Tensor, model: nn.Module | None = None) -> torch.Tensor:
        with self.autocast():
            if self.own_loss:  # your model's forward takes the targets and gives its loss
                return entries.loss_from_output((model or self.step_model)(x, y)).float()
            out = (model or self.step_model)(x)
            if self.loss_fn is not None:
                return self.loss_fn(out, y).float()
            if self.kind == "token":
                return nn.functional.cross_entropy(out.view(-1, out.size(-1)).float(), y.reshape(-1))
            return nn.functional.cross_entropy(out.float(), y)

    def _sync_ctx(self, last: bool):
        if self.fsdp:
            self.raw_model.set_requires_gradient_sync(last)
            return contextlib.nullcontext()
        if not last and hasattr(self.dist_model, "no_sync"):
            return self.dist_model.no_sync()  # accumulate locally: no all-reduce on this micro-batch
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        with self.backward_ctx():
            if self.scaler:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()

    def optimizer_step(self) -> None:
        clip = self.cfg.optim.clip_grad_norm
        if self.scaler:
            if clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            if clip:
                torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), clip)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def _sync(self) -> None:
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize(self.ctx.device)

    def calibrate_comm(self, x: torch.Tensor, y: torch.Tensor, reps: int = 3) -> float:
        """Exposed communication per step: fwd+bwd with gradient sync minus without, in seconds.

        Runs outside the timed steps; gradients are dropped and buffers (BatchNorm statistics)
        restored, so training continues exactly as if it had not run.
        """
        if self.ctx.world == 1:
            return 0.0
        buffers = {k: v.clone() for k, v in self.raw_model.named_buffers()}
        rng = self._rng_state()  # dropout here must not shift the masks training draws next (exact resume)

        cuda = self.ctx.device.type == "cuda"
        hold_s = 0.05  # how long each GPU waits for its host to queue the pass; grows with what is seen

        def timed(sync: bool) -> float:
            nonlocal hold_s
            best = float("inf")
            for _ in range(reps):
                self._sync()
                dist.barrier(group=self.ctx.control)
                if cuda:
                    # Timed on the GPU, with the whole pass queued before it starts. In training the
                    # host runs ahead and the host time of DDP's per-gradient hooks is hidden; a host
                    # clock around an empty queue counts it, along with the ranks' skew leaving the
                    # barrier (host-timed, ResNet-50 on 2 H200s read 2.6 ms where steps differed by
                    # 1.3). A sleep kernel holds the GPU while the host queues; a one-element
                    # all-reduce then starts every rank's pass together.
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    if hasattr(torch.cuda, "_sleep"):  # private API: without it the GPU only starts later
                        torch.cuda._sleep(int(hold_s * SLEEP_CYCLES_PER_S))
                    dist.all_reduce(torch.zeros(1, device=self.ctx.device))
                    start.record()
                t0 = time.perf_counter()
                with self._sync_ctx(sync):
                    self.backward(self.loss_of(x, y))
                if cuda:
                    end.record()
                    hold_s = max(hold_s, 2 * (time.perf_counter() - t0) + 0.005)
                self._sync()
                took = start.elapsed_time(end) / 1000 if cuda else time.perf_counter() - t0
                best = min(best, took)
                self.optimizer.zero_grad(set_to_none=True)
            return best

        local = timed(False)
        synced = timed(True)
        if self.fsdp:
            self.raw_model.set_requires_gradient_sync(True)
        with torch.no_grad():
            for k, v in self.raw_model.named_buffers():
                v.copy_(buffers[k])
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"], self.ctx.device)
        return max(0.0, synced - local)

    def agree_stop(self, elapsed: float) -> bool:
        """All ranks stop together: a host-only MAX over a flag (gloo, no GPU synchronisation)."""
        mine = _Stop.requested or (self.cfg.train.max_seconds > 0 and elapsed >= self.cfg.train.max_seconds)
        flag = torch.tensor([1 if mine else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.ctx.control)
        return bool(flag.item())

    # -- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, Any] | None:
        if self.eval_data is None and not self.eval_items:
            return None
        if not self.cfg.eval.enabled:
            return None
        model = self.raw_model  # eager, not compiled: evaluation batches have another shape
        if self.buffers_from_rank0_at_eval:
            # What DDP would have done before the next forward: every rank evaluates rank 0's
            # BatchNorm statistics, the ones the checkpoint holds.
            with torch.no_grad():
                for b in model.buffers():
                    dist.broadcast(b, src=0)
        model.eval()
        dev = self.ctx.device
        correct = torch.zeros((), device=dev, dtype=torch.float64)
        count = torch.zeros((), device=dev, dtype=torch.float64)
        loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
        if self.eval_data is not None:
            batches = D.eval_batches(self.eval_data, self.cfg, self.ctx.rank, self.ctx.world, dev, self.channels_last)
        else:
            batches = D.file_eval_batches(self.eval_items, self.cfg, self.ctx.rank, self.ctx.world, dev,
                                          self.channels_last, self.decode)
        for x, y, mask in batches:
            with self.autocast():
                out = model(x).float()
            m = mask.to(torch.float64)
            correct += ((out.argmax(1) == y).to(torch.float64) * m).sum()
            loss_sum += (nn.functional.cross_entropy(out, y, reduction="none").to(torch.float64) * m).sum()
            count += m.sum()
        t = torch.stack([correct, count, loss_sum])
        dist.all_reduce(t)
        model.train()
        c, n, ls = t.tolist()
        return {"accuracy": c / n if n else None, "eval_loss": ls / n if n else None, "eval_samples": int(n)}

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any] | None:
        """Train to the end (or a stop); the summary, or None when the checkpoint it resumed from
        had already reached the last step."""
        cfg, ctx = self.cfg, self.ctx
        start_epoch, start_batch, step, resumed_from = self.load()
        if resumed_from and step >= self.total_steps:
            # A finished run resumed with the same length: there is nothing to train, and its
            # summary.json (accuracy, throughput, verdicts) must stay as the finished run wrote it.
            say(ctx, PROGRESS + json.dumps({"event": "complete", "step": step, "total_steps": self.total_steps,
                                            "path": resumed_from}))
            return None
        if resumed_from:
            say(ctx, PROGRESS + json.dumps({"event": "resumed", "step": step, "path": resumed_from}))
        accum = cfg.train.grad_accum
        gbatch = global_batch(cfg, ctx.world)
        unit = "tokens" if self.kind == "token" else "images"
        per_sample_units = cfg.data.seq_len if self.kind == "token" else 1
        self.step_model.train()
        say(ctx, PROGRESS + json.dumps({"event": "start", "total_steps": self.total_steps, "step": step,
                                        "world_size": ctx.world, "global_batch": gbatch,
                                        "steps_per_epoch": self.steps_per_epoch, "params": self.n_params}))
        timers = Timers()
        window = {"t0": time.perf_counter(), "steps": 0, "data": 0.0, "events": [], "busy": 0.0}
        loss_acc = torch.zeros((), device=ctx.device)
        loss_count = 0
        last_loss: float | None = None
        evals: list[dict[str, Any]] = []
        calibrated = False
        stopped = False
        train_t0 = time.perf_counter()
        measure_t0 = None
        first_step = step
        measure_from = step + min(WARMUP_STEPS, max(0, (self.total_steps - step) // 4))
        epoch = start_epoch
        is_cuda = ctx.device.type == "cuda"
        done = step >= self.total_steps
        batch_in_epoch = start_batch
        while not done:
            it = self.loader.epoch(epoch, start_batch)
            batch_in_epoch = start_batch
            start_batch = 0
            while True:
                # One optimizer step = `accum` micro-batches.
                t_fetch = 0.0
                micro: list[tuple[torch.Tensor, torch.Tensor]] = []
                for _ in range(accum):
                    t0 = time.perf_counter()
                    try:
                        xy = next(it)
                    except StopIteration:
                        xy = None
                    t_fetch += time.perf_counter() - t0
                    if xy is None:
                        break
                    micro.append(xy)
                if len(micro) < accum:
                    break  # end of epoch (a partial accumulation group is dropped)
                if self.record:
                    self._record(epoch, batch_in_epoch, accum)
                # Not before one normal step: DDP's static_graph must see a synchronised step first.
                if ctx.world > 1 and not calibrated and step >= measure_from and step > first_step:
                    timers.comm_exposed_per_step_s = self.calibrate_comm(*micro[-1])
                    calibrated = self.calibrated = True
                    if self.clock_watch is not None:  # the clocks of the timed steps, not of the calibration
                        self.clock_watch.stop()
                        self.clock_watch = ClockWatch().start()
                    window = {"t0": time.perf_counter(), "steps": 0, "data": 0.0, "events": [], "busy": 0.0}
                    t_fetch = 0.0
                if is_cuda:
                    ev0 = torch.cuda.Event(enable_timing=True)
                    ev1 = torch.cuda.Event(enable_timing=True)
                    ev0.record()
                else:
                    c0 = time.perf_counter()
                for j, (x, y) in enumerate(micro):
                    with self._sync_ctx(j == accum - 1):
                        loss = self.loss_of(x, y)
                        self.backward(loss / accum if accum > 1 else loss)
                    loss_acc += loss.detach()
                    loss_count += 1
                self.optimizer_step()
                step += 1
                faults.at_step(step)  # where this rank is, for a hang's diagnosis; injected faults
                batch_in_epoch += accum
                if is_cuda:
                    ev1.record()
                    window["events"].append((ev0, ev1))
                else:
                    window["busy"] += time.perf_counter() - c0
                window["data"] += t_fetch
                window["steps"] += 1
                if step == measure_from:
                    self._sync()
                    if is_cuda and self.clock_watch is None:
                        self.clock_watch = ClockWatch().start()
                    measure_t0 = time.perf_counter()
                    timers = Timers(comm_exposed_per_step_s=timers.comm_exposed_per_step_s)
                    window = {"t0": measure_t0, "steps": 0, "data": 0.0, "events": [], "busy": 0.0}

                finished = step >= self.total_steps
                if step % self.log_every == 0 or finished:
                    # The one host-device synchronisation of the window: read the loss.
                    last_loss = loss_acc.item() / max(1, loss_count)
                    loss_acc.zero_()
                    loss_count = 0
                    now = time.perf_counter()
                    busy = window["busy"] + sum(a.elapsed_time(b) for a, b in window["events"]) / 1000.0
                    wall = now - window["t0"]
                    if measure_t0 is not None and step > measure_from:
                        timers.steps += window["steps"]
                        timers.wall_s += wall
                        timers.busy_s += busy
                        timers.data_wait_s += min(window["data"], max(0.0, wall - busy))
                    self._progress(step, epoch, last_loss, window, wall, busy, gbatch, per_sample_units, unit)
                    window = {"t0": time.perf_counter(), "steps": 0, "data": 0.0, "events": [], "busy": 0.0}
                if cfg.checkpoint.enabled and cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0 \
                        and not finished:
                    self.save(epoch, batch_in_epoch, step)
                if finished:
                    # The loss read above waited for the last step: the clocks end here, before evaluation.
                    self._stop_clock_watch()
                    done = True
                    break
                if step % STOP_CHECK_EVERY == 0 and self.agree_stop(time.perf_counter() - train_t0):
                    stopped = True
                    done = True
                    say(ctx, PROGRESS + json.dumps({"event": "stopping", "step": step,
                                                    "why": _Stop.signal_name or "train.max_seconds reached",
                                                    "checkpoint": bool(cfg.checkpoint.enabled)}))
                    break
            if done:
                # A stop or the step limit inside an epoch: resume continues at this batch.
                resume_epoch, resume_batch = (epoch, batch_in_epoch)
                if batch_in_epoch >= (self.steps_per_epoch * accum):
                    resume_epoch, resume_batch = epoch + 1, 0
                # After a stop request the checkpoint comes first: no evaluation eats the grace period.
                ev = None if stopped else self._maybe_eval(epoch, force=True)
                if ev:
                    evals.append(ev)
                break
            ev = self._maybe_eval(epoch, force=False)
            if ev:
                evals.append(ev)
            epoch += 1
            if cfg.train.steps == 0 and epoch >= cfg.train.epochs:
                resume_epoch, resume_batch = epoch, 0
                ev = self._maybe_eval(epoch - 1, force=True) if not evals or evals[-1].get("epoch") != epoch - 1 else None
                if ev:
                    evals.append(ev)
                break
        else:
            resume_epoch, resume_batch = start_epoch, start_batch
        self._sync()
        self._stop_clock_watch()
        self.save(resume_epoch, resume_batch, step)
        return self._summary(timers, step, last_loss, evals, stopped, resumed_from, gbatch, unit, per_sample_units,
                             time.perf_counter() - train_t0)

    def _stop_clock_watch(self) -> None:
        """Keep the clocks of the timed steps (once: a second call keeps the first result)."""
        if self.clock_watch is not None:
            self.gpu_clock = self.clock_watch.stop()
            self.clock_watch = None

    def _record(self, epoch: int, batch: int, accum: int) -> None:
        n = self.loader.n
        idx = D.train_shard(n, self.ctx.rank, self.ctx.world, epoch, self.cfg.seed)
        b = self.cfg.data.batch_size
        self.loader_record.setdefault(epoch, []).extend(idx[batch * b:(batch + accum) * b].tolist())

    def _maybe_eval(self, epoch: int, force: bool) -> dict[str, Any] | None:
        if not force and (epoch + 1) % self.cfg.eval.every_epochs:
            return None
        ev = self.evaluate()
        if ev is None:
            return None
        ev["epoch"] = epoch
        say(self.ctx, PROGRESS + json.dumps({"event": "eval", **ev}))
        if self.tb is not None and ev.get("accuracy") is not None:
            self.tb.add_scalar("eval/accuracy", ev["accuracy"], epoch)
            self.tb.add_scalar("eval/loss", ev["eval_loss"], epoch)
        return ev


