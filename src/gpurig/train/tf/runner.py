"""Parent side of `gpurig train --framework tf`: decide, write the plan, run the worker, read the summary.

The decisions (device, replicas, precision policy, memory growth, cross-device ops, cluster) are
made here from NVML facts and the config, with no TensorFlow import; the worker process
(`python -m gpurig.train.tf.worker`) applies them. One worker process per machine: it holds every
local GPU through MirroredStrategy; with several machines each runs one worker under TF_CONFIG.

    from gpurig.train.config import load_config
    summary = run_tf_training(load_config(overrides=["framework=tf"]), "runs/tf-demo")
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurig.diagnose.verdicts import judge_run
from gpurig.errors import BadInput, ProblemFound
from gpurig.launch import tfjob
from gpurig.launch.plan import LaunchPlan, parse_nproc
from gpurig.launch.runner import run_plan
from gpurig.launch.signals import sigterm_stops
from gpurig.train.config import from_dict
from gpurig.train.plan import TrainPlan, plan_file
from gpurig.train.tf import choices as dec

TF_FIXES = {
    "input-bound": "tf.data already maps in parallel and prefetches (AUTOTUNE): raise data.batch_size, keep file "
                   "datasets on local disk, lower data.image_size, or use a dataset held in memory",
}
SHUTDOWN_GRACE_S = 60.0
# TensorFlow's C++ start-up lines that TF_CPP_MIN_LOG_LEVEL does not silence (absl logging).
TF_NOISE = ("I0000 ", "W0000 ", "WARNING: All log messages before absl::InitializeLog()",
            "To enable the following instructions:")  # a SIGTERMed worker finishes its step and writes a checkpoint in this time


def plan_tf_job(
    cfg,
    out_dir: str | Path,
    device: str = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    worker_hosts: str | list[str] | None = None,
    resume: bool = False,
    facts=None,
    env: dict[str, str] | None = None,
    nproc: str | int = "auto",
) -> dict[str, Any]:
    """Every decision of the run, as a plain job dict (written to the run directory for the worker)."""
    from gpurig.train.config import check_data_path, check_framework, validate

    check_framework(cfg)
    kind, gpus, device_choice = tfjob.resolve_tf_device(device, facts)
    check_data_path(cfg)
    env = dict(os.environ if env is None else env)
    # `tf.worker_hosts` in the config, when the config has that key, stands in for the argument.
    worker_hosts = worker_hosts or getattr(cfg.tf, "worker_hosts", None) or None
    cluster = tfjob.cluster_plan(env, nnodes, node_rank, master_addr, master_port, worker_hosts)
    choices: list[tfjob.Choice] = [device_choice]
    if kind == "cpu" and cluster.workers > 1:
        # One CPU device per worker: TensorFlow's collectives then run between the worker processes.
        replicas = tfjob.Choice("replicas", 1, "multi-worker on the CPU: one replica per worker process")
    else:
        replicas = tfjob.replicas(kind, len(gpus))
    wanted = parse_nproc(nproc, "--nproc")
    if wanted is not None and not (kind == "cpu" and cluster.workers > 1):
        if kind == "gpu" and wanted > len(gpus):
            raise BadInput(f"--nproc {wanted} is more than the {len(gpus)} visible GPU(s); one replica per GPU")
        gpus = gpus[:wanted]
        where = f"the first {wanted} visible GPU(s)" if kind == "gpu" else f"{wanted} logical CPU device(s)"
        replicas = tfjob.Choice("replicas", wanted, f"--nproc {wanted}: MirroredStrategy over {where}")
    choices.append(replicas)
    choices.append(cluster.choice())
    choices.append(tfjob.memory_growth(kind))
    precision = dec.precision_policy(kind, [g["compute_capability"] for g in gpus], cfg.train.precision)
    choices.append(precision)
    choices.append(tfjob.Choice("loss_scaling", dec.needs_loss_scaling(precision.value),
                              "dynamic loss scaling (LossScaleOptimizer) for float16" if dec.needs_loss_scaling(
                                  precision.value) else "not needed: bf16 and float32 keep small gradients"))
    choices.append(tfjob.Choice("output_layer_dtype", "float32",
                              "logits and loss in float32 under every policy (float16 softmax over/underflows)"))
    broken = tfjob.p2p_broken_pairs(facts.pairs, [g["index"] for g in gpus]) if facts is not None else []
    if cluster.workers > 1:
        cdo = tfjob.Choice("cross_device_ops", "collective",
                         "MultiWorkerMirroredStrategy: TensorFlow collectives (NCCL on GPUs, ring on the CPU)")
    else:
        # TrainConfig's default is "nccl"; on the CPU that cannot work, so fall back rather than fail.
        requested = cfg.tf.cross_device_ops
        if kind == "cpu" and requested != "reduce_to_one":
            cdo = tfjob.Choice("cross_device_ops", "reduce_to_one",
                             f"tf.cross_device_ops={requested} needs GPUs: reduce on one device on the CPU")
        else:
            cdo = tfjob.cross_device_ops(requested, kind, replicas.value, broken)
            if cdo.value == "nccl":
                cdo.reason = f"tf.cross_device_ops=nccl (the default): NCCL all-reduce over {replicas.value} GPUs"
            if cdo.value == "nccl" and replicas.value < 2:
                cdo = tfjob.Choice("cross_device_ops", "none", "one replica: nothing to all-reduce")
            elif cdo.value == "nccl" and broken:
                a, b = broken[0]
                cdo.reason += (f"; the doctor found no P2P between GPU {a} and GPU {b}: if training stalls, "
                               "--set tf.cross_device_ops=hierarchical")
    choices.append(cdo)
    world = replicas.value * cluster.workers
    cfg = validate(cfg, world)
    gb = dec.global_batch(cfg.data.batch_size, replicas.value, cluster.workers)
    choices.append(gb)
    choices.append(tfjob.Choice("loop", cfg.tf.loop, "custom tf.function step under strategy.run" if cfg.tf.loop == "custom"
                              else "Keras model.fit under the strategy"))
    choices.append(tfjob.Choice("input_pipeline", "tf.data", "indices fixed by (seed, epoch), parallel map, "
                              "prefetch(AUTOTUNE); each replica gets its slice of every global batch"))
    mem = [g["memory_total_bytes"] for g in gpus if g.get("memory_total_bytes")]
    return {
        "config": cfg.to_dict(),
        "out_dir": str(Path(out_dir).resolve()),
        "device": kind,
        "device_label": "cuda" if kind == "gpu" else "cpu",
        "replicas": replicas.value,
        "precision": precision.value,
        "cross_device_ops": cdo.value,
        "cluster": {"source": cluster.source, "workers": cluster.workers, "index": cluster.worker_index},
        "tf_config": cluster.tf_config,
        "global_batch": gb.value,
        "resume": bool(resume),
        "memory_total_bytes": min(mem) if mem else None,  # per device, as the torch summary reports it
        "device_name": gpus[0].get("name") if gpus else "cpu",
        "choices": [c.to_dict() for c in choices],
    }


def plan_tf(
    config,
    out_dir: str | Path,
    device: str = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    worker_hosts: str | list[str] | None = None,
    resume: bool | str = False,
    facts=None,
    env: dict[str, str] | None = None,
    nproc: str | int = "auto",
    config_sources: str | None = None,
) -> TrainPlan:
    """Every check a TensorFlow run gets before its worker starts, and every decision, as the
    `TrainPlan` both frameworks share (`framework="tf"`, the strategy's decisions in `plan.tf`).
    BadInput (exit 2) naming the flag or key; writes nothing."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: exists and is not a directory")
    resume_path = None
    if isinstance(resume, str):
        if resume in ("auto", "none", ""):
            resume = resume == "auto"
        else:
            # A checkpoint is a prefix ("ckpt-440") of an .index and data files.
            if not Path(resume + ".index").is_file():
                raise BadInput(f"--resume {resume}: not a TensorFlow checkpoint (no {resume}.index)")
            resume_path, resume = str(Path(resume).resolve()), True
    if not resume and (out / "checkpoints" / "checkpoint").is_file():
        raise BadInput(f"--out {out}: already holds checkpoints of a run; continue it with --resume auto "
                       "or choose another --out")
    found = None
    if config.model.entry or config.data.entry:
        from gpurig.train.entries import absolute_entries
        from gpurig.train.tf.entries import probe_entries

        found = probe_entries(config)  # in a child with no GPU: the Keras model takes one sample of the data
        config = absolute_entries(config)  # the worker finds the same files from anywhere
    job = plan_tf_job(config, out_dir, device, nnodes, node_rank, master_addr, master_port, worker_hosts,
                      resume, facts, env, nproc=nproc)
    decided = {k: v for k, v in job.items() if k not in ("config", "out_dir")}
    decided["resume_path"] = resume_path
    cluster = job["cluster"]
    return TrainPlan(
        config=from_dict(job["config"]), device=job["device_label"], nproc_per_node=job["replicas"],
        device_reason=next(c["reason"] for c in job["choices"] if c["name"] == "device"), run_dir=job["out_dir"],
        nnodes=cluster["workers"], node_rank=cluster["index"],
        rdzv_endpoint=f"{master_addr}:{master_port}" if master_addr and master_port else master_addr,
        resume=resume_path or ("auto" if resume else None), config_sources=config_sources, framework="tf",
        entries=found, tf=decided)


