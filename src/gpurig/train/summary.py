"""`summary.json`: the one schema both trainers fill (PyTorch's worker, TensorFlow's runner) and the
verdicts, the terminal summary and the HTML report read.

Every field is a dataclass field with its meaning; a summary with a key the schema does not know,
or without one it requires, is refused when it is written (`check_summary`), so the two trainers
cannot drift apart unnoticed. `docs/train.md` lists the same fields (a test checks it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _f(doc: str, default: Any = None, required: bool = False) -> Any:
    return field(default=default, metadata={"doc": doc, "required": required})


def _fl(doc: str) -> Any:
    return field(default_factory=list, metadata={"doc": doc, "required": False})


@dataclass
class StepTime:
    """Where a step's time goes, averaged over the timed steps of every rank."""

    mean_s: float | None = _f("Mean optimizer-step wall time, seconds.", required=True)
    data_wait_fraction: float | None = _f("Share of the step spent waiting for the next batch.", required=True)
    compute_fraction: float | None = _f("Share spent computing (forward, backward, optimizer).", required=True)
    comm_exposed_fraction: float | None = _f("Share spent in gradient communication that compute did not hide "
                                             "(None where it cannot be separated, as in TensorFlow).", required=True)
    steps_timed: int | None = _f("Optimizer steps timed (warm-up steps are left out).", required=True)
    comm_method: str | None = _f("How exposed communication was measured (PyTorch).")
    method: str | None = _f("How the step time was measured (TensorFlow).")


@dataclass
class RankTiming:
    """One rank's (TensorFlow: one worker's) own timing and memory."""

    rank: int = _f("The rank (TensorFlow: the worker index).", required=True)
    step_time_s: float | None = _f("Its mean step time, seconds.", required=True)
    data_wait_s: float | None = _f("Its mean wait for data per step, seconds.", required=True)
    compute_s: float | None = _f("Its mean compute time per step, seconds.", required=True)
    comm_exposed_s: float | None = _f("Its mean exposed communication per step, seconds.", required=True)
    peak_memory_bytes: int | None = _f("Its peak device memory (the process RSS on the CPU).", required=True)
    steps_timed: int | None = _f("Steps it timed.", required=True)
    restart_count: int | None = _f("How many times torchrun restarted the workers before this run (PyTorch).")
    gpu_clock: dict[str, Any] | None = _f("Its GPU's SM clock, power and limit reasons over the timed steps "
                                          "(NVML; None on the CPU).")
    replicas: int | None = _f("Replicas in this worker (TensorFlow).")


@dataclass
class RunSummary:
    """One finished (or stopped) training run, as rank 0 writes it to <run_dir>/summary.json."""

    world_size: int = _f("Processes (PyTorch) or replicas (TensorFlow) that trained together.", required=True)
    device: str = _f("cuda or cpu.", required=True)
    device_name: str | None = _f("The GPU's name (or cpu).", required=True)
    strategy: str = _f("ddp, fsdp or single (PyTorch); mirrored or multi_worker_mirrored (TensorFlow).",
                       required=True)
    model: str = _f("model.name, or model.entry for your own model.", required=True)
    dataset: str = _f("data.dataset, or data.entry for your own data.", required=True)
    params: int | None = _f("Trainable parameters.", required=True)
    unit: str = _f("What a sample is counted in: samples, or tokens for token data.", required=True)
    samples_per_s: float | None = _f("Training throughput over all devices, samples per second.", required=True)
    samples_per_s_per_device: float | None = _f("samples_per_s / world_size.", required=True)
    units_per_s: float | None = _f("Throughput in `unit`s (tokens/s for token data).", required=True)
    units_per_s_per_device: float | None = _f("units_per_s / world_size.", required=True)
    step_time: StepTime = _f("Where the step's time goes.", required=True)
    per_rank: list[RankTiming] = _fl("Each rank's own timing and memory.")
    peak_memory_bytes: int | None = _f("The highest per_rank peak.", required=True)
    memory_total_bytes: int | None = _f("One device's memory (None on the CPU).", required=True)
    batch_size_per_device: int = _f("data.batch_size.", required=True)
    global_batch_size: int = _f("Samples per optimizer step over all devices.", required=True)
    grad_accum: int = _f("Micro-batches per optimizer step.", required=True)
    steps: int = _f("Optimizer steps done (including those before a resume).", required=True)
    total_steps: int = _f("Optimizer steps the run was to do.", required=True)
    final_loss: float | None = _f("The last training loss read.", required=True)
    accuracy: float | None = _f("Test accuracy of the last evaluation (None without one).", required=True)
    eval_samples: int | None = _f("Samples in the last evaluation, each counted once.", required=True)
    evals: list[dict[str, Any]] = _fl("Every evaluation: epoch, accuracy, loss.")
    seconds: float | None = _f("Training wall time of this run, seconds.", required=True)
    stopped: bool = _f("Whether the run was stopped (a signal or --max-time) before its last step.", False,
                       required=True)
    stop_reason: str | None = _f("What stopped it (SIGTERM, SIGINT, max_seconds).", required=True)
    resumed_from: str | None = _f("The checkpoint it resumed from.", required=True)
    checkpoints: list[str] = _fl("Checkpoints on disk at the end (rank 0's).")
    choices: list[dict[str, Any]] = _fl("Every decision of the run: name, value, reason.")
    verdicts: list[dict[str, Any]] = _fl("The bottleneck verdicts (gpurig.diagnose.verdicts), judged before this "
                                         "file is written; the first is the one-line verdict.")
    # PyTorch only
    model_flops_per_sample: float | None = _f("Model FLOPs per training sample (PyTorch; None where unknown).")
    mfu: float | None = _f("Model FLOPs utilisation against the GPU's dense 16-bit peak (PyTorch, CUDA).")
    gpu_clock: dict[str, Any] | None = _f("The slowest and fastest GPU of the run by SM clock, with power and "
                                          "limit shares (PyTorch, CUDA with NVML).")
    eval_loss: float | None = _f("Test loss of the last evaluation (PyTorch).")
    faults: dict[str, Any] | None = _f("Restarts and hangs the run survived (PyTorch).")
    # TensorFlow only
    framework: str | None = _f("tf for the TensorFlow trainer (absent for PyTorch).")
    workers: int | None = _f("Worker processes (TensorFlow; several under MultiWorkerMirroredStrategy).")
    worker_index: int | None = _f("This worker's index (TensorFlow).")
    precision: str | None = _f("The Keras mixed-precision policy (TensorFlow).")
    tensorflow_version: str | None = _f("TensorFlow's version (TensorFlow).")
    weights_sha256: str | None = _f("A digest of the final weights, equal on every worker (TensorFlow).")
    log: str | None = _f("The worker's log file (TensorFlow).")


