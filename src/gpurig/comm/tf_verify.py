"""`gpurig verify --framework tf`: does MirroredStrategy really keep its replicas in sync?

Two checks, run in one TensorFlow child process (the parent never imports TensorFlow):

- `tf_replicas_identical`: after K steps of data-parallel training, every replica holds exactly
  the same variables (the all-reduce delivered the same sum everywhere);
- `tf_matches_single_device`: those variables equal K steps of the same model on one device with
  the whole global batch, within a tolerance (so the all-reduce summed the right gradients, and each
  replica trained on its own slice of the batch).

    from gpurig.comm.tf_verify import run_tf_verify
    result = run_tf_verify(device="cpu")        # two logical CPU devices
    assert result["passed"]

The child is `python -m gpurig.comm.tf_verify --job JOB.json`; it writes `tf_verify.json`.
`inject="desync"` perturbs one replica's weights before training, to see the check fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.comm.results import CheckResult, VerifyResult
from gpurig.errors import BadInput

INJECTIONS = ("none", "desync")
DEFAULT_STEPS = 10
# float32 on the CPU sums in a different order on 1 and N replicas: differences of a few ulps
# grow over K steps to ~1e-6 relative. GPUs use TF32 matmuls by default (10-bit mantissa), so
# the single-device run and the replicas differ more.
TOLERANCE = {"cpu": 1e-4, "gpu": 2e-2}


def plan_tf_verify(device: str = "auto", replicas: int | None = None, steps: int = DEFAULT_STEPS,
                   cross_device_ops: str = "auto", inject: str = "none", facts: Any = None) -> dict[str, Any]:
    """The verification job as plain data; BadInput for bad arguments. No TensorFlow import."""
    from gpurig.launch import tfjob as dec

    if steps < 1:
        raise BadInput(f"--steps must be at least 1, got {steps}")
    if inject not in INJECTIONS:
        raise BadInput(f"--inject must be one of {', '.join(INJECTIONS)}, got {inject!r}")
    kind, gpus, _ = dec.resolve_tf_device(device, facts)
    if kind == "gpu":
        n = replicas or len(gpus)
        if n > len(gpus):
            raise BadInput(f"--nproc {n} is more than the {len(gpus)} visible GPU(s); one replica per GPU")
    else:
        n = replicas or dec.CPU_REPLICAS
    if n < 2:
        raise BadInput(f"--nproc {n}: verifying replicas needs at least 2")
    broken = dec.p2p_broken_pairs(facts.pairs, [g["index"] for g in gpus[:n]]) if facts is not None else []
    cdo = dec.cross_device_ops(cross_device_ops, kind, n, broken)
    return {
        "device": kind,
        "device_label": "cuda" if kind == "gpu" else "cpu",
        "replicas": n,
        "steps": steps,
        "cross_device_ops": cdo.value,
        "inject": inject,
        "tolerance": TOLERANCE[kind],
        "choices": [dec.memory_growth(kind).to_dict(), cdo.to_dict(),
                    dec.Choice("replicas", n, f"MirroredStrategy over {n} {'GPUs' if kind == 'gpu' else 'logical CPU devices'}").to_dict()],
    }


def run_tf_verify(
    device: str = "auto",
    replicas: int | None = None,
    steps: int = DEFAULT_STEPS,
    out_dir: str | os.PathLike | None = None,
    timeout: float = 300.0,  # the whole TensorFlow process: import, strategy set-up, 2 x K steps
    cross_device_ops: str = "auto",
    inject: str = "none",
    facts: Any = None,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run both checks in a TensorFlow child process; return a result shaped like `VerifyResult.to_dict()`."""
    from gpurig.launch.plan import LaunchPlan
    from gpurig.launch.runner import raise_if_interrupted, run_plan
    from gpurig.launch.tfjob import tf_preflight

    tf_preflight(facts, device="cpu" if device == "cpu" else "auto")
    job = plan_tf_verify(device, replicas, steps, cross_device_ops, inject, facts)
    from gpurig.comm.verify import make_run_dir

    run_dir = make_run_dir(out_dir, "tf-verify")  # a fresh folder inside out_dir (default runs/)
    job["out_dir"] = str(run_dir.resolve())
    job_path = run_dir / "tf_verify_job.json"
    job_path.write_text(json.dumps(job, indent=2))
    result_path = run_dir / "tf_verify.json"
    result_path.unlink(missing_ok=True)
    env = {}
    src = str(Path(__file__).resolve().parents[2])
    pythonpath = os.environ.get("PYTHONPATH", "")
    if src not in pythonpath.split(os.pathsep):
        env["PYTHONPATH"] = src + (os.pathsep + pythonpath if pythonpath else "")
    if job["device"] == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    plan = LaunchPlan(argv=[sys.executable, "-m", "gpurig.comm.tf_verify", "--job", str(job_path)], env=env,
                      nproc=1, device=job["device_label"], run_dir=str(run_dir))
    run = run_plan(plan, timeout=timeout, echo=echo, log_name="tf-verify.log")
    raise_if_interrupted(run)
    checks: list[CheckResult] = []
    if result_path.is_file():
        data = json.loads(result_path.read_text())
        checks = [CheckResult(**c) for c in data["checks"]]
    else:
        data = {}
    if run.returncode != 0 or not checks:
        why = "did not finish in time" if run.timed_out else f"exited with status {run.returncode}"
        tail = [ln for ln in run.output_tail if ln.strip()][-6:]
        checks.append(CheckResult("workers", False, f"the TensorFlow process {why}"
                                  + (": " + " | ".join(tail) if tail else "") + f"; full log: {run.log_path}",
                                  run.seconds, "fail"))
    passed = all(c.status == "pass" for c in checks)
    return {
        "framework": "tf",
        "passed": passed,
        "device": job["device_label"],
        "nproc": job["replicas"],
        "backend": f"MirroredStrategy/{job['cross_device_ops']}",
        "seconds": round(run.seconds, 2),
        "checks": [c.to_dict() for c in checks],
        "transport": {},
        "hang": None,
        "findings": [],
        "run_dir": str(run_dir),
        "reason": "; ".join(f"{c['name']}: {c['reason']}" for c in job["choices"]),
        "choices": job["choices"],
        "tensorflow_version": data.get("tensorflow_version"),
    }


