"""Starting TensorFlow's distribution strategy: the devices, the cluster, the strategy, and the
checks before any TensorFlow process starts.

Shared by `gpurig train --framework tf` and `gpurig verify --framework tf` (the process engine for
TensorFlow, as `launch/plan.py` is for torchrun). The decisions are small pure functions of plain
inputs, each returning a `Choice` (what was picked and why); `configure_devices` and
`make_strategy` run inside the worker and take the `tensorflow` module as an argument, so nothing
here imports TensorFlow.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

from gpurig.errors import BadInput
from gpurig.launch.plan import check_nodes
from gpurig.probe.facts import RigFacts
from gpurig.probe.visible import parse_visible_devices

CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical", "reduce_to_one")
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


# --- the GPUs, the devices and the strategy


def local_gpus(facts=None) -> list[dict[str, Any]]:
    """The GPUs a CUDA program started now would use: index, compute capability, memory (NVML, no CUDA)."""
    from gpurig.probe.nvml import basic_gpus

    gpus = facts.gpus if facts is not None else basic_gpus()
    rows = [{"index": g.index, "uuid": g.uuid, "name": g.name, "compute_capability": g.compute_capability,
             "memory_total_bytes": int(g.memory_total_mib * 2**20) if g.memory_total_mib else None}
            for g in gpus]
    vis = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), len(rows), [r["uuid"] for r in rows])
    return [rows[i] for i in vis.visible]


def resolve_tf_device(device: str, facts: Any = None) -> tuple[str, list[dict[str, Any]], Choice]:
    """The one device decision of every TensorFlow job: ("gpu" or "cpu", the visible GPUs, the
    Choice with its reason). --device cuda with no visible GPU is BadInput, as for PyTorch."""
    if device not in ("auto", "cuda", "cpu"):
        raise BadInput(f"--device must be one of auto, cuda, cpu, got {device!r}")
    gpus = local_gpus(facts) if device != "cpu" else []
    if device == "cuda" and not gpus:
        raise BadInput("--device cuda: no GPU is visible (run `gpurig doctor` to see why)")
    if gpus:
        return "gpu", gpus, Choice("device", "cuda", f"{len(gpus)} visible GPU(s) (NVML)")
    if device == "cpu":
        return "cpu", [], Choice("device", "cpu", "asked for the CPU")
    return "cpu", [], Choice("device", "cpu", "no visible GPU: TensorFlow on the CPU")


def configure_devices(tf, job: dict[str, Any]) -> None:
    """Memory growth and logical CPU devices: must run before anything touches a device.

    Set later, TensorFlow refuses with `Physical devices cannot be modified after being initialized`.
    """
    gpus = tf.config.list_physical_devices("GPU")  # lists only; does not initialise the GPUs
    if job["device"] == "gpu":
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if len(gpus) < job["replicas"]:
            print(
                f"gpurig: error: TensorFlow sees {len(gpus)} GPU(s), the machine shows {job['replicas']} "
                "(run `gpurig doctor`: a CPU-only TensorFlow build, or CUDA/cuDNN libraries it cannot load)",
                file=sys.stderr,
            )
            sys.exit(2)
    else:
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(job["replicas"])]
        )


def make_strategy(tf, job: dict[str, Any]):
    """MirroredStrategy on this machine's devices, or MultiWorkerMirroredStrategy under a cluster."""
    source = job["cluster"]["source"]
    if source in ("flags", "TF_CONFIG", "slurm"):
        comm = tf.distribute.experimental.CommunicationImplementation
        impl = comm.NCCL if job["device"] == "gpu" else comm.RING
        options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
        resolver = None
        if source == "slurm":
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver()
        if job["device"] == "cpu":
            # One CPU device per worker: MultiWorkerMirroredStrategy keeps one replica per worker here.
            pass
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    if job["device"] == "gpu":
        devices = [f"/gpu:{i}" for i in range(job["replicas"])]
    else:
        devices = [f"/cpu:{i}" for i in range(job["replicas"])]
    ops = {
        "nccl": lambda: tf.distribute.NcclAllReduce(),
        "hierarchical": lambda: tf.distribute.HierarchicalCopyAllReduce(),
        "reduce_to_one": lambda: tf.distribute.ReductionToOneDevice(),
        "none": lambda: None,
    }[job["cross_device_ops"]]()
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops)


# --- before any TensorFlow process starts

INSTALL_CPU = "pip install 'gpurig[tf]'"
INSTALL_GPU = "pip install 'tensorflow[and-cuda]'"


def _doctor_causes(findings: list | None) -> list[str]:
    """The doctor's error/warn findings about TensorFlow, the driver or GPU visibility, worst first.

    The caller (the command layer) judges the facts and passes the findings in: this module sits
    below `gpurig.diagnose` and does not import it.
    """
    order = {"error": 0, "warn": 1}
    causes = []
    for f in sorted(findings or [], key=lambda f: order.get(f.severity, 2)):
        if f.severity not in ("error", "warn") or f.id.startswith("torch-"):
            continue
        text = f"{f.id} {f.title} {f.area}".lower()
        if any(k in text for k in ("tensorflow", "tf-", "driver", "visible", "cuda", "cudnn", "container")):
            causes.append(f"{f.title}" + (f" (fix: {f.fix})" if f.fix else ""))
    return causes


def tf_preflight(facts: RigFacts | None, device: str = "auto", findings: list | None = None) -> None:
    """Raise `BadInput` when TensorFlow is missing or cannot see the GPUs NVML shows; else return.

    `device` is the run's `--device`: with "cpu" only the installation matters. `findings` are the
    doctor's findings on `facts` (`gpurig.diagnose.rules.judge`), quoted as the likely cause.
    """
    tf_facts = facts.frameworks.tensorflow if facts is not None else None
    probed = facts is not None and facts.frameworks.probed
    installed = tf_facts.installed if probed and tf_facts else importlib.util.find_spec("tensorflow") is not None
    if not installed:
        detail = f" ({tf_facts.error})" if tf_facts and tf_facts.error else ""
        raise BadInput(
            f"--framework tf: TensorFlow is not installed{detail}. Install it with {INSTALL_CPU} "
            f"(CPU), or {INSTALL_GPU} on a GPU machine"
        )
    if facts is None or device == "cpu":
        return
    gpus_seen = len(facts.gpus)
    if gpus_seen == 0:
        if device == "cuda":
            raise BadInput("--device cuda: no GPU is visible (run `gpurig doctor` to see why)")
        return
    if not probed or tf_facts is None:
        return  # the worker checks again once TensorFlow is imported, and says the same
    tf_gpus = len(tf_facts.gpus or [])
    if tf_gpus >= gpus_seen:
        return
    if tf_facts.error:
        cause = f"TensorFlow failed in the probe: {tf_facts.error}"
    elif tf_facts.built_with_cuda is False:
        cause = (f"TensorFlow {tf_facts.version or ''} is a CPU-only build (tensorflow-cpu, or a wheel without "
                 f"CUDA); install {INSTALL_GPU}").replace("  ", " ")
    else:
        causes = _doctor_causes(findings)
        cause = ("the doctor says: " + "; ".join(causes[:3])) if causes else (
            f"TensorFlow {tf_facts.version or ''} could not load its CUDA/cuDNN libraries or the driver is too old "
            f"for them; run `gpurig doctor` and check {INSTALL_GPU}"
        ).replace("  ", " ")
    raise BadInput(
        f"--framework tf: TensorFlow sees {tf_gpus} GPU(s) but the machine shows {gpus_seen}: {cause}. "
        "Use --device cpu to train on the CPU instead"
    )