def _check(cls: type, data: Any, where: str) -> list[str]:
    if not isinstance(data, dict):
        return [f"{where}: expected an object, got {type(data).__name__}"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems = [f"{where}.{k}: not a field of {cls.__name__}" for k in sorted(set(data) - set(fields))]
    problems += [f"{where}.{name}: missing" for name, f in fields.items()
                 if f.metadata.get("required") and name not in data]
    for name, nested in (("step_time", StepTime),):
        if cls is RunSummary and isinstance(data.get(name), dict):
            problems += _check(nested, data[name], f"{where}.{name}")
    if cls is RunSummary:
        for i, row in enumerate(data.get("per_rank") or []):
            problems += _check(RankTiming, row, f"{where}.per_rank[{i}]")
    return problems


# Keys the parent adds to the summary it returns and prints; they are not written to summary.json.
PARENT_KEYS = ("run_dir", "launch", "already_complete")


def summary_problems(summary: dict[str, Any]) -> list[str]:
    """What in `summary` the schema does not allow (unknown keys, missing required ones); [] if none."""
    return _check(RunSummary, {k: v for k, v in summary.items() if k not in PARENT_KEYS}, "summary")


def check_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` itself, or ValueError naming every key the schema does not allow."""
    problems = summary_problems(summary)
    if problems:
        raise ValueError("summary.json does not fit RunSummary: " + "; ".join(problems))
    return summary


def field_docs() -> list[tuple[str, str]]:
    """(dotted key, meaning) of every field, nested ones as step_time.x and per_rank[].x."""
    out: list[tuple[str, str]] = []
    for f in dataclasses.fields(RunSummary):
        out.append((f.name, f.metadata["doc"]))
    for prefix, cls in (("step_time.", StepTime), ("per_rank[].", RankTiming)):
        out += [(prefix + f.name, f.metadata["doc"]) for f in dataclasses.fields(cls)]
    return out


class Summary(dict):
    """A run's summary as `gpurig.fit()` returns it: the `RunSummary` dict, shown as a table in Jupyter."""

    ROWS = (("model", "model"), ("dataset", "data"), ("device_name", "device"), ("world_size", "processes"),
            ("strategy", "strategy"), ("samples_per_s", "samples/s"), ("samples_per_s_per_device", "per device"),
            ("mfu", "model FLOPs utilisation"), ("accuracy", "test accuracy"), ("final_loss", "final loss"),
            ("steps", "steps"), ("seconds", "seconds"), ("run_dir", "run directory"))

    def _repr_html_(self) -> str:
        import html

        def cell(key: str) -> str:
            v = self.get(key)
            if isinstance(v, float):
                v = f"{v:.1%}" if key in ("mfu", "accuracy") else f"{v:,.4g}" if key == "final_loss" else f"{v:,.1f}"
            return html.escape(str(v))

        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(label)}</th><td>{cell(key)}</td></tr>"
                       for key, label in self.ROWS if self.get(key) is not None)
        verdicts = "".join(f"<li><b>{html.escape(str(v.get('severity', '')))}</b> {html.escape(str(v.get('title', '')))}"
                           f"</li>" for v in self.get("verdicts") or [])
        choices = "".join(f"<tr><td>{html.escape(str(c.get('name')))}</td><td>{html.escape(str(c.get('value')))}</td>"
                          f"<td>{html.escape(str(c.get('reason', '')))}</td></tr>" for c in self.get("choices") or [])
        return (f"<table>{rows}</table>" + (f"<ul>{verdicts}</ul>" if verdicts else "")
                + (f"<details><summary>choices</summary><table>{choices}</table></details>" if choices else ""))
