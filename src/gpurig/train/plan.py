"""`TrainPlan`: what a run will be, decided once in the parent before anything starts, for either
framework.

`plan_training()` (PyTorch) and `train/tf/runner.py`'s `plan_tf()` (TensorFlow) validate
everything that can be judged without starting a process (the config against the world size, the
device and the number of processes, the nodes and their rendezvous, the data path, the run
directory and the checkpoint to resume from) and return the plan; nothing is written.
`gpurig train --show-plan` prints `plan.to_dict()` and exits; a run writes `plan.to_json()` into
the run directory as `plan.json` (`plan_file`), the one file its workers read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput, check_user_file
from gpurig.launch.plan import check_nodes, default_run_dir, resolve_device
from gpurig.train.config import TrainConfig, check_data_path, from_dict, validate
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch.dcp import list_sharded


@dataclass
class TrainPlan:
    """One run, decided: the validated config, where it runs and with how many processes, and why."""

    config: TrainConfig  # validated for the world size (global_batch_size resolved into grad_accum)
    device: str  # "cuda" or "cpu"
    nproc_per_node: int  # worker processes on this machine
    device_reason: str  # why this device and this many processes (resolve_device's words)
    run_dir: str  # the run directory (created when the run starts)
    nnodes: int = 1  # the most nodes (elastic runs: MAX of --nnodes MIN:MAX)
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # host:port of node 0 (several nodes only)
    min_nodes: int | None = None  # elastic runs: the fewest nodes training goes on with
    resume: str | None = None  # "auto", "none", a checkpoint file, or None for a fresh run
    config_sources: str | None = None  # where the config came from, in words
    framework: str = "torch"  # "torch" or "tf": which backend's worker reads this plan
    entries: dict[str, Any] | None = None  # your own model/data/loss: what the probe found (samples, shapes, classes)
    tf: dict[str, Any] | None = None  # TensorFlow only: the strategy's decisions (replicas, precision
    #   policy, cross-device ops, cluster and TF_CONFIG, global batch) and the choices with their reasons

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["world_size"] = self.world_size
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainPlan:
        """The plan a worker reads back from `plan.json`."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**fields, "config": from_dict(data["config"])})


def plan_file(run_dir: str | Path, worker_index: int = 0) -> Path:
    """Where a run keeps its plan: `plan.json`; TensorFlow workers after the first, which may share
    the run directory, write `plan.worker<i>.json`."""
    return Path(run_dir) / ("plan.json" if worker_index == 0 else f"plan.worker{worker_index}.json")


def plan_training(
    config: TrainConfig,
    device: str = "auto",
    nproc: str | int = "auto",
    out_dir: str | Path | None = None,
    resume: str | None = None,
    resume_fallback: bool = False,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    config_sources: str | None = None,
    min_nodes: int | None = None,
) -> TrainPlan:
    """Every check a PyTorch run gets before a process starts; BadInput (exit 2) naming the flag or
    key. Writes nothing. `min_nodes` < `nnodes`: an elastic run, its global batch kept."""
    if config.framework != "torch":
        raise BadInput(f"framework: {config.framework!r} runs through the TensorFlow trainer, not the PyTorch one")
    check_nodes(nnodes, node_rank)
    if nnodes > 1 and not rdzv_endpoint:
        raise BadInput("--master-addr: needed with --nnodes > 1 (the host of node 0, where the nodes meet)")
    if nnodes > 1:
        resume = resume or "auto"  # a node started again must continue, not refuse the run's checkpoints
    choice = resolve_device(device, nproc)
    check_data_path(config)
    if min_nodes is not None and min_nodes < nnodes:
        from gpurig.train.nodes import keep_global_batch

        config, _ = keep_global_batch(config, choice.nproc, min_nodes, nnodes)
    else:
        min_nodes = None
    cfg = validate(config, choice.nproc * nnodes)
    if cfg.optim.fused == "on" and cfg.train.strategy == "fsdp":  # needs torch: only then
        from gpurig.train.torch.choices import check_fused_for_fsdp

        check_fused_for_fsdp(cfg)
    found = None
    if cfg.model.entry or cfg.data.entry or cfg.train.loss_entry:
        from gpurig.train.entries import absolute_entries
        from gpurig.train.torch.entries import probe_entries

        may_compile = choice.device == "cuda" and cfg.train.compile == "auto" and bool(cfg.model.entry)
        # In a child with no GPU: every entry checked, one sample through the model.
        found = probe_entries(cfg, may_compile)  # the paths as typed, so its messages say them as typed
        cfg = absolute_entries(cfg)  # the workers, and a resumed run, find the same files from anywhere
    run_dir = Path(out_dir or cfg.out_dir or default_run_dir())
    if run_dir.exists() and not run_dir.is_dir():
        raise BadInput(f"--out {run_dir}: exists and is not a directory")
    if not resume and (ckpt.list_checkpoints(run_dir) or list_sharded(run_dir)):
        raise BadInput(f"--out {run_dir}: already holds checkpoints of a run; continue it with --resume auto "
                       "or choose another --out")
    if resume and resume not in ("auto", "none"):
        check_user_file(resume, f"--resume {resume}", "checkpoint file")
    _check_resume_archive(run_dir, resume, resume_fallback)
    return TrainPlan(config=cfg, device=choice.device, nproc_per_node=choice.nproc, device_reason=choice.reason,
                     run_dir=str(run_dir), nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                     resume=resume, config_sources=config_sources, entries=found, min_nodes=min_nodes)


def _check_resume_archive(run_dir: Path, resume: str | None, fallback: bool) -> None:
    """A checkpoint that is truncated or no PyTorch file at all is refused here, once, before any
    worker starts (the workers check the rest: weights-only contents, the model, the config)."""
    if not resume or resume == "none":
        return
    if resume != "auto":
        path = Path(resume)
    else:
        found = ckpt.list_checkpoints(run_dir)
        if not found or fallback:
            return  # nothing to check, or the workers fall back past a bad one themselves
        path = found[-1]
    why = ckpt.archive_problem(path)
    if why:
        hint = "; rerun with --resume-fallback to use the previous checkpoint" if resume == "auto" else ""
        raise BadInput(f"--resume: checkpoint {path} is corrupt or not a gpurig checkpoint: {why}{hint}")
