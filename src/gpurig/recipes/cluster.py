"""Cluster jobs for more than one machine: Slurm sbatch scripts and Kubeflow job manifests.

PyTorch: one torchrun agent per node, all meeting at a c10d rendezvous on the first node; torchrun
starts one worker per GPU and supervises them. TensorFlow: one process per node running
`MultiWorkerMirroredStrategy`, told its place in the cluster through `TF_CONFIG`. gpurig writes
the job; the scheduler and torchrun (or TensorFlow) do the distributed work.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from gpurig.errors import BadInput
from gpurig.recipes.base import DEFAULT_IMAGE, USER_UID, HostSummary, Recipe, gib_ceil, require_positive
from gpurig.recipes.container import PREFETCH_FACTOR, shm_bytes_needed

FRAMEWORKS = ("torch", "tf")
PYTORCHJOB_PORT = 23456  # the Kubeflow training operator's default port for the Master
TFJOB_PORT = 2222  # the Kubeflow training operator's default port for TFJob replicas
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")


@dataclass
class ClusterOptions:
    """A multi-node job: how many machines, how many GPUs each, and what each one runs."""

    nodes: int
    command: list[str]
    gpus_per_node: int | None = None  # None: as many as this host has; 0 (Slurm): CPU nodes, gloo
    framework: str = "torch"
    job_name: str = "gpurig-train"
    port: int = 29500  # Slurm: the c10d rendezvous port on the first node, or every TensorFlow worker's port
    cpus_per_node: int | None = None  # None: as many cores as this host has (when known)
    time: str | None = None  # Slurm time limit, "HH:MM:SS" or "D-HH:MM:SS"
    partition: str | None = None
    image: str = DEFAULT_IMAGE  # Kubernetes: the image every pod runs
    max_restarts: int = 0  # torchrun restarts of the worker group after a failure
    workers: int = 4  # DataLoader workers per process, to size /dev/shm on Kubernetes
    batch: int = 256
    sample_mb: float = 0.6
    procs_per_node: int | None = None  # Slurm, CPU nodes: workers per node (None: 2)
    min_nodes: int | None = None  # Kubernetes, PyTorch: an elastic job of min_nodes..nodes pods (None: fixed size)


@dataclass
class _Job:
    nodes: int
    gpus: int  # 0: CPU nodes (Slurm only)
    cpus: int | None
    reasons: list[str]
    procs: int = 0  # worker processes per node

    @property
    def devices(self) -> str:
        return f"{self.gpus} GPU(s)" if self.gpus else f"{self.procs} CPU process(es)"


CPU_PROCS = 2  # workers per CPU node by default, as `gpurig train --device cpu` runs


def _check(host: HostSummary, opts: ClusterOptions, cpu_nodes: bool = False) -> _Job:
    if opts.framework not in FRAMEWORKS:
        raise BadInput(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {opts.framework!r}")
    require_positive(opts.nodes, "--nodes")
    if not opts.command:
        raise BadInput("give the command each node runs after `--`, e.g. `-- train.py --epochs 10`")
    first = opts.command[0].rsplit("/", 1)[-1]
    if first in ("torchrun", "srun", "mpirun") or opts.command[:3] == ["python", "-m", "torch.distributed.run"]:
        raise BadInput(f"the command after `--` starts with {first!r}: give only what each worker runs "
                       "(the job already starts srun and torchrun)")
    if not _NAME.match(opts.job_name):
        raise BadInput(f"--job-name must be lower-case letters, digits and '-' (a Kubernetes name), got {opts.job_name!r}")
    if not 1024 <= opts.port <= 65535:
        raise BadInput(f"--port must be between 1024 and 65535, got {opts.port}")
    if opts.max_restarts < 0:
        raise BadInput(f"--max-restarts must be 0 or more, got {opts.max_restarts}")
    if opts.partition is not None and not re.fullmatch(r"[\w.,-]+", opts.partition):
        raise BadInput(f"--partition must be a partition name (letters, digits, '_', '-', '.', ','), got {opts.partition!r}")
    if opts.time is not None and not re.fullmatch(r"(\d+-)?\d{1,2}(:\d{2}){0,2}", opts.time):
        raise BadInput(f"--time must look like HH:MM:SS or D-HH:MM:SS, got {opts.time!r}")
    reasons: list[str] = []
    if opts.gpus_per_node is None:
        if not host.has_gpu:
            raise BadInput("--gpus-per-node is needed: this host has no GPU to count "
                           "(or pass --facts FILE from a cluster node)")
        gpus = host.gpu_count
        reasons.append(f"--gpus-per-node {gpus}: the number of GPUs on this host ({host.describe()})")
    elif cpu_nodes and opts.gpus_per_node == 0:
        gpus = 0
        reasons.append("--gpus-per-node 0: CPU nodes, the workers talk through gloo")
    else:
        gpus = require_positive(opts.gpus_per_node, "--gpus-per-node")
    if opts.procs_per_node is not None and gpus:
        raise BadInput("--procs-per-node is for CPU nodes (--gpus-per-node 0): with GPUs there is one worker per GPU")
    procs = gpus or require_positive(CPU_PROCS if opts.procs_per_node is None else opts.procs_per_node,
                                     "--procs-per-node")
    cpus = opts.cpus_per_node
    if cpus is not None:
        require_positive(cpus, "--cpus-per-node")
    elif host.cpu_count:
        cpus = host.cpu_count
        reasons.append(f"--cpus-per-task {cpus}: the cores of this host; pass --cpus-per-node if the nodes differ")
    return _Job(opts.nodes, gpus, cpus, reasons, procs)


def torchrun_entry(command: list[str]) -> tuple[list[str], str]:
    """What follows torchrun's own flags for a user command, and why.

    `train.py a b` -> `train.py a b`; `python -m pkg a` -> `-m pkg a`; any other program ->
    `--no-python prog ...`. (`gpurig launch/train` are handled by `agent_plan`: they start torchrun.)
    """
    first = command[0].rsplit("/", 1)[-1]
    if re.fullmatch(r"python(3(\.\d+)?)?", first):
        rest = [a for a in command[1:] if a != "-u"]  # torchrun runs Python unbuffered for us
        if len(rest) >= 2 and rest[0] == "-m":
            return ["-m", *rest[1:]], f"the module {rest[1]} runs in each worker (python -m)"
        if rest and rest[0].endswith(".py"):
            return rest, f"the script {rest[0]} runs in each worker"
        raise BadInput(f"the command after `--`: {shlex.join(command)!r} names no script or module for torchrun")
    if first.endswith(".py"):
        return list(command), f"the script {command[0]} runs in each worker"
    if first == "gpurig":
        raise BadInput("the command after `--` is `gpurig` alone: give `gpurig launch SCRIPT ...` or `gpurig train ...`")
    return ["--no-python", *command], f"{command[0]} is not a Python script: torchrun starts it as a program (--no-python)"


@dataclass
class _Agent:
    """What each node runs: a launcher, its flags (name, value, why) and the workers' entry."""

    launcher: list[str]  # ["torchrun"], ["gpurig", "launch"] or ["gpurig", "train"]
    flags: list[tuple[str, str, str]]
    entry: list[str]
    why: str


