"""The TensorFlow training worker: one process per machine, MirroredStrategy over its devices.

Started by `gpurig train --framework tf` (through `gpurig.train.tf.run_tf_training`), never by hand:

    python -m gpurig.train.tf.worker --job RUN_DIR/tf_job.json

The job file holds the `TrainConfig` and the decisions the parent made (device, replicas,
precision policy, cross-device ops). With a TF_CONFIG in the environment this process is one
worker of a MultiWorkerMirroredStrategy job. Worker 0 (the chief) alone prints, writes TensorBoard
logs, checkpoints and `summary.json`; the other workers save checkpoints to a scratch directory
(every worker must take part in a save) and write `worker-<i>.json`.

Exit status: 0 trained (or stopped by SIGTERM / train.max_seconds after saving a checkpoint),
1 training failed (non-finite loss), 2 bad input found here (a data file, a model/data mismatch).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gpurig.launch.tfjob import configure_devices, make_strategy

# Quiet TensorFlow's C++ start-up chatter; set before the import that reads it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class Stop:
    """Set by SIGTERM: the loop finishes the step it is in, saves a checkpoint and exits."""

    requested: str | None = None

    @classmethod
    def install(cls) -> None:
        def handler(signum, frame):  # noqa: ARG001
            cls.requested = "SIGTERM"

        signal.signal(signal.SIGTERM, handler)


def make_schedule(keras, cfg, total_steps: int):
    """The learning rate of `TrainConfig.schedule` as a function of the optimizer step."""
    import tensorflow as tf

    sch = cfg.schedule
    peak = cfg.optim.lr

    class Schedule(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warm = float(sch.warmup_steps)
            if sch.name == "constant":
                lr = tf.constant(peak, tf.float32)
            elif sch.name == "step":
                lr = peak * tf.pow(float(sch.gamma), tf.floor((step - warm) / float(sch.step_size)))
            else:
                span = max(1.0, float(total_steps) - warm)
                frac = tf.clip_by_value((step - warm) / span, 0.0, 1.0)
                low = peak * sch.min_lr_ratio
                if sch.name == "cosine":
                    lr = low + (peak - low) * 0.5 * (1.0 + tf.cos(math.pi * frac))
                else:
                    lr = peak - (peak - low) * frac
            if sch.warmup_steps:
                lr = tf.where(step < warm, peak * (step + 1.0) / warm, lr)
            return lr

        def get_config(self):
            return {}

    return Schedule()


def make_optimizer(keras, cfg, total_steps: int, loss_scaling: bool):
    o = cfg.optim
    lr = make_schedule(keras, cfg, total_steps)
    clip = {"global_clipnorm": o.clip_grad_norm} if o.clip_grad_norm > 0 else {}
    if o.name == "sgd":
        opt = keras.optimizers.SGD(lr, momentum=o.momentum, nesterov=o.nesterov,
                                   weight_decay=o.weight_decay or None, **clip)
    elif o.name == "adam":
        opt = keras.optimizers.Adam(lr, beta_1=o.beta1, beta_2=o.beta2, weight_decay=o.weight_decay or None, **clip)
    else:
        opt = keras.optimizers.AdamW(lr, beta_1=o.beta1, beta_2=o.beta2, weight_decay=o.weight_decay, **clip)
    if loss_scaling:
        # float16 gradients underflow: scale the loss up, unscale before the update, skip steps with inf/nan.
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def train(job: dict[str, Any]) -> int:
    import numpy as np
    import tensorflow as tf

    configure_devices(tf, job)  # first thing: before any op touches a device

    import keras

    from gpurig.errors import BadInput
    from gpurig.train.config import from_dict
    from gpurig.train.tf import data as tfdata
    from gpurig.train.tf.decisions import needs_loss_scaling
    from gpurig.train.tf.models import build_model

    cfg = from_dict(job["config"])
    out = Path(job["out_dir"])
    worker_index = job["cluster"]["index"]
    workers = job["cluster"]["workers"]
    chief = worker_index == 0
    policy = job["precision"]
    keras.mixed_precision.set_global_policy(policy)

    def say(msg: str) -> None:
        if chief:
            print(msg, flush=True)

    strategy = make_strategy(tf, job)
    replicas = strategy.num_replicas_in_sync
    local_replicas = replicas // workers
    per_replica = cfg.data.batch_size
    global_batch = per_replica * replicas
    if global_batch != job["global_batch"]:
        raise BadInput(f"the strategy holds {replicas} replicas, the plan expected {job['global_batch'] // per_replica}")

    src = tfdata.load_source(cfg, samples_default=64 * global_batch)
    if len(src.train) < global_batch:
        raise BadInput(
            f"data.batch_size: the global batch {global_batch} ({per_replica} x {replicas} replicas) is larger "
            f"than the {len(src.train)} training samples of {cfg.data.dataset!r}"
        )
    pipe = tfdata.Pipeline(src, cfg.seed)
    steps_per_epoch = pipe.steps_per_epoch(global_batch)
    total_steps = cfg.train.steps or cfg.train.epochs * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    log_every = cfg.train.log_every or max(1, total_steps // 20)

    with strategy.scope():
        keras.utils.set_random_seed(cfg.seed)  # the same initial weights on every worker and every run
        model = build_model(cfg, src.image_shape, src.num_classes)
        optimizer = make_optimizer(keras, cfg, total_steps, needs_loss_scaling(policy))
        optimizer.build(model.trainable_variables)  # create slots now, so a restore fills them
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        step_in_epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
    # Dropout's random state lives in Keras seed-generator variables, which a checkpoint of the
    # model alone leaves out; saving them too makes a resumed run draw the same masks.
    rng_state = {f"s{i}": v.value for i, v in enumerate(model.variables) if "seed_generator" in v.path}
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var,
                               step_in_epoch=step_in_epoch_var, rng=rng_state)
    ckpt_dir = out / "checkpoints" if chief else out / f".checkpoints-worker{worker_index}"
    manager = tf.train.CheckpointManager(ckpt, str(ckpt_dir), max_to_keep=cfg.checkpoint.keep) \
        if cfg.checkpoint.enabled else None

    resumed_from = None
    wanted = job.get("resume_path") or (manager.latest_checkpoint if manager else None)
    if job.get("resume") and wanted:
        try:
            ckpt.restore(wanted).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.NotFoundError) as exc:
            raise BadInput(f"--resume: checkpoint {wanted} does not fit this model and optimizer "
                           f"({str(exc).splitlines()[0][:200]})") from None
        resumed_from = wanted
    start_step = int(optimizer.iterations.numpy())
    start_epoch = int(epoch_var.numpy())
    skip = int(step_in_epoch_var.numpy())
    if resumed_from:
        say(f"resumed from {resumed_from} at step {start_step} (epoch {start_epoch + 1}, batch {skip})")

    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    scaling = needs_loss_scaling(policy)

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
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(values,)), axis=None)

    def gather_rows(row: list[float]) -> list[list[float]]:
        """Each worker's row, gathered by a sum over a table where each worker fills its own line."""
        table = np.zeros((workers, len(row)), dtype=np.float64)
        table[worker_index] = row
        summed = sum_over_workers(tf.constant(table)).numpy() / local_replicas
        return summed.tolist()

    @tf.function
    def stop_votes(flag):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(flag,)), axis=None)

    def agree_stop(local: bool) -> bool:
        """All workers stop together: any worker's stop flag, summed over workers by a collective."""
        if workers == 1:
            return local
        return bool(stop_votes(tf.constant(1.0 if local else 0.0)).numpy() > 0)

    def weights_digest() -> str:
        """sha256 over every weight, optimizer slot and RNG state, in a fixed order: two runs that
        end with this same digest ended bit for bit identical."""
        import hashlib

        h = hashlib.sha256()
        for v in [*model.weights, *optimizer.variables]:
            h.update(np.ascontiguousarray(v.numpy()).tobytes())
        return h.hexdigest()

    eval_ds = pipe.eval_dataset()

    @tf.function
    def eval_batch(x, y):
        logits = model(x, training=False)
        return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1), y), tf.float32))

    def evaluate() -> float | None:
        if eval_ds is None:
            return None
        correct = total = 0.0
        for x, y in eval_ds:
            correct += float(eval_batch(x, y))
            total += int(y.shape[0])
        return correct / total if total else None

    writer = tf.summary.create_file_writer(str(out / "tensorboard")) if chief else None
    windows: list[dict[str, float]] = []  # one per log interval: steps, seconds, data-wait seconds
    step = start_step
    final_loss = None
    accuracy = None
    stopped = None
    evals: list[dict[str, Any]] = []
    t_start = time.monotonic()
    say(f"training {cfg.model.name} on {cfg.data.dataset}: {replicas} replicas, global batch {global_batch}, "
        f"{total_steps} steps ({steps_per_epoch} per epoch), policy {policy}")

    def save(reason: str) -> None:
        if manager is None:
            return
        path = manager.save(checkpoint_number=step)
        if chief:
            print(f"checkpoint {path} ({reason})", flush=True)

    def finish_epoch() -> None:
        """An epoch ended (both loops): count it, and evaluate when due (every N epochs and at the end):
        keep the accuracy, write it to TensorBoard, say it."""
        nonlocal epoch, accuracy
        epoch += 1
        last_epoch = epoch >= epochs or step >= total_steps
        if eval_ds is None or not (epoch % cfg.eval.every_epochs == 0 or last_epoch):
            return
        accuracy = evaluate()
        evals.append({"epoch": epoch, "step": step, "accuracy": accuracy})
        if writer:
            with writer.as_default(step=step):
                tf.summary.scalar("eval/accuracy", accuracy)
        say(f"epoch {epoch}: test accuracy {accuracy:.4f}")

    def run_custom() -> int | None:
        nonlocal step, final_loss, accuracy, stopped, epoch
        epoch = start_epoch
        while epoch < epochs and step < total_steps:
            first_skip = skip if epoch == start_epoch else 0
            epoch_var.assign(epoch)

            def dataset_fn(ctx, epoch=epoch, first_skip=first_skip):
                return pipe.train_epoch(epoch, global_batch, per_replica, ctx.input_pipeline_id,
                                        local_replicas, skip_steps=first_skip)

            dist = strategy.distribute_datasets_from_function(dataset_fn)
            it = iter(dist)
            in_epoch = first_skip
            w_start = time.perf_counter()
            w_wait = 0.0
            w_steps = 0
            while in_epoch < steps_per_epoch and step < total_steps:
                t0 = time.perf_counter()
                batch = next(it)
                w_wait += time.perf_counter() - t0
                loss_t, _correct = train_step(batch)
                step += 1
                in_epoch += 1
                w_steps += 1
                step_in_epoch_var.assign(in_epoch % steps_per_epoch)
                if in_epoch == steps_per_epoch:
                    epoch_var.assign(epoch + 1)
                local_stop = Stop.requested is not None or (
                    cfg.train.max_seconds > 0 and time.monotonic() - t_start > cfg.train.max_seconds)
                log_now = step % log_every == 0 or step == total_steps or in_epoch == steps_per_epoch
                if workers == 1:
                    if local_stop:
                        stopped = Stop.requested or "max_seconds"
                elif log_now and agree_stop(local_stop):
                    # Every worker must leave at the same step (a collective waits for all of them).
                    stopped = Stop.requested or ("max_seconds" if local_stop else "SIGTERM on another worker")
                if log_now or stopped:
                    # Reading the loss is a host-device sync point: only here, every log_every steps.
                    final_loss = float(loss_t)
                    if not math.isfinite(final_loss):
                        print(f"gpurig: error: the loss is {final_loss} at step {step} (lower optim.lr, or use "
                              "precision=fp32)", file=sys.stderr)
                        return 1
                    elapsed = time.perf_counter() - w_start
                    windows.append({"steps": w_steps, "seconds": elapsed, "data_wait": w_wait})
                    lr = float(optimizer.learning_rate) if not callable(optimizer.learning_rate) else float(
                        optimizer.learning_rate(optimizer.iterations))
                    if writer:
                        with writer.as_default(step=step):
                            tf.summary.scalar("train/loss", final_loss)
                            tf.summary.scalar("train/lr", lr)
                            tf.summary.scalar("train/samples_per_s", w_steps * global_batch / max(elapsed, 1e-9))
                    say(f"step {step}/{total_steps}  epoch {epoch + 1}  loss {final_loss:.4f}  lr {lr:.3g}  "
                        f"{w_steps * global_batch / max(elapsed, 1e-9):.0f} samples/s")
                    w_start, w_wait, w_steps = time.perf_counter(), 0.0, 0
                if cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0 and not stopped:
                    save(f"every {cfg.checkpoint.every_steps} steps")
                if stopped:
                    break
            if stopped:
                break
            finish_epoch()
        return None

    def run_fit() -> int | None:
        """Keras model.fit, one call per epoch on the same per-replica datasets as the custom loop."""
        nonlocal step, final_loss, accuracy, stopped, epoch
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        window = {"start": time.perf_counter(), "steps": 0}
        bad_loss: list[float] = []

        class Hooks(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                nonlocal step, final_loss, stopped
                step += 1
                window["steps"] += 1
                in_epoch = first_skip + batch + 1
                step_in_epoch_var.assign(in_epoch % steps_per_epoch)
                if in_epoch == steps_per_epoch:
                    epoch_var.assign(epoch + 1)
                local_stop = Stop.requested is not None or (
                    cfg.train.max_seconds > 0 and time.monotonic() - t_start > cfg.train.max_seconds)
                log_now = step % log_every == 0 or step == total_steps or in_epoch == steps_per_epoch
                if workers == 1 and local_stop:
                    stopped = Stop.requested or "max_seconds"
                elif workers > 1 and log_now and agree_stop(local_stop):
                    stopped = Stop.requested or ("max_seconds" if local_stop else "SIGTERM on another worker")
                if log_now or stopped:
                    # fit's "loss" is the running mean over the epoch so far.
                    final_loss = float((logs or {}).get("loss", float("nan")))
                    if not math.isfinite(final_loss):
                        bad_loss.append(final_loss)
                        self.model.stop_training = True
                        return
                    elapsed = time.perf_counter() - window["start"]
                    windows.append({"steps": window["steps"], "seconds": elapsed, "data_wait": None})
                    if writer:
                        with writer.as_default(step=step):
                            tf.summary.scalar("train/loss", final_loss)
                    say(f"step {step}/{total_steps}  epoch {epoch + 1}  loss {final_loss:.4f}  "
                        f"{window['steps'] * global_batch / max(elapsed, 1e-9):.0f} samples/s")
                    window["start"], window["steps"] = time.perf_counter(), 0
                if cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0 and not stopped:
                    save(f"every {cfg.checkpoint.every_steps} steps")
                if stopped:
                    self.model.stop_training = True

        epoch = start_epoch
        while epoch < epochs and step < total_steps:
            first_skip = skip if epoch == start_epoch else 0
            epoch_var.assign(epoch)
            n = min(steps_per_epoch - first_skip, total_steps - step)

            def dataset_fn(ctx, epoch=epoch, first_skip=first_skip):
                return pipe.train_epoch(epoch, global_batch, per_replica, ctx.input_pipeline_id,
                                        local_replicas, skip_steps=first_skip)

            dist = strategy.distribute_datasets_from_function(dataset_fn)
            window["start"], window["steps"] = time.perf_counter(), 0
            model.fit(dist, epochs=1, steps_per_epoch=n, verbose=0, callbacks=[Hooks()])
            if bad_loss:
                print(f"gpurig: error: the loss is {bad_loss[0]} at step {step} (lower optim.lr, or use "
                      "precision=fp32)", file=sys.stderr)
                return 1
            if stopped:
                break
            finish_epoch()
        return None

    epoch = start_epoch
    failed = run_fit() if cfg.tf.loop == "fit" else run_custom()
    if failed:
        return failed

    train_seconds = time.monotonic() - t_start
    if accuracy is None and eval_ds is not None and not stopped:
        accuracy = evaluate()  # a resumed run that had nothing left to train still reports its accuracy
        evals.append({"epoch": epoch, "step": step, "accuracy": accuracy})

    if stopped:
        save(f"stopped by {stopped}")
        say(f"stopped by {stopped} at step {step}; resume with the same command and --resume")
    elif manager:
        save("end of training")
    if writer:
        writer.flush()
    # Step time from the log windows; the first window holds tf.function tracing, so leave it out
    # when there are others ("the first iteration is an outlier").
    timed = windows[1:] if len(windows) > 1 else windows
    t_steps = sum(w["steps"] for w in timed)
    t_secs = sum(w["seconds"] for w in timed)
    waits_known = all(w["data_wait"] is not None for w in timed)  # model.fit does not expose it
    t_wait = sum(w["data_wait"] for w in timed) if waits_known else None
    mean_s = t_secs / t_steps if t_steps else None
    wait_s = t_wait / t_steps if (t_steps and t_wait is not None) else None
    peak = None
    if job["device"] == "gpu":
        try:
            peak = max(int(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"]) for i in range(local_replicas))
        except Exception:  # the allocator does not report it on every build: missing is a value
            peak = None
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; the process peak
    mine = [mean_s or 0.0, -1.0 if wait_s is None else wait_s, float(peak or 0), float(t_steps)]
    rows = gather_rows(mine) if workers > 1 else [mine]  # also a barrier: nobody leaves early
    per_rank = [{
        "rank": i,
        "replicas": local_replicas,
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
    rate = global_batch / mean_all if mean_all else None
    result = {
        "framework": "tf",
        "world_size": replicas,
        "workers": workers,
        "worker_index": worker_index,
        "device": job["device_label"],
        "device_name": job.get("device_name") or job["device_label"],
        "strategy": "multi_worker_mirrored" if workers > 1 else "mirrored",
        "model": cfg.model.name,
        "dataset": cfg.data.dataset,
        "params": int(model.count_params()),
        "unit": "samples",
        "samples_per_s": rate,
        "samples_per_s_per_device": rate / replicas if rate else None,
        "units_per_s": rate,
        "units_per_s_per_device": rate / replicas if rate else None,
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
        "peak_memory_bytes": max((r["peak_memory_bytes"] for r in per_rank if r["peak_memory_bytes"]), default=None),
        "memory_total_bytes": job.get("memory_total_bytes") if job["device"] == "gpu" else None,
        "batch_size_per_device": per_replica,
        "global_batch_size": global_batch,
        "grad_accum": 1,
        "steps": step,
        "total_steps": total_steps,
        "final_loss": final_loss,
        "accuracy": accuracy,
        "eval_samples": len(src.test) if (src.test is not None and evals) else None,
        "evals": evals,
        "seconds": train_seconds,
        "stopped": stopped is not None,
        "stop_reason": stopped,
        "resumed_from": resumed_from,
        "checkpoints": list(manager.checkpoints) if manager and chief else [],
        "precision": policy,
        "tensorflow_version": tf.__version__,
        "weights_sha256": weights_digest(),
    }
    if chief:
        _write_json(out / "tf_result.json", result)
    else:
        _write_json(out / f"worker-{worker_index}.json", result)
        shutil.rmtree(ckpt_dir, ignore_errors=True)  # scratch: only the chief's checkpoints are kept
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpurig.train.tf.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True, help="the job file the parent wrote (tf_job.json)")
    args = parser.parse_args(argv)
    Stop.install()
    job = json.loads(Path(args.job).read_text())
    from gpurig.errors import BadInput

    try:
        return train(job)
    except BadInput as exc:
        print(f"gpurig: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
