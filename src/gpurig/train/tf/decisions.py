"""The GPU decisions of the TensorFlow trainer, as small pure functions of plain inputs.

Each function takes what the machine is (device kind, compute capabilities, GPU count, P2P facts,
environment variables) and returns a `Choice` that says what was picked and why. The worker applies
them; `gpurig train --framework tf` prints them, so a user on a GPU machine can check each one.
Nothing here imports TensorFlow, so these run and are tested anywhere.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from gpurig.errors import BadInput
from gpurig.launch.plan import check_nodes

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical", "reduce_to_one")
LOOPS = ("custom", "fit")
DEFAULT_WORKER_PORT = 12345  # TF_CONFIG port of worker 0 when the user names none
CPU_REPLICAS = 2  # logical CPU devices on a machine without a usable GPU (the two-process analogue)


@dataclass
class Choice:
    """One decision: `name` (what), `value` (the pick), `reason` (why, in the user's words)."""

    name: str
    value: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _capability(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def precision_policy(device: str, compute_capabilities: list[str | None], requested: str = "auto") -> Choice:
    """The Keras mixed-precision policy for this run.

    `auto`: `mixed_bfloat16` when every GPU is compute capability 8.0 or newer (Ampere, Hopper:
    bf16 Tensor Cores, no loss scaling needed), `mixed_float16` with loss scaling on 7.x (Volta,
    Turing: fp16 Tensor Cores only), `float32` below 7.0 and on the CPU. The slowest GPU decides,
    since every replica runs the same graph. The output layer stays float32 in every policy.

    >>> precision_policy("gpu", ["9.0", "9.0"]).value
    'mixed_bfloat16'
    """
    if requested not in PRECISIONS:
        raise BadInput(f"precision: must be one of {', '.join(PRECISIONS)}, got {requested!r}")
    if device == "cpu":
        if requested in ("bf16", "fp16"):
            raise BadInput(
                f"precision={requested}: mixed precision is for GPUs; on the CPU it is slower than float32 "
                "(use precision=auto or fp32)"
            )
        return Choice("precision", "float32", "CPU run: float32 (mixed precision only pays off on GPU Tensor Cores)")
    caps = [_capability(c) for c in compute_capabilities]
    known = [c for c in caps if c is not None]
    lowest = min(known) if known else None
    shown = f"{lowest[0]}.{lowest[1]}" if lowest else "unknown"
    if requested == "fp32":
        return Choice("precision", "float32", "asked for fp32")
    if requested == "bf16":
        if lowest is not None and lowest < (8, 0):
            raise BadInput(
                f"precision=bf16: needs compute capability 8.0 or newer, the slowest GPU here is {shown} "
                "(use precision=fp16 or auto)"
            )
        return Choice("precision", "mixed_bfloat16", "asked for bf16")
    if requested == "fp16":
        return Choice("precision", "mixed_float16", "asked for fp16; dynamic loss scaling on")
    if lowest is None:
        return Choice("precision", "float32", "compute capability unknown: float32 to be safe")
    if lowest >= (8, 0):
        return Choice(
            "precision", "mixed_bfloat16",
            f"compute capability {shown} >= 8.0: bf16 Tensor Cores, same range as float32, no loss scaling",
        )
    if lowest >= (7, 0):
        return Choice(
            "precision", "mixed_float16",
            f"compute capability {shown} (7.x): fp16 Tensor Cores; dynamic loss scaling keeps small gradients",
        )
    return Choice("precision", "float32", f"compute capability {shown} < 7.0: no Tensor Cores, float32")


def needs_loss_scaling(policy: str) -> bool:
    """float16 has a narrow exponent range: gradients underflow without loss scaling. bf16 does not."""
    return policy == "mixed_float16"


def memory_growth(device: str) -> Choice:
    """Memory growth is set on every GPU before TensorFlow touches one.

    Without it TensorFlow maps nearly all of each GPU's memory at start, which ends in
    `Could not create cudnn handle` or out-of-memory in any other process on the GPU; set after
    the first op, it fails with `Physical devices cannot be modified after being initialized`.
    """
    if device == "cpu":
        return Choice("memory_growth", None, "CPU run: no GPU memory to manage")
    return Choice(
        "memory_growth", True,
        "set on every GPU before first use: TensorFlow otherwise reserves nearly all GPU memory at start",
    )


def replicas(device: str, gpu_count: int, cpu_replicas: int = CPU_REPLICAS) -> Choice:
    """How many replicas MirroredStrategy keeps in this process: one per visible GPU, or logical CPUs."""
    if device == "cpu":
        return Choice(
            "replicas", cpu_replicas,
            f"no usable GPU: {cpu_replicas} logical CPU devices, so MirroredStrategy still all-reduces",
        )
    if gpu_count < 1:
        raise BadInput("device=cuda: TensorFlow sees no GPU (run `gpurig doctor` to see why)")
    return Choice("replicas", gpu_count, f"MirroredStrategy over all {gpu_count} visible GPU(s)")


def cross_device_ops(
    requested: str,
    device: str,
    replica_count: int,
    p2p_broken_pairs: list[tuple[int, int]] | None = None,
) -> Choice:
    """How MirroredStrategy all-reduces gradients between the GPUs of one machine.

    `nccl` (NcclAllReduce) is the fast path on GPUs. `hierarchical` (HierarchicalCopyAllReduce)
    copies through one GPU and is the known way round MirroredStrategy stalls on machines whose
    peer-to-peer path is broken (tensorflow issues 36510, 40027). `reduce_to_one`
    (ReductionToOneDevice) gathers on one device; it is the only choice on the CPU.
    """
    if requested not in CROSS_DEVICE_OPS:
        raise BadInput(f"tf.cross_device_ops: must be one of {', '.join(CROSS_DEVICE_OPS)}, got {requested!r}")
    if device == "cpu":
        if requested in ("nccl", "hierarchical"):
            raise BadInput(
                f"tf.cross_device_ops={requested}: needs GPUs; on the CPU only reduce_to_one works "
                "(or leave it at auto)"
            )
        return Choice("cross_device_ops", "reduce_to_one", "CPU replicas: NCCL needs GPUs, so reduce on one device")
    if requested != "auto":
        return Choice("cross_device_ops", requested, f"asked for {requested}")
    if replica_count < 2:
        return Choice("cross_device_ops", "none", "one replica: nothing to all-reduce")
    if p2p_broken_pairs:
        a, b = p2p_broken_pairs[0]
        return Choice(
            "cross_device_ops", "hierarchical",
            f"peer-to-peer is not supported between GPU {a} and GPU {b}: NCCL all-reduce stalls "
            "MirroredStrategy on such machines (tensorflow 36510); set tf.cross_device_ops=nccl to override",
        )
    return Choice("cross_device_ops", "nccl", f"{replica_count} GPUs: NCCL all-reduce")


def global_batch(batch_size_per_device: int, replicas_per_worker: int, workers: int) -> Choice:
    """Global batch = per-replica batch x replicas x workers (the TensorFlow tutorials' GLOBAL_BATCH_SIZE)."""
    if batch_size_per_device < 1:
        raise BadInput(f"batch_size: must be at least 1, got {batch_size_per_device}")
    total = batch_size_per_device * replicas_per_worker * workers
    parts = f"{batch_size_per_device} per replica x {replicas_per_worker} replicas"
    if workers > 1:
        parts += f" x {workers} workers"
    return Choice("global_batch", total, parts)


def check_dataset_fits(dataset_size: int, global_batch_size: int, dataset: str) -> None:
    """One step needs a full global batch; say the arithmetic when the data set is smaller."""
    if dataset_size < global_batch_size:
        raise BadInput(
            f"batch_size: the global batch {global_batch_size} is larger than the {dataset_size} "
            f"training examples of dataset {dataset!r}; lower batch_size"
        )


# ----- many machines: where TF_CONFIG comes from ---------------------------------------------------


@dataclass
class ClusterPlan:
    """Where this worker sits in a multi-worker job, and the TF_CONFIG it runs with (None: one worker)."""

    source: str  # "single", "flags", "TF_CONFIG", "slurm"
    workers: int
    worker_index: int
    tf_config: dict[str, Any] | None
    reason: str

    def choice(self) -> Choice:
        return Choice("cluster", {"source": self.source, "workers": self.workers, "index": self.worker_index}, self.reason)


def tf_config_for(hosts: list[str], index: int) -> dict[str, Any]:
    """The TF_CONFIG of worker `index` in a cluster of `hosts` ("host:port")."""
    return {"cluster": {"worker": list(hosts)}, "task": {"type": "worker", "index": index}}


def worker_hosts_from_flags(
    nnodes: int,
    node_rank: int,
    master_addr: str | None,
    master_port: int | None = None,
    worker_hosts: str | list[str] | None = None,
) -> list[str]:
    """The "host:port" of every worker, from `--nnodes/--node-rank/--master-addr` (+ `tf.worker_hosts`).

    TensorFlow's TF_CONFIG lists every worker, unlike torchrun, which needs only the master. On one
    host (master 127.0.0.1/localhost) the workers take consecutive ports from `master_port`; across
    hosts, `tf.worker_hosts=host0,host1,...` names them (ports default to `master_port`).
    """
    check_nodes(nnodes, node_rank)
    port = master_port or DEFAULT_WORKER_PORT
    if worker_hosts:
        items = worker_hosts.split(",") if isinstance(worker_hosts, str) else list(worker_hosts)
        items = [h.strip() for h in items if h.strip()]
        if len(items) != nnodes:
            raise BadInput(f"tf.worker_hosts: names {len(items)} host(s) but --nnodes is {nnodes}")
        hosts = [h if re.search(r":\d+$", h) else f"{h}:{port}" for h in items]
        return hosts
    if not master_addr:
        raise BadInput(f"--master-addr: needed with --nnodes {nnodes} (the address of worker 0)")
    if master_addr in ("127.0.0.1", "localhost", "::1"):
        return [f"{master_addr}:{port + i}" for i in range(nnodes)]
    raise BadInput(
        f"--nnodes {nnodes} with TensorFlow: TF_CONFIG lists every worker, so name them all: "
        f"--set tf.worker_hosts={master_addr},HOST1{',...' if nnodes > 2 else ''}"
    )


def cluster_plan(
    env: dict[str, str],
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    worker_hosts: str | list[str] | None = None,
) -> ClusterPlan:
    """Decide single worker or MultiWorkerMirroredStrategy, and from what.

    Order: explicit flags (`--nnodes` > 1) win; then a TF_CONFIG already in the environment
    (Kubernetes TFJob and most launchers write one); then a Slurm allocation with more than one task
    (TensorFlow's SlurmClusterResolver reads it in the worker); otherwise one worker.
    """
    if nnodes > 1:
        hosts = worker_hosts_from_flags(nnodes, node_rank, master_addr, master_port, worker_hosts)
        return ClusterPlan(
            "flags", nnodes, node_rank, tf_config_for(hosts, node_rank),
            f"--nnodes {nnodes}: MultiWorkerMirroredStrategy, TF_CONFIG written for worker {node_rank} of {hosts}",
        )
    raw = env.get("TF_CONFIG")
    if raw:
        conf = parse_tf_config(raw)
        workers = conf["cluster"].get("worker", [])
        chief = conf["cluster"].get("chief", [])
        total = len(workers) + len(chief)
        task = conf["task"]
        index = int(task.get("index", 0)) + (len(chief) if task.get("type") == "worker" else 0)
        if total > 1:
            return ClusterPlan(
                "TF_CONFIG", total, index, conf,
                f"TF_CONFIG from the environment: {total} workers, this is {task.get('type')} {task.get('index', 0)}",
            )
        return ClusterPlan("single", 1, 0, None, "TF_CONFIG names one worker: MirroredStrategy on this machine")
    ntasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS")
    if env.get("SLURM_JOB_ID") and ntasks and ntasks.isdigit() and int(ntasks) > 1:
        procid = env.get("SLURM_PROCID", "0")
        return ClusterPlan(
            "slurm", int(ntasks), int(procid) if procid.isdigit() else 0, None,
            f"Slurm job {env['SLURM_JOB_ID']} with {ntasks} tasks: MultiWorkerMirroredStrategy "
            "through TensorFlow's SlurmClusterResolver (one task per node)",
        )
    return ClusterPlan("single", 1, 0, None, "one machine: MirroredStrategy")


def parse_tf_config(raw: str) -> dict[str, Any]:
    """Read and check a TF_CONFIG string; bad input names the variable and what is wrong."""
    try:
        conf = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadInput(f"TF_CONFIG: not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(conf, dict) or not isinstance(conf.get("cluster"), dict):
        raise BadInput('TF_CONFIG: expected {"cluster": {"worker": [...]}, "task": {"type": ..., "index": ...}}')
    task = conf.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise BadInput('TF_CONFIG: "task" must name this process: {"type": "worker", "index": N}')
    members = conf["cluster"].get(task["type"])
    index = task.get("index", 0)
    if not isinstance(members, list) or not isinstance(index, int) or not 0 <= index < len(members):
        raise BadInput(f"TF_CONFIG: task {task['type']} {index} is not in cluster {conf['cluster']}")
    return conf


def p2p_broken_pairs(pairs: list[Any], visible: list[int] | None = None) -> list[tuple[int, int]]:
    """Pairs of GPUs (from `RigFacts.pairs`) whose peer-to-peer read the doctor found unsupported."""
    out = []
    for p in pairs:
        if getattr(p, "p2p_read", None) is False:
            if visible is None or (p.gpu_a in visible and p.gpu_b in visible):
                out.append((p.gpu_a, p.gpu_b))
    return out