# gpurig subcommands that start torchrun themselves on one node; `launch` also takes multi-node flags.
GPURIG_SELF_LAUNCHING = ("train", "verify", "bench", "check")
_LAUNCH_OWNED = ("--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-endpoint", "--rdzv_endpoint",
                 "--rdzv-id", "--rdzv_id", "--node-rank", "--node_rank", "--max-restarts", "--max_restarts")


def _requeue_flags(opts: ClusterOptions, args: list[str], gpus: int, procs: int) -> list[tuple[str, str, str]]:
    """`gpurig train` flags that make a requeued or resubmitted job continue instead of starting over."""
    given = {a.split("=", 1)[0] for a in args}
    flags = []
    if "--out" not in given:
        flags.append(("--out", f"runs/{opts.job_name}",
                      "one run directory for every run of this job, on a file system the nodes share: "
                      "a requeued job finds its checkpoints there"))
    if "--resume" not in given:
        flags.append(("--resume", "auto", "continue from the newest checkpoint in --out when there is one "
                                          "(a requeue after preemption or scancel), else start fresh"))
    if not gpus and not given & {"--device", "--nproc-per-node", "--nproc_per_node", "--nproc"}:
        flags += [("--device", "cpu", "CPU nodes: gloo between the processes"),
                  ("--nproc-per-node", str(procs), f"{procs} worker processes on the node's CPUs")]
    return flags