def as_verify_result(result: dict[str, Any]) -> VerifyResult:
    """The `run_tf_verify` dict as the `VerifyResult` that `gpurig verify` renders."""
    return VerifyResult(
        passed=result["passed"], device=result["device"], nproc=result["nproc"], backend=result["backend"],
        checks=[CheckResult(**c) for c in result["checks"]], transport=result.get("transport") or {},
        hang=result.get("hang"), run_dir=result.get("run_dir"), seconds=result.get("seconds", 0.0),
        reason=result.get("reason", ""), findings=result.get("findings") or [],
    )


# ----- child side ------------------------------------------------------------------------------


def _child(job: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from gpurig.launch.tfjob import configure_devices, make_strategy

    configure_devices(tf, dict(job, cluster={"source": "single"}))
    import keras

    n, steps = job["replicas"], job["steps"]
    strategy = make_strategy(tf, dict(job, cluster={"source": "single"}))
    per_replica, features, classes = 8, 32, 10
    global_batch = per_replica * n
    rng = np.random.RandomState(1234)
    x = rng.randn(steps, global_batch, features).astype(np.float32)
    y = rng.randint(0, classes, size=(steps, global_batch)).astype(np.int64)

    def build():
        return keras.Sequential([keras.Input((features,)), keras.layers.Dense(64, activation="relu"),
                                 keras.layers.Dense(64, activation="relu"), keras.layers.Dense(classes)])

    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model_m = build()
        opt_m = keras.optimizers.SGD(0.05, momentum=0.9)
        opt_m.build(model_m.trainable_variables)
    init = [v.numpy() for v in model_m.weights]
    first_device = strategy.extended.worker_devices[0]
    with tf.device(first_device):
        model_s = build()
        model_s.set_weights(init)
        opt_s = keras.optimizers.SGD(0.05, momentum=0.9)
        opt_s.build(model_s.trainable_variables)

    def replica_parts(v):
        return list(strategy.experimental_local_results(v.value))

    if job["inject"] == "desync":
        # One replica's copy of the first kernel drifts: the fault a broken all-reduce or a
        # rank that skipped a step would leave. The check must see it.
        part = replica_parts(model_m.trainable_variables[0])[-1]
        part.assign_add(tf.fill(part.shape, 1e-3))

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_obj(yb, model_m(xb, training=True)), global_batch_size=global_batch)
        grads = tape.gradient(loss, model_m.trainable_variables)
        opt_m.apply_gradients(zip(grads, model_m.trainable_variables, strict=True))
        return loss

    @tf.function
    def step_m(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=batch), axis=None)

    @tf.function
    def step_s(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_obj(yb, model_s(xb, training=True)))
        grads = tape.gradient(loss, model_s.trainable_variables)
        opt_s.apply_gradients(zip(grads, model_s.trainable_variables, strict=True))
        return loss

    def dataset_fn(ctx):
        # Replica r trains on rows [r*per_replica, (r+1)*per_replica) of each global batch: the
        # trainer's layout (elements go to the local replicas in turn).
        return tf.data.Dataset.from_tensor_slices((x.reshape(-1, per_replica, features),
                                                   y.reshape(-1, per_replica)))

    t0 = time.perf_counter()
    it = iter(strategy.distribute_datasets_from_function(dataset_fn))
    losses_m, losses_s = [], []
    for k in range(steps):
        losses_m.append(float(step_m(next(it))))
        with tf.device(first_device):
            losses_s.append(float(step_s(tf.constant(x[k]), tf.constant(y[k]))))
    seconds = time.perf_counter() - t0

    worst_spread, where_spread = 0.0, ""
    per_replica_worst = [0.0] * n
    worst_rel, where_rel = 0.0, ""
    for vm, vs in zip(model_m.weights, model_s.weights, strict=True):
        parts = [p.numpy() for p in replica_parts(vm)]
        for r, p in enumerate(parts[1:], start=1):
            d = float(np.max(np.abs(p - parts[0]))) if p.size else 0.0
            per_replica_worst[r] = max(per_replica_worst[r], d)
            if d > worst_spread:
                worst_spread, where_spread = d, f"{vm.path} (replica {r} vs 0)"
        ref = vs.numpy()
        scale = max(float(np.max(np.abs(ref))), 1e-12) if ref.size else 1.0
        rel = float(np.max(np.abs(parts[0] - ref))) / scale if ref.size else 0.0
        if rel > worst_rel:
            worst_rel, where_rel = rel, vm.path
    tol = job["tolerance"]
    identical = worst_spread == 0.0
    close = worst_rel <= tol
    per_rank = {"0": "reference"}
    per_rank.update({str(r): ("identical to replica 0" if per_replica_worst[r] == 0.0 else
                              f"max |difference| to replica 0: {per_replica_worst[r]:.3g}") for r in range(1, n)})
    checks = [
        CheckResult(
            "tf_replicas_identical", identical,
            (f"all {n} replicas hold identical variables after {steps} steps" if identical else
             f"replicas differ after {steps} steps: max |difference| {worst_spread:.3g} in {where_spread}"),
            seconds, "pass" if identical else "fail", per_rank).to_dict(),
        CheckResult(
            "tf_matches_single_device", close,
            (f"{n} replicas on slices of the batch agree with one device on the whole batch: max relative "
             f"difference {worst_rel:.2g} (tolerance {tol:g}); final loss {losses_m[-1]:.5f} vs {losses_s[-1]:.5f}")
            if close else
            (f"{n} replicas disagree with one device on the whole batch: max relative difference {worst_rel:.3g} "
             f"in {where_rel} (tolerance {tol:g}); final loss {losses_m[-1]:.5f} vs {losses_s[-1]:.5f}"),
            seconds, "pass" if close else "fail").to_dict(),
    ]
    return {"checks": checks, "tensorflow_version": tf.__version__, "losses_replicas": losses_m,
            "losses_single": losses_s, "max_replica_difference": worst_spread,
            "max_relative_difference_to_single": worst_rel}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpurig.comm.tf_verify", description="MirroredStrategy verification (child)")
    ap.add_argument("--job", required=True)
    args = ap.parse_args(argv)
    job = json.loads(Path(args.job).read_text())
    result = _child(job)
    out = Path(job["out_dir"]) / "tf_verify.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, out)
    for c in result["checks"]:
        print(f"{c['status']:4}  {c['name']}: {c['detail']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
