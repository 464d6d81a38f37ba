"""Training on several machines: one torchrun agent per node, all meeting at one c10d rendezvous.

Every node runs the same plan with its own `node_rank`; the run directory must be on a file
system all nodes share (rank 0 writes checkpoints there, every rank reads them on a restart).

    from gpurig.train.config import preset
    from gpurig.train.nodes import plan_node
    plan, description = plan_node(preset("demo"), "shared/runs/r1", nnodes=2, node_rank=0,
                                  endpoint="node0:29400", nproc_per_node=8, device="cuda")

`plan.argv` / `plan.full_env()` is what `gpurig launch` would run on that node. Workers always
start with `--resume auto`: when one node dies and is started again, its workers and those of
the nodes that stayed up (restarted by their agents, `max_restarts`) all continue from the
newest checkpoint.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from gpurig.errors import BadInput
from gpurig.launch.plan import LaunchOptions, LaunchPlan, resolve_device
from gpurig.train.config import TrainConfig, to_toml, validate
from gpurig.train.plan import TrainPlan, plan_file


def keep_global_batch(cfg: TrainConfig, nproc: int, min_nodes: int, max_nodes: int) -> tuple[TrainConfig, str]:
    """An elastic run (--nnodes MIN:MAX): the global batch fixed, so a node leaving changes how many
    micro-batches make a step, not the optimisation; the note says so. BadInput naming --nnodes when
    a node count in the range cannot hold that batch."""
    cfg = copy.deepcopy(cfg)
    per_node = cfg.data.batch_size * nproc
    g = cfg.data.global_batch_size or per_node * max_nodes * cfg.train.grad_accum
    bad = [n for n in range(min_nodes, max_nodes + 1) if g % (per_node * n)]
    if bad:
        raise BadInput(f"--nnodes {min_nodes}:{max_nodes}: the global batch {g} cannot be kept on {bad[0]} node(s) "
                       f"({cfg.data.batch_size} x {nproc} process(es) x {bad[0]} = {per_node * bad[0]} per micro-batch "
                       f"does not divide it); choose node counts that divide {max_nodes}, or set "
                       "data.global_batch_size to a multiple of every count's micro-batch")
    if not cfg.data.global_batch_size:
        cfg.train.grad_accum = 1  # the global batch now says it; validate() turns it back into micro-batches
    cfg.data.global_batch_size = g
    return cfg, (f"elastic: {min_nodes} to {max_nodes} nodes; global batch {g} kept (data.global_batch_size): with "
                 f"fewer nodes each step accumulates more micro-batches of {per_node} per node")


def fresh_store_per_round() -> dict[str, str]:
    """TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 unless the user chose: every rendezvous round publishes a
    fresh store on a new port, hosted by the round's rank 0 worker.

    With torchrun's shared store the agents of different nodes can count different attempt numbers
    after a restart (one restarts for a failure, the other for the membership change), and workers
    that keep their attempts apart by that number never meet: measured on two localhost nodes, 2 of
    4 restarts hung, against 10 of 10 passing with a fresh store. The trainer's workers wait for
    each other before exiting, which a worker-hosted store needs (rank 0 must not exit while the
    others still use its store); a user's script may not, which is why gpurig sets it for its own
    trainer only, not for the scripts `gpurig launch` runs.
    """
    if "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in os.environ:
        return {}
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def prepare_run_dir(config: TrainConfig, run_dir: str | os.PathLike, device: str, nproc_per_node: int,
                    nnodes: int, node_rank: int, endpoint: str, reason: str = "multi-node plan",
                    min_nodes: int | None = None) -> Path:
    """Write what every worker reads (`plan.json`, `config.toml`), as `run_training` does."""
    cfg = validate(config, nproc_per_node * nnodes)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    plan = TrainPlan(config=cfg, device=device, nproc_per_node=nproc_per_node, device_reason=reason, run_dir=str(run),
                     nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=endpoint, resume="auto", min_nodes=min_nodes)
    plan_file(run).write_text(plan.to_json())
    (run / "config.toml").write_text(to_toml(cfg))
    return run


def plan_node(
    config: TrainConfig,
    run_dir: str | os.PathLike,
    nnodes: int,
    node_rank: int,
    endpoint: str,
    nproc_per_node: int | str = "auto",
    device: str = "auto",
    max_restarts: int = 3,
    rdzv_id: str = "gpurig-train",
    log_dir: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
    iface: str | None = None,
    min_nodes: int | None = None,
) -> tuple[LaunchPlan, dict]:
    """The torchrun plan of one node of a multi-node training run (see the module docstring)."""
    from gpurig.launch.plan import plan_launch

    choice = resolve_device(device, nproc_per_node, flag="--nproc-per-node")
    elastic = min_nodes is not None and min_nodes < nnodes
    prepare_run_dir(config, run_dir, choice.device, choice.nproc, nnodes, node_rank, endpoint,
                    reason=f"{f'{min_nodes} to ' if elastic else ''}{nnodes} nodes x {choice.nproc} processes "
                           f"({choice.reason})", min_nodes=min_nodes if elastic else None)
    options = LaunchOptions(
        script="gpurig.train.torch.worker",
        module=True,
        script_args=["--run-dir", str(run_dir), "--resume", "auto", *(extra_args or [])],
        nproc_per_node=choice.nproc,
        device=choice.device,
        nnodes=f"{min_nodes}:{nnodes}" if elastic else nnodes,
        node_rank=node_rank,
        rdzv_endpoint=endpoint,
        rdzv_id=rdzv_id,
        max_restarts=max_restarts,
        run_dir=str(log_dir or Path(run_dir) / f"node{node_rank}"),
        use_slurm=False,
        env_overrides={**fresh_store_per_round(), **(env or {})},
        iface=iface,
    )
    plan, description = plan_launch(options, device_choice=choice)
    # node_rank names this node's log directory only (plan_launch gives it torchrun for static only).
    # The workers import gpurig from wherever this process did.
    src = str(Path(__file__).resolve().parents[2])
    parts = plan.env.get("PYTHONPATH", "").split(os.pathsep)
    if src not in parts:
        plan.env["PYTHONPATH"] = os.pathsep.join([p for p in parts if p] + [src])
    return plan, description