def agent_plan(opts: ClusterOptions, nodes: int, gpus: int, endpoint: str, rdzv_id: str,
               procs: int | None = None) -> _Agent:
    """The per-node agent for a PyTorch job; `endpoint` and `rdzv_id` as the scheduler spells them.

    gpus 0: CPU nodes with `procs` gloo workers each (Slurm); otherwise one worker per GPU.
    """
    procs = procs or gpus
    nproc_why = "one worker process per GPU" if gpus else \
        f"{procs} gloo worker process{'es' if procs > 1 else ''} on the node's CPUs"
    restarts_why = "restarts of the whole worker group after a failure" + (
        " (resume from your last checkpoint)" if opts.max_restarts else " (none: fail fast)")
    command = opts.command
    if command[0].rsplit("/", 1)[-1] == "gpurig" and len(command) > 1:
        sub = command[1]
        if sub == "launch":
            given = [a.split("=", 1)[0] for a in command[2:] if a.split("=", 1)[0] in _LAUNCH_OWNED]
            if given:
                raise BadInput(f"the command after `--` sets {', '.join(given)}: leave it to the job, which sets "
                               "them for every node")
            flags = [
                ("--nnodes", str(nodes), f"every node waits until {nodes} node(s) have joined"),
                ("--nproc-per-node", str(procs), nproc_why),
                ("--rdzv-endpoint", endpoint, "the first node: gpurig launch hands torchrun a c10d rendezvous there"),
                ("--rdzv-id", rdzv_id, "a rendezvous name no other job shares"),
                ("--max-restarts", str(opts.max_restarts), restarts_why),
            ]
            return _Agent(["gpurig", "launch"], flags, command[2:],
                          "gpurig launch is torchrun with safe defaults and failure explanations: one per node")
        if sub in GPURIG_SELF_LAUNCHING:
            if nodes > 1:
                raise BadInput(f"`gpurig {sub}` starts its own single-node torchrun, so it cannot span {nodes} nodes: "
                               f"give the training script instead (`-- train.py ...`) or run it through "
                               f"`-- gpurig launch train.py ...`; `--nodes 1` runs `gpurig {sub}` as it is")
            flags = _requeue_flags(opts, command[2:], gpus, procs) if sub == "train" else []
            return _Agent(list(command[:2]), flags, command[2:],
                          f"gpurig {sub} starts one worker per GPU of the node itself" if gpus else
                          f"gpurig {sub} starts the node's CPU workers itself")
        raise BadInput(f"`gpurig {sub}` after `--` is not a training command: give `gpurig launch SCRIPT`, "
                       "`gpurig train`, or your script")
    entry, why = torchrun_entry(command)
    flags = [
        ("--nnodes", str(nodes), f"every agent waits until {nodes} agent(s) have joined"),
        ("--nproc-per-node", str(procs), nproc_why),
        ("--rdzv-backend", "c10d", "the agents meet through a store torchrun runs on the first node; no etcd needed"),
        ("--rdzv-endpoint", endpoint, "the first node (Slurm) or the Master pod (Kubernetes)"),
        ("--rdzv-id", rdzv_id, "a rendezvous name no other job shares"),
        ("--max-restarts", str(opts.max_restarts), restarts_why),
    ]
    return _Agent(["torchrun"], flags, entry, why)