def worker_job(plan: dict[str, Any]) -> dict[str, Any]:
    """What the TensorFlow worker works from: the plan's TensorFlow decisions, its config and run directory."""
    return {**plan["tf"], "config": plan["config"], "out_dir": plan["run_dir"]}


def worker_plan(job: dict[str, Any], job_path: Path) -> LaunchPlan:
    """argv + environment of the TensorFlow worker process."""
    env: dict[str, str] = {}
    src = str(Path(__file__).resolve().parents[3])
    pythonpath = os.environ.get("PYTHONPATH", "")
    if src not in pythonpath.split(os.pathsep):
        env["PYTHONPATH"] = src + (os.pathsep + pythonpath if pythonpath else "")
    if job["tf_config"] is not None:
        env["TF_CONFIG"] = json.dumps(job["tf_config"])
    if job["device"] == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run must not map GPU memory in a GPU build of TensorFlow
    argv = [sys.executable, "-m", "gpurig.train.tf.worker", "--plan", str(job_path)]
    return LaunchPlan(argv=argv, env=env, nproc=1, device=job["device_label"], run_dir=job["out_dir"],
                      notes=[c["name"] + ": " + str(c["value"]) for c in job["choices"]])


def adapt_verdicts(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shared bottleneck verdicts speak of DataLoaders; say what helps a tf.data pipeline instead.

    The verdicts are judged by `gpurig.diagnose.verdicts` before summary.json is written.
    """
    out = [dict(v) for v in verdicts]
    for v in out:
        if v.get("id") in TF_FIXES:
            v["fix"] = TF_FIXES[v["id"]]
            v["title"] = v["title"].split(";")[0]
    return out


def _worker_error(tail: list[str]) -> str:
    for line in reversed(tail):
        if line.startswith("gpurig: error:"):
            return line[len("gpurig: error:"):].strip()
    return ""


def run_tf_training(
    config,
    out_dir: str | Path,
    device: str = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    worker_hosts: str | list[str] | None = None,
    resume: bool | str = False,
    facts=None,
    echo: Callable[[str], None] | None = None,
    timeout: float | None = None,
    nproc: str | int = "auto",
    findings: list | None = None,
) -> dict[str, Any]:
    """Train `config` (a `TrainConfig` with framework tf) in a TensorFlow worker; return the summary.

    Writes `out_dir/summary.json` (worker 0), `tensorboard/`, `checkpoints/`, `tf-worker<i>.log`.
    `nproc`: "auto" (every visible GPU, or 2 logical CPU devices) or N replicas in this process.
    `resume`: False, True / "auto" (the newest checkpoint in out_dir/checkpoints) or a checkpoint
    prefix such as "runs/r1/checkpoints/ckpt-440".
    `echo` receives the choices, then the worker's lines (TensorFlow's start-up chatter left out;
    the log file keeps everything).
    Raises BadInput (exit 2) for a config or data problem found here or in the worker, and
    ProblemFound (exit 1) when training fails.
    """
    from gpurig.launch.tfjob import tf_preflight

    # TensorFlow missing, or blind to the GPUs the doctor sees: refuse before writing anything.
    tf_preflight(facts, device="cpu" if device == "cpu" else "auto", findings=findings)
    plan = plan_tf(config, out_dir, device, nnodes, node_rank, master_addr, master_port, worker_hosts, resume,
                   facts, nproc=nproc)
    job = worker_job(plan.to_dict())
    out = Path(plan.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = plan.node_rank
    job_path = plan_file(out, index)
    job_path.write_text(plan.to_json())
    if index == 0:
        from gpurig.train.config import to_toml

        (out / "config.toml").write_text(to_toml(config))
    result_path = out / ("tf_result.json" if index == 0 else f"worker-{index}.json")
    result_path.unlink(missing_ok=True)
    launch = worker_plan(job, job_path)
    if echo is not None:
        # Say every decision before the worker starts, so a user on a GPU machine can check each one.
        echo(f"gpurig train --framework tf: worker {index} of {job['cluster']['workers']}, run directory {out}")
        for c in job["choices"]:
            echo(f"  {c['name']} = {c['value']}  ({c['reason']})")
    def show(line: str) -> None:
        if echo is not None and not line.startswith(TF_NOISE):
            echo(line)

    with sigterm_stops():  # SIGTERM ends the worker as Ctrl-C does: SIGTERM to it, then a grace to checkpoint
        run = run_plan(launch, timeout=timeout, echo=show, log_name=f"tf-worker{index}.log", grace=SHUTDOWN_GRACE_S)
    if run.returncode == 2:
        raise BadInput(_worker_error(run.output_tail) or f"the TensorFlow worker rejected the run (see {run.log_path})")
    if not result_path.is_file() or run.returncode != 0:
        why = "timed out" if run.timed_out else "was interrupted" if run.interrupted else f"exited with {run.returncode}"
        err = _worker_error(run.output_tail)
        tail = "\n".join(run.output_tail[-15:])
        raise ProblemFound(f"TensorFlow training {why}{': ' + err if err else ''}; log {run.log_path}\n{tail}")
    result = json.loads(result_path.read_text())
    result["choices"] = job["choices"]
    result["verdicts"] = adapt_verdicts(judge_run(result))  # judged before summary.json is written
    result["run_dir"] = str(out)
    result["log"] = run.log_path
    # As the PyTorch summary says it: how the worker ended (a SIGTERMed run is "interrupted").
    result["launch"] = {"device": job["device_label"], "nproc": job["replicas"], "returncode": run.returncode,
                        "interrupted": run.interrupted, "signal": run.signal,
                        "reason": next(c["reason"] for c in job["choices"] if c["name"] == "device")}
    if index == 0:
        (out / "summary.json").write_text(json.dumps(result, indent=2, default=str))
    return result
