"""The TensorFlow `Trainer`: model, optimizer and checkpoint under the strategy, the step
functions, the two loops (a custom `tf.function` step, or Keras `model.fit`) and the summary.

Both loops end every optimizer step in the same `after_step`: the step and epoch counters a
checkpoint resumes from, the stop rule (SIGTERM or train.max_seconds, agreed by all workers), the
loss read and the log line every log_every steps, and the periodic checkpoint. Runs only in the
TensorFlow worker process (`train/tf/worker.py`).
"""

from __future__ import annotations

import hashlib
import math
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from gpurig.errors import BadInput
from gpurig.launch.tfjob import make_strategy
from gpurig.train.config import from_dict
from gpurig.train.tf import data as tfdata
from gpurig.train.tf.choices import needs_loss_scaling
from gpurig.train.tf.models import build_model
from gpurig.train.tf.optim import make_optimizer
from gpurig.train.tf.stop import Stop


class NonFiniteLoss(Exception):
    """The loss read at a log step is inf or nan."""


class Trainer:
    from_logits = True  # the model gives logits (the built-in ones always; yours unless it ends in a softmax)

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        cfg = self.cfg = from_dict(job["config"])
        self.out = Path(job["out_dir"])
        self.worker_index = job["cluster"]["index"]
        self.workers = job["cluster"]["workers"]
        self.chief = self.worker_index == 0
        self.policy = job["precision"]
        keras.mixed_precision.set_global_policy(self.policy)

        strategy = self.strategy = make_strategy(tf, job)
        self.replicas = strategy.num_replicas_in_sync
        self.local_replicas = self.replicas // self.workers
        self.per_replica = cfg.data.batch_size
        self.global_batch = self.per_replica * self.replicas
        if self.global_batch != job["global_batch"]:
            raise BadInput(f"the strategy holds {self.replicas} replicas, the plan expected "
                           f"{job['global_batch'] // self.per_replica}")

        if cfg.data.entry:
            from gpurig.train.tf.entries import user_source

            self.src = user_source(cfg)
        else:
            self.src = tfdata.load_source(cfg, samples_default=64 * self.global_batch)
        if len(self.src.train) < self.global_batch:
            raise BadInput(
                f"data.batch_size: the global batch {self.global_batch} ({self.per_replica} x {self.replicas} "
                f"replicas) is larger than the {len(self.src.train)} training samples of {cfg.data.dataset!r}"
            )
        self.pipe = tfdata.Pipeline(self.src, cfg.seed)
        self.steps_per_epoch = self.pipe.steps_per_epoch(self.global_batch)
        self.total_steps = cfg.train.steps or cfg.train.epochs * self.steps_per_epoch
        self.epochs = math.ceil(self.total_steps / self.steps_per_epoch)
        self.log_every = cfg.train.log_every or max(1, self.total_steps // 20)
        self.scaling = needs_loss_scaling(self.policy)

        with strategy.scope():
            keras.utils.set_random_seed(cfg.seed)  # the same initial weights on every worker and every run
            if cfg.model.entry:
                from gpurig.train.tf.entries import build_user_model, gives_probabilities

                self.model = build_user_model(cfg, self.src.image_shape, self.src.num_classes)
                self.from_logits = not gives_probabilities(self.model)
            else:
                self.model = build_model(cfg, self.src.image_shape, self.src.num_classes)
            self.optimizer = make_optimizer(keras, cfg, self.total_steps, self.scaling)
            self.optimizer.build(self.model.trainable_variables)  # create slots now, so a restore fills them
            self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.step_in_epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
        self._checkpointing()
        self._step_functions()

        self.eval_ds = self.pipe.eval_dataset()
        self.writer = tf.summary.create_file_writer(str(self.out / "tensorboard")) if self.chief else None
        self.windows: list[dict[str, float | None]] = []  # one per log interval: steps, seconds, data-wait seconds
        self.window = {"start": 0.0, "steps": 0, "wait": 0.0}
        self.step = self.start_step
        self.epoch = self.start_epoch
        self.final_loss: float | None = None
        self.accuracy: float | None = None
        self.stopped: str | None = None
        self.evals: list[dict[str, Any]] = []
        self.t_start = time.monotonic()

    def say(self, msg: str) -> None:
        if self.chief:
            print(msg, flush=True)

    # -- setup ------------------------------------------------------------------------------
    def _checkpointing(self) -> None:
        cfg, job = self.cfg, self.job
        # Dropout's random state lives in Keras seed-generator variables, which a checkpoint of the
        # model alone leaves out; saving them too makes a resumed run draw the same masks.
        rng_state = {f"s{i}": v.value for i, v in enumerate(self.model.variables) if "seed_generator" in v.path}
        ckpt = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, epoch=self.epoch_var,
                                   step_in_epoch=self.step_in_epoch_var, rng=rng_state)
        self.ckpt_dir = self.out / "checkpoints" if self.chief else self.out / f".checkpoints-worker{self.worker_index}"
        self.manager = tf.train.CheckpointManager(ckpt, str(self.ckpt_dir), max_to_keep=cfg.checkpoint.keep) \
            if cfg.checkpoint.enabled else None
        self.resumed_from = None
        wanted = job.get("resume_path") or (self.manager.latest_checkpoint if self.manager else None)
        if job.get("resume") and wanted:
            try:
                ckpt.restore(wanted).assert_existing_objects_matched()
            except (AssertionError, ValueError, tf.errors.NotFoundError) as exc:
                raise BadInput(f"--resume: checkpoint {wanted} does not fit this model and optimizer "
                               f"({str(exc).splitlines()[0][:200]})") from None
            self.resumed_from = wanted
        self.start_step = int(self.optimizer.iterations.numpy())
        self.start_epoch = int(self.epoch_var.numpy())
        self.skip = int(self.step_in_epoch_var.numpy())
        if self.resumed_from:
            self.say(f"resumed from {self.resumed_from} at step {self.start_step} "
                     f"(epoch {self.start_epoch + 1}, batch {self.skip})")

    def _step_functions(self) -> None:
        strategy, model, optimizer = self.strategy, self.model, self.optimizer
        loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=self.from_logits, reduction="none")
        global_batch, scaling = self.global_batch, self.scaling

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                # Sum over the replica's examples / the GLOBAL batch: the all-reduced (summed) gradient
                # then equals the gradient of the mean loss over the whole global batch.
                loss = tf.nn.compute_average_loss(loss_obj(y, logits), global_batch_size=global_batch)
                scaled = optimizer.scale_loss(loss) if scaling else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), y), tf.float32))
            return loss, correct

        @tf.function
        def train_step(batch):
            x, y = batch
            loss, correct = strategy.run(replica_step, args=(x, y))
            return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                    strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None))

        @tf.function
        def sum_over_workers(values):
            """A sum over the workers (each worker's local replicas contribute the same value)."""
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(values,)), axis=None)

        @tf.function
        def eval_batch(x, y):
            logits = model(x, training=False)
            return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), y), tf.float32))

        self.train_step, self.sum_over_workers, self.eval_batch = train_step, sum_over_workers, eval_batch

    def _epoch_dataset(self, epoch: int, first_skip: int):
        def dataset_fn(ctx):
            return self.pipe.train_epoch(epoch, self.global_batch, self.per_replica, ctx.input_pipeline_id,
                                         self.local_replicas, skip_steps=first_skip)

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    # -- across workers -----------------------------------------------------------------------
    def gather_rows(self, row: list[float]) -> list[list[float]]:
        """Each worker's row, gathered by a sum over a table where each worker fills its own line."""
        table = np.zeros((self.workers, len(row)), dtype=np.float64)
        table[self.worker_index] = row
        summed = self.sum_over_workers(tf.constant(table)).numpy() / self.local_replicas
        return summed.tolist()

    def agree_stop(self, local: bool) -> bool:
        """All workers stop together: any worker's stop flag, summed over workers by a collective."""
        if self.workers == 1:
            return local
        return bool(self.sum_over_workers(tf.constant(1.0 if local else 0.0)).numpy() > 0)

    def weights_digest(self) -> str:
        """sha256 over every weight, optimizer slot and RNG state, in a fixed order: two runs that
        end with this same digest ended bit for bit identical."""
        h = hashlib.sha256()
        for v in [*self.model.weights, *self.optimizer.variables]:
            h.update(np.ascontiguousarray(v.numpy()).tobytes())
        return h.hexdigest()

    # -- evaluation and checkpoints -----------------------------------------------------------
    def evaluate(self) -> float | None:
        if self.eval_ds is None:
            return None
        correct = total = 0.0
        for x, y in self.eval_ds:
            correct += float(self.eval_batch(x, y))
            total += int(y.shape[0])
        return correct / total if total else None

    def save(self, reason: str) -> None:
        if self.manager is None:
            return
        path = self.manager.save(checkpoint_number=self.step)
        if self.chief:
            print(f"checkpoint {path} ({reason})", flush=True)

    def finish_epoch(self) -> None:
        """An epoch ended (both loops): count it, and evaluate when due (every N epochs and at the end):
        keep the accuracy, write it to TensorBoard, say it."""
        self.epoch += 1
        last_epoch = self.epoch >= self.epochs or self.step >= self.total_steps
        if self.eval_ds is None or not (self.epoch % self.cfg.eval.every_epochs == 0 or last_epoch):
            return
        self.accuracy = self.evaluate()
        self.evals.append({"epoch": self.epoch, "step": self.step, "accuracy": self.accuracy})
        if self.writer:
            with self.writer.as_default(step=self.step):
                tf.summary.scalar("eval/accuracy", self.accuracy)
        self.say(f"epoch {self.epoch}: test accuracy {self.accuracy:.4f}")

    # -- the step bookkeeping both loops share --------------------------------------------------
    def _open_window(self) -> None:
        self.window = {"start": time.perf_counter(), "steps": 0, "wait": 0.0}

    def after_step(self, in_epoch: int, read_loss: Callable[[], float], waits_known: bool) -> bool:
        """One optimizer step is done (`in_epoch` steps into this epoch). Returns True to leave the loop.
        Raises NonFiniteLoss when the loss read at a log step is inf or nan."""
        cfg = self.cfg
        self.step += 1
        self.window["steps"] += 1
        self.step_in_epoch_var.assign(in_epoch % self.steps_per_epoch)
        if in_epoch == self.steps_per_epoch:
            self.epoch_var.assign(self.epoch + 1)
        local_stop = Stop.requested is not None or (
            cfg.train.max_seconds > 0 and time.monotonic() - self.t_start > cfg.train.max_seconds)
        log_now = self.step % self.log_every == 0 or self.step == self.total_steps or in_epoch == self.steps_per_epoch
        if self.workers == 1:
            if local_stop:
                self.stopped = Stop.requested or "max_seconds"
        elif log_now and self.agree_stop(local_stop):
            # Every worker must leave at the same step (a collective waits for all of them).
            self.stopped = Stop.requested or ("max_seconds" if local_stop else "SIGTERM on another worker")
        if log_now or self.stopped:
            # Reading the loss is a host-device sync point: only here, every log_every steps.
            self.final_loss = read_loss()
            if not math.isfinite(self.final_loss):
                raise NonFiniteLoss(self.final_loss)
            elapsed = time.perf_counter() - self.window["start"]
            steps = self.window["steps"]
            self.windows.append({"steps": steps, "seconds": elapsed,
                                 "data_wait": self.window["wait"] if waits_known else None})
            it = self.optimizer.iterations
            lr = float(self.optimizer.learning_rate) if not callable(self.optimizer.learning_rate) else float(
                self.optimizer.learning_rate(it))
            rate = steps * self.global_batch / max(elapsed, 1e-9)
            if self.writer:
                with self.writer.as_default(step=self.step):
                    tf.summary.scalar("train/loss", self.final_loss)
                    tf.summary.scalar("train/lr", lr)
                    tf.summary.scalar("train/samples_per_s", rate)
            self.say(f"step {self.step}/{self.total_steps}  epoch {self.epoch + 1}  loss {self.final_loss:.4f}  "
                     f"lr {lr:.3g}  {rate:.0f} samples/s")
            self._open_window()
        every = cfg.checkpoint.every_steps
        if every and self.step % every == 0 and not self.stopped:
            self.save(f"every {every} steps")
        return self.stopped is not None

    # -- the loops ------------------------------------------------------------------------------
    def run_custom(self) -> None:
        """A `tf.function` step under `strategy.run`; the time spent waiting for the next batch is measured."""
        while self.epoch < self.epochs and self.step < self.total_steps:
            first_skip = self.skip if self.epoch == self.start_epoch else 0
            self.epoch_var.assign(self.epoch)
            it = iter(self._epoch_dataset(self.epoch, first_skip))
            in_epoch = first_skip
            self._open_window()
            while in_epoch < self.steps_per_epoch and self.step < self.total_steps:
                t0 = time.perf_counter()
                batch = next(it)
                self.window["wait"] += time.perf_counter() - t0
                loss_t, _correct = self.train_step(batch)
                in_epoch += 1
                if self.after_step(in_epoch, lambda loss_t=loss_t: float(loss_t), waits_known=True):
                    return
            self.finish_epoch()

    def run_fit(self) -> None:
        """Keras model.fit, one call per epoch on the same per-replica datasets as the custom loop."""
        self.model.compile(optimizer=self.optimizer,
                           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=self.from_logits))
        trainer = self
        failure: list[NonFiniteLoss] = []

        class Hooks(keras.callbacks.Callback):
            def __init__(self, first_skip: int):
                super().__init__()
                self.first_skip = first_skip

            def on_train_batch_end(self, batch, logs=None):
                # fit's "loss" is the running mean over the epoch so far.
                def read() -> float:
                    return float((logs or {}).get("loss", float("nan")))

                try:
                    leave = trainer.after_step(self.first_skip + batch + 1, read, waits_known=False)
                except NonFiniteLoss as exc:
                    failure.append(exc)
                    leave = True
                if leave:
                    self.model.stop_training = True

        while self.epoch < self.epochs and self.step < self.total_steps:
            first_skip = self.skip if self.epoch == self.start_epoch else 0
            self.epoch_var.assign(self.epoch)
            n = min(self.steps_per_epoch - first_skip, self.total_steps - self.step)
            dist = self._epoch_dataset(self.epoch, first_skip)
            self._open_window()
            self.model.fit(dist, epochs=1, steps_per_epoch=n, verbose=0, callbacks=[Hooks(first_skip)])
            if failure:
                raise failure[0]
            if self.stopped:
                return
            self.finish_epoch()

    def run(self) -> int:
        """Train, save, and return the exit status (1 when the loss went non-finite)."""
        self.say(f"training {self.cfg.model.name} on {self.cfg.data.dataset}: {self.replicas} replicas, "
                 f"global batch {self.global_batch}, {self.total_steps} steps ({self.steps_per_epoch} per epoch), "
                 f"policy {self.policy}")
        try:
            self.run_fit() if self.cfg.tf.loop == "fit" else self.run_custom()
        except NonFiniteLoss as exc:
            print(f"gpurig: error: the loss is {exc.args[0]} at step {self.step} (lower optim.lr, or use "
                  "precision=fp32)", file=sys.stderr)
            return 1
        self.train_seconds = time.monotonic() - self.t_start
        if self.accuracy is None and self.eval_ds is not None and not self.stopped:
            self.accuracy = self.evaluate()  # a resumed run that had nothing left to train still reports it
            self.evals.append({"epoch": self.epoch, "step": self.step, "accuracy": self.accuracy})
        if self.stopped:
            self.save(f"stopped by {self.stopped}")
            self.say(f"stopped by {self.stopped} at step {self.step}; resume with the same command and --resume")
        elif self.manager:
            self.save("end of training")
        if self.writer:
            self.writer.flush()
        return 0

    # -- the summary ------------------------------------------------------------------------------
    def _peak_memory(self) -> int | None:
        if self.job["device"] == "gpu":
            try:
                return max(int(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"])
                           for i in range(self.local_replicas))
            except Exception:  # the allocator does not report it on every build: missing is a value
                return None
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; the process peak

    def summary(self) -> dict[str, Any]:
        """The run's result, gathered over the workers (every worker must call it: it is a collective)."""
        job, cfg = self.job, self.cfg
        # Step time from the log windows; the first window holds tf.function tracing, so leave it out
        # when there are others ("the first iteration is an outlier").
        timed = self.windows[1:] if len(self.windows) > 1 else self.windows
        t_steps = sum(w["steps"] for w in timed)
        t_secs = sum(w["seconds"] for w in timed)
        waits_known = all(w["data_wait"] is not None for w in timed)  # model.fit does not expose it
        t_wait = sum(w["data_wait"] for w in timed) if waits_known else None
        mean_s = t_secs / t_steps if t_steps else None
        wait_s = t_wait / t_steps if (t_steps and t_wait is not None) else None
        peak = self._peak_memory()
        mine = [mean_s or 0.0, -1.0 if wait_s is None else wait_s, float(peak or 0), float(t_steps)]
        rows = self.gather_rows(mine) if self.workers > 1 else [mine]  # also a barrier: nobody leaves early
        per_rank = [{
            "rank": i,
            "replicas": self.local_replicas,
            "step_time_s": r[0] or None,
            "data_wait_s": r[1] if (r[0] and r[1] >= 0) else None,
            "compute_s": (r[0] - r[1]) if (r[0] and r[1] >= 0) else None,
            "comm_exposed_s": None,  # all-reduce runs inside the step's graph; not separated in TensorFlow
            "peak_memory_bytes": int(r[2]) or None,
            "steps_timed": int(r[3]),
        } for i, r in enumerate(rows)]
        step_means = [r["step_time_s"] for r in per_rank if r["step_time_s"]]
        mean_all = sum(step_means) / len(step_means) if step_means else None
        waits = [r["data_wait_s"] for r in per_rank if r["data_wait_s"] is not None]
        wait_all = sum(waits) / len(waits) if waits else None
        rate = self.global_batch / mean_all if mean_all else None
        return {
            "framework": "tf",
            "world_size": self.replicas,
            "workers": self.workers,
            "worker_index": self.worker_index,
            "device": job["device_label"],
            "device_name": job.get("device_name") or job["device_label"],
            "strategy": "multi_worker_mirrored" if self.workers > 1 else "mirrored",
            "model": cfg.model.entry or cfg.model.name,
            "dataset": cfg.data.entry or cfg.data.dataset,
            "params": int(self.model.count_params()),
            "unit": "samples",
            "samples_per_s": rate,
            "samples_per_s_per_device": rate / self.replicas if rate else None,
            "units_per_s": rate,
            "units_per_s_per_device": rate / self.replicas if rate else None,
            "step_time": {
                "mean_s": mean_all,
                "data_wait_fraction": wait_all / mean_all if (mean_all and wait_all is not None) else None,
                "compute_fraction": (1 - wait_all / mean_all) if (mean_all and wait_all is not None) else None,
                "comm_exposed_fraction": None,
                "steps_timed": t_steps,
                "method": "wall time of log_every-step windows (the first, with tracing, left out); data wait = "
                          "host time in next() on the distributed iterator",
            },
            "per_rank": per_rank,
            "peak_memory_bytes": max((r["peak_memory_bytes"] for r in per_rank if r["peak_memory_bytes"]),
                                     default=None),
            "memory_total_bytes": job.get("memory_total_bytes") if job["device"] == "gpu" else None,
            "batch_size_per_device": self.per_replica,
            "global_batch_size": self.global_batch,
            "grad_accum": 1,
            "steps": self.step,
            "total_steps": self.total_steps,
            "final_loss": self.final_loss,
            "accuracy": self.accuracy,
            "eval_samples": len(self.src.test) if (self.src.test is not None and self.evals) else None,
            "evals": self.evals,
            "seconds": self.train_seconds,
            "stopped": self.stopped is not None,
            "stop_reason": self.stopped,
            "resumed_from": self.resumed_from,
            "checkpoints": list(self.manager.checkpoints) if self.manager and self.chief else [],
            "precision": self.policy,
            "tensorflow_version": tf.__version__,
            "weights_sha256": self.weights_digest(),
        }