def slurm_recipe(host: HostSummary, opts: ClusterOptions) -> Recipe:
    """An sbatch script: one task per node (the torchrun agent, or the TensorFlow worker)."""
    job = _check(host, opts, cpu_nodes=opts.framework == "torch")
    n, g, p = job.nodes, job.gpus, job.procs
    what = "one torchrun agent per node" if opts.framework == "torch" else "one TensorFlow worker per node"
    agent = agent_plan(opts, n, g, f'"$head_node:{opts.port}"', '"$SLURM_JOB_ID"', procs=p) \
        if opts.framework == "torch" else None
    s: list[str] = [
        "#!/bin/bash",
        f"# sbatch script: {n} node(s) x {job.devices}, {what}; made by `gpurig env slurm`.",
        "# Submit with: sbatch THIS_FILE",
        "# The name squeue shows.",
        f"#SBATCH --job-name={opts.job_name}",
        "# The number of machines.",
        f"#SBATCH --nodes={n}",
        "# One task per node: " + (("the torchrun agent, which starts one worker per GPU and watches them." if g else
                                   f"the torchrun agent, which starts {p} worker processes and watches them.")
                                  if opts.framework == "torch" else
                                  "MultiWorkerMirroredStrategy drives every GPU of its node from one process."),
        "#SBATCH --ntasks-per-node=1",
    ]
    if g:
        s += ["# Every GPU of each node goes to that task (older Slurm: --gres=gpu:N).", f"#SBATCH --gpus-per-node={g}"]
    if job.cpus:
        s += ["# The cores of each node, for the workers and their DataLoader processes.",
              f"#SBATCH --cpus-per-task={job.cpus}"]
    if opts.time:
        s += ["# Wall-clock limit: the scheduler ends the job after it.", f"#SBATCH --time={opts.time}"]
    if opts.partition:
        s += ["# The partition (queue) with the GPU nodes.", f"#SBATCH --partition={opts.partition}"]
    s += ["# One log file per job: %x is the job name, %j the job id.", "#SBATCH --output=%x-%j.out"]
    if agent is not None and agent.launcher == ["gpurig", "train"]:
        s += ["# A job stopped by preemption or a failed node goes back in the queue; gpurig train --resume auto",
              "# (below) then continues from the newest checkpoint, and the log is appended to, not replaced.",
              "#SBATCH --requeue", "#SBATCH --open-mode=append"]
    s += [
        "",
        "# Stop at the first failing command or unset variable, instead of training half-configured.",
        "# (No pipefail: `| head -n1` below closes the pipe early on purpose.)",
        "set -eu",
        "",
        "# Threads per process: the task's cores shared by the processes on the node, so they do not",
        "# fight over the CPU (torchrun would otherwise set 1).",
        f"cpus=${{SLURM_CPUS_PER_TASK:-{p}}}",
    ]
    # `gpurig train` and the like on one node start their own torchrun: no rendezvous between nodes.
    one_node_gpurig = agent is not None and agent.launcher[0] == "gpurig" and agent.launcher[1] in GPURIG_SELF_LAUNCHING
    if agent is not None:
        s.append(f"export OMP_NUM_THREADS=$(( cpus / {p} > 0 ? cpus / {p} : 1 ))")
        if not one_node_gpurig:
            s += [
                "# The first node of the allocation: it hosts the rendezvous the other nodes meet at.",
                'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
            ]
        flags = [(f"{name} {value}", why) for name, value, why in agent.flags]
        s += [
            "",
            "# srun starts one copy per node (--ntasks-per-node=1); --kill-on-bad-exit=1 ends every node",
            "# when one fails, instead of leaving the others waiting at the next collective.",
            f"# What runs: {agent.why}.",
        ]
        if flags:
            width = max(len(f) for f, _ in flags)
            s.append(f"# {' '.join(agent.launcher)} flags, and why:")
            s += [f"#   {f.ljust(width)}  {why}" for f, why in flags]
        s.append(f"srun --kill-on-bad-exit=1 {' '.join(agent.launcher)} \\")
        s += [f"  {f} \\" for f, _ in flags]
        s.append("  " + shlex.join(agent.entry) if agent.entry else "  # (no arguments)")
        reasons = job.reasons + [
            f"{n} node(s) x {job.devices}: world size {n * p}",
            *([] if one_node_gpurig else
              ["c10d rendezvous on the first node of the allocation (scontrol show hostnames | head -n1)"]),
            agent.why,
        ] + [f"{f}: {why}" for f, why in flags]
    else:
        s.append("export OMP_NUM_THREADS=$cpus")
        s += [
            "",
            f"# Every node's host:{opts.port}, in node order: the cluster in TF_CONFIG.",
            'workers=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | '
            f"awk '{{printf \"%s\\\"%s:{opts.port}\\\"\", (NR > 1 ? \",\" : \"\"), $1}}')",
            'export TF_WORKERS="[$workers]"',
            "# srun starts one worker per node; each builds its TF_CONFIG with its own index ($SLURM_PROCID,",
            "# which follows the node order above); --kill-on-bad-exit=1 ends every node when one fails.",
            "srun --kill-on-bad-exit=1 bash -c '"
            'export TF_CONFIG="{\\"cluster\\": {\\"worker\\": $TF_WORKERS}, '
            '\\"task\\": {\\"type\\": \\"worker\\", \\"index\\": $SLURM_PROCID}}"; '
            "exec \"$@\"' tf-worker " + shlex.join(opts.command),
        ]
        reasons = job.reasons + [
            f"{n} node(s) x {g} GPU(s): one MultiWorkerMirroredStrategy worker per node",
            f"TF_CONFIG per task: the worker list from the node list (port {opts.port}), the index from SLURM_PROCID",
        ]
    return Recipe(
        kind="slurm",
        text="\n".join(s) + "\n",
        reasons=reasons,
        facts_used=host.to_dict() | {"nodes": n, "gpus_per_node": g, "cpus_per_node": job.cpus},
    )


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar


def _k8s_check(opts: ClusterOptions, nodes: int) -> None:
    """What the training operator (v1) refuses beyond `_check`, and --min-nodes."""
    if not opts.job_name[0].isalpha():
        # The operator's admission webhook checks metadata.name as a DNS-1035 label: a letter first.
        raise BadInput(f"--job-name must start with a letter (the training operator's rule for job names), "
                       f"got {opts.job_name!r}")
    if opts.min_nodes is None:
        return
    if opts.framework != "torch":
        raise BadInput("--min-nodes makes an elastic PyTorchJob; a TFJob has no elastic policy: "
                       "leave --min-nodes out with --framework tf")
    if not 1 <= opts.min_nodes <= nodes:
        raise BadInput(f"--min-nodes must be between 1 and --nnodes ({nodes}), got {opts.min_nodes}")


def _elastic_agent(opts: ClusterOptions, nodes: int, gpus: int) -> _Agent:
    """The per-pod agent of an elastic PyTorchJob: `--nnodes MIN:MAX`, meeting where the operator says.

    With `spec.elasticPolicy` the operator sets PET_RDZV_ENDPOINT to the first Worker pod
    (`<job>-worker-0`) at its `pytorchjob-port`, and PET_NNODES to `MIN:MAX`; torchrun's flags say the same.
    """
    agent = agent_plan(opts, nodes, gpus, "$(PET_RDZV_ENDPOINT)", opts.job_name)
    if agent.launcher != ["torchrun"] and agent.launcher != ["gpurig", "launch"]:
        raise BadInput(f"--min-nodes: `{' '.join(agent.launcher)}` runs a fixed single-node job; give the "
                       "training script (`-- train.py ...`) or `-- gpurig launch train.py ...`")
    low = opts.min_nodes
    whys = {
        "--nnodes": (f"elastic: training starts once {low} pod(s) have joined (up to {nodes} join), and a restart "
                     f"carries on with the pods that remain while at least {low} do"),
        "--rdzv-endpoint": (f"{opts.job_name}-worker-0:{PYTORCHJOB_PORT}, the first Worker pod's pytorchjob-port: "
                            "the operator sets PET_RDZV_ENDPOINT to it for elastic jobs"),
    }
    flags = [(name, f"{low}:{nodes}" if name == "--nnodes" else value, whys.get(name, why))
             for name, value, why in agent.flags]
    return _Agent(agent.launcher, flags, agent.entry, agent.why)


def k8s_recipe(host: HostSummary, opts: ClusterOptions) -> Recipe:
    """A Kubeflow `PyTorchJob` (Master + Workers, torchrun in each pod) or `TFJob` manifest.

    With `opts.min_nodes` the PyTorchJob is elastic: `spec.elasticPolicy`, Workers only, `--nnodes MIN:MAX`.
    """
    job = _check(host, opts)
    n, g = job.nodes, job.gpus
    _k8s_check(opts, n)
    low = opts.min_nodes  # not None: an elastic PyTorchJob of low..n Worker pods
    agent = None
    if opts.framework == "torch":
        agent = (_elastic_agent(opts, n, g) if low is not None
                 else agent_plan(opts, n, g, "$(MASTER_ADDR):$(MASTER_PORT)", opts.job_name))
    shm_need = shm_bytes_needed(g, opts.workers, opts.batch, opts.sample_mb)
    shm_gib = gib_ceil(2 * shm_need)
    shm_why = (f"{g} process(es) x {opts.workers} workers x {PREFETCH_FACTOR} batches x {opts.batch} samples "
               f"x {opts.sample_mb:g} MB = {shm_need / 1e9:.2f} GB, doubled")
    if opts.framework == "torch":
        kind, specs, container, port_name, port = "PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port", PYTORCHJOB_PORT
    else:
        kind, specs, container, port_name, port = "TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-port", TFJOB_PORT

    pods = f"{low} to {n} pod(s)" if low is not None else f"{n} pod(s)"
    y: list[str] = [
        f"# Kubeflow {kind}: {pods} x {g} GPU(s); made by `gpurig env k8s`.",
        "# Needs the Kubeflow training operator and the NVIDIA device plugin; apply with: kubectl apply -f THIS_FILE",
        "apiVersion: kubeflow.org/v1  # the training operator's API group",
        f"kind: {kind}  # the operator creates the pods and " + (
            "sets TF_CONFIG in each" if kind == "TFJob" else
            "sets the PET_* rendezvous variables in each" if low is not None else
            "sets MASTER_ADDR/MASTER_PORT in each"),
        "metadata:",
        f"  name: {opts.job_name}",
        "spec:",
    ]
    if kind == "PyTorchJob":
        y.append(f"  nprocPerNode: \"{g}\"  # workers per pod, one per GPU (the operator passes it to torchrun)")
    if low is not None:
        y += [
            "  elasticPolicy:  # an elastic job: torchrun trains with whichever of the Worker pods have joined",
            "    rdzvBackend: c10d  # the pods meet at a store torchrun runs on the first Worker pod; no etcd needed",
            f"    minReplicas: {low}  # the fewest pods training starts or goes on with",
            f"    maxReplicas: {n}  # the most pods that take part (the Worker replicas below)",
            f"    maxRestarts: {opts.max_restarts}  # torchrun restarts of the worker group after a failure "
            "(a pod that leaves counts) before it gives up",
        ]
    y += [
        "  runPolicy:",
        "    cleanPodPolicy: Running  # remove pods still running once the job has finished or failed",
        f"    backoffLimit: {max(3, opts.max_restarts)}  # pod restarts before the job is marked failed",
        f"  {specs}:",
    ]

    def replica(role: str, count: int, why: str) -> list[str]:
        out = [
            f"    {role}:",
            f"      replicas: {count}  # {why}",
            "      restartPolicy: OnFailure  # a pod that fails is restarted; the job resumes from its checkpoint",
            "      template:",
            "        spec:",
            "          containers:",
            f"            - name: {container}  # the operator looks for this container name",
            f"              image: {_q(opts.image)}  # built from `gpurig env dockerfile`, pushed where the cluster pulls",
        ]
        if agent is not None:
            out.append(f"              command:  # {agent.why}")
            out += [f"                - {_q(a)}" for a in agent.launcher]
            out += [f"                - {_q(f'{name}={value}')}  # {why}" for name, value, why in agent.flags]
            out += [f"                - {_q(a)}" for a in agent.entry]
        else:
            out.append("              command:  # TF_CONFIG from the operator tells it its place in the cluster")
            out += [f"                - {_q(a)}" for a in opts.command]
        out += [
            "              ports:",
            f"                - name: {port_name}  # the operator's service for this replica points here",
            f"                  containerPort: {port}",
            "              resources:",
            "                limits:",
            f"                  nvidia.com/gpu: {g}  # whole GPUs from the NVIDIA device plugin",
            "              securityContext:",
            "                runAsNonRoot: true  # refuse to start as root",
            f"                runAsUser: {USER_UID}  # the image's non-root user (numeric, so Kubernetes can check it)",
            f"                runAsGroup: {USER_UID}",
            "                allowPrivilegeEscalation: false",
            "              volumeMounts:",
            "                - name: dshm",
            "                  mountPath: /dev/shm  # DataLoader workers and NCCL need more than the 64 MB default",
            "          volumes:",
            "            - name: dshm",
            "              emptyDir:",
            "                medium: Memory  # RAM-backed; counts against the pod's memory",
            f"                sizeLimit: {shm_gib}Gi  # {shm_why}",
        ]
        return out

    if low is not None:
        # Elastic jobs have Workers only: the operator puts the rendezvous on worker-0 and
        # counts the Workers between minReplicas and maxReplicas.
        y += replica("Worker", n, f"up to {n} pod(s), one per node; training needs at least {low}")
    elif kind == "PyTorchJob":
        y += replica("Master", 1, "the first node: hosts the rendezvous")
        if n > 1:
            y += replica("Worker", n - 1, f"the other {n - 1} node(s)")
    else:
        y += replica("Worker", n, f"{n} worker(s), one per node, each driving its {g} GPU(s)")
    # Cores matter to Slurm's --cpus-per-task; a pod's CPU is left to the cluster's defaults.
    reasons = [r for r in job.reasons if not r.startswith("--cpus-per-task")] + [
        f"{n} TensorFlow worker(s) x {g} GPU(s), MultiWorkerMirroredStrategy" if kind == "TFJob" else
        f"{n} pod(s) x {g} GPU(s): world size {n * g}" if low is None else
        f"elastic: {low} to {n} Worker pod(s) x {g} GPU(s): world size {low * g} to {n * g}, "
        "rendezvous on the first Worker pod",
        f"/dev/shm as a memory-backed emptyDir of {shm_gib} GiB: {shm_why}",
    ]
    warnings: list[str] = []
    if low is not None and opts.max_restarts == 0:
        warnings.append(f"--min-nodes with --max-restarts 0: when a pod fails or leaves, torchrun in the other pods "
                        f"does not restart the workers with the pods that remain, so they fail too and the job "
                        f"relies on Kubernetes restarting the pods (backoffLimit {max(3, opts.max_restarts)}); "
                        "give --max-restarts N so torchrun carries on at the new size")
    return Recipe(
        kind="k8s",
        text="\n".join(y) + "\n",
        reasons=reasons,
        facts_used=host.to_dict() | {"nodes": n, "gpus_per_node": g}
        | ({"min_nodes": low} if low is not None else {}),
        warnings=warnings,
    )
