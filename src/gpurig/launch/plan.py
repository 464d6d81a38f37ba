"""A `LaunchPlan`: the exact argv and environment for `torch.distributed.run`, built without side effects.

Every multi-process job in gpurig (verify, bench, train, the user's own script) is started from a
plan: `resolve_device()` picks CUDA+NCCL or CPU+gloo, `plan_torchrun()` builds the argv with a free
rendezvous port, and `run_plan()` (in `launch.runner`) executes it. The plan can be printed
(`--dry-run`), saved and tested with no process started.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from dataclasses import dataclass, field

from gpurig.errors import BadInput
from gpurig.launch.nodes import Nodes, check_nodes, interface_env, node_range  # noqa: F401 (check_nodes: for the commands)
from gpurig.probe.visible import torch_cuda_build, torch_installed, visible_gpu_count

DEVICES = ("auto", "cuda", "cpu")
CPU_DEFAULT_NPROC = 2

# What one CPU (gloo) worker costs in memory, measured: `gpurig verify --device cpu` on a 2-core,
# 24 GB machine (torch 2.14 CPU build), the PSS and USS of every process of the run sampled every
# 0.2 s. With 2, 4, 8 and 16 workers each worker peaked at 430-505 MiB PSS (380-480 MiB of it its
# own), the torchrun agent at 375-510 MiB, and the memory available to the machine fell by 8.4 GiB
# for 16 workers. Hence 512 MiB a worker and 512 MiB for the agent (16 workers: 8.5 GiB). A worker
# of `train` or `bench` holds a model and data on top, so this is a floor every command shares:
# more workers than fit at verify's size fit for nothing, and the kernel kills one for memory
# minutes in (64 workers on that machine: killed after 190 s).
CPU_WORKER_BYTES = 512 * 2**20
CPU_LAUNCHER_BYTES = 512 * 2**20
# Processes per core. gloo ranks wait for each other in blocking socket reads rather than spinning,
# so a few per core only share the core: the same verify took 12 s with 2 workers on the 2 cores,
# 28 s with 4 and 45 s with 8 (4 per core), but 141 s with 16 (8 per core), where every collective
# waits for ranks that are off the cores and the --timeout of a collective comes within reach.
# Memory, unlike cores, cannot be overcommitted at all: its rule has no slack beyond the figures.
CPU_PROCS_PER_CORE = 4


@dataclass
class DeviceChoice:
    """Where the workers run: `device` is "cuda" or "cpu"; `backend` follows from it."""

    device: str
    nproc: int
    reason: str

    @property
    def backend(self) -> str:
        # The process-group backend follows from the device, never a hard-coded string.
        return "nccl" if self.device == "cuda" else "gloo"


@dataclass
class LaunchPlan:
    """argv + environment for one `torch.distributed.run` invocation."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # variables set or changed on top of os.environ
    nproc: int = 1
    device: str = "cpu"
    run_dir: str | None = None
    notes: list[str] = field(default_factory=list)  # why each default was chosen, for --dry-run

    @property
    def network(self) -> str | None:
        """Across machines: the note on the network interface chosen, if any."""
        return next((n for n in self.notes if n.startswith("network interface")), None)

    def command_line(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)

    def full_env(self) -> dict[str, str]:
        merged = dict(os.environ)
        merged.update(self.env)
        return merged



def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it), so no 'Address already in use'."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def parse_nproc(value: str | int, flag: str = "--nproc") -> int | None:
    """"auto" -> None; a positive integer -> itself; anything else is bad input naming the flag."""
    if isinstance(value, int):
        n = value
    elif str(value).strip().lower() == "auto":
        return None
    else:
        try:
            n = int(str(value).strip())
        except ValueError:
            raise BadInput(f"{flag} must be 'auto', 'gpu', 'cpu' or a positive integer, got {value!r}") from None
    if n < 1:
        raise BadInput(f"{flag} must be at least 1, got {n}")
    return n


def cpu_budget() -> tuple[int | None, int | None]:
    """(CPU cores this process may use, bytes of memory available for new processes); None when unknown.

    Cores: the affinity mask capped by the cgroup CPU quota. Memory: the kernel's MemAvailable,
    capped by the cgroup memory limit (a container's --memory: /proc/meminfo shows the host's)."""
    from gpurig.probe.system import read_cgroup_limits, usable_cpus

    cores = usable_cpus(cpu_count=os.cpu_count())
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    _quota, limit = read_cgroup_limits()
    if limit is not None:
        available = min(available, limit) if available is not None else limit
    return cores, available


def check_cpu_processes(n: int, flag: str = "--nproc", asked: str | int = "auto") -> None:
    """Refuse, before anything starts, more CPU worker processes than the machine holds: more than
    CPU_PROCS_PER_CORE per core, or more than its available memory at CPU_WORKER_BYTES each."""
    cores, available = cpu_budget()
    gib = 2**30
    problems: list[str] = []
    fits: list[int] = []
    machine: list[str] = []
    if cores:
        machine.append(f"{cores} CPU core{'s' if cores != 1 else ''}")
        fits.append(CPU_PROCS_PER_CORE * cores)
        if n > CPU_PROCS_PER_CORE * cores:
            problems.append(f"{n} processes are more than {CPU_PROCS_PER_CORE} per core")
    if available is not None:
        machine.append(f"{available / gib:.1f} GiB of memory available")
        fits.append(max(0, (available - CPU_LAUNCHER_BYTES) // CPU_WORKER_BYTES))
        need = n * CPU_WORKER_BYTES + CPU_LAUNCHER_BYTES
        if need > available:
            problems.append(f"{n} processes need about {need / gib:.1f} GiB of memory "
                            f"({CPU_WORKER_BYTES / gib:.1f} GiB each, {CPU_LAUNCHER_BYTES / gib:.1f} GiB for the launcher)")
    if not problems:
        return
    what = f"{flag} {n}" if str(asked).strip().lower() != "auto" else f"{flag} auto ({n} CPU processes)"
    fit = min(fits)
    advice = (f"use {flag} {fit} or fewer" if fit >= 1
              else "not even one CPU process fits: free some memory, or run where more is available")
    raise BadInput(f"{what}: too many CPU processes for this machine ({', '.join(machine)}): "
                   + "; ".join(problems) + f"; {advice}")


def resolve_device(device: str = "auto", nproc: str | int = "auto", flag: str = "--nproc") -> DeviceChoice:
    """Decide CUDA or CPU and the number of processes, from NVML and torch's files alone."""
    if device not in DEVICES:
        raise BadInput(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    kind = str(nproc).strip().lower()
    if kind == "gpu":  # torchrun's `--nproc-per-node gpu`: one process per visible GPU
        if device == "cpu":
            raise BadInput(f"{flag} gpu asks for one process per GPU, but --device is cpu")
        if not visible_gpu_count():
            raise BadInput(f"{flag} gpu: no GPU is visible (run `gpurig doctor` to see why)")
        device, nproc = "cuda", "auto"
    elif kind == "cpu":  # torchrun's `--nproc-per-node cpu`: one process per usable core
        if device == "cuda":
            raise BadInput(f"{flag} cpu asks for CPU processes, but --device is cuda")
        cores, _ = cpu_budget()
        device, nproc = "cpu", cores or os.cpu_count() or CPU_DEFAULT_NPROC
    wanted = parse_nproc(nproc, flag)
    gpus = visible_gpu_count()
    cuda_build = torch_cuda_build()
    if device == "auto":
        if gpus and cuda_build:
            device = "cuda"
            reason = f"{gpus} visible GPU(s) and torch built for CUDA {cuda_build}"
        else:
            device = "cpu"
            why = "no visible GPU" if not gpus else "torch is a CPU-only build"
            reason = f"{why}: running on the CPU with gloo"
    elif device == "cuda":
        if not gpus:
            raise BadInput("--device cuda: no GPU is visible (run `gpurig doctor` to see why)")
        if not torch_installed():
            raise BadInput("--device cuda: PyTorch is not installed (pip install 'gpurig[torch]')")
        if not cuda_build:
            raise BadInput("--device cuda: the installed torch is a CPU-only build (run `gpurig env pip`)")
        reason = f"asked for CUDA; {gpus} visible GPU(s)"
    else:
        reason = "asked for the CPU: gloo processes"
    if device == "cuda":
        n = wanted or gpus
        if n > gpus:
            raise BadInput(f"{flag} {n} is more than the {gpus} visible GPU(s); one process per GPU")
    else:
        n = wanted or CPU_DEFAULT_NPROC
        check_cpu_processes(n, flag, nproc)
    return DeviceChoice(device=device, nproc=n, reason=reason)


def plan_torchrun(
    entry: list[str],
    nproc: int,
    device: str,
    run_dir: str | None = None,
    env: dict[str, str] | None = None,
    max_restarts: int = 0,
    port: int | None = None,
    python: str | None = None,
    nodes: Nodes | None = None,
    rdzv_id: str = "gpurig",
) -> LaunchPlan:
    """Plan a torchrun: `entry` is `["-m", "module", args...]` or `["script.py", args...]`.

    One node: the rendezvous is c10d on 127.0.0.1 with a port the OS just handed out. With `nodes`
    (nnodes > 1): c10d at the master's address, `rdzv_id` shared by every node, and the network
    interface chosen (`interface_env`).
    """
    plan_env = dict(env or {})
    if nodes is not None and nodes.nnodes > 1:
        endpoint = nodes.endpoint
        net = interface_env(nodes.master_addr, nodes.iface)
        plan_env = {**net.env, **plan_env}
        notes = [f"node {nodes.node_rank} of {nodes.nnodes}: the nodes meet at {endpoint} (rendezvous id {rdzv_id!r})"]
        notes += [net.note] if net.note else []
        notes += [f"this node's address for the workers: {net.local_addr} (torchrun --local-addr)"] if net.local_addr else []
        node_flags = [f"--nnodes={nodes.nnodes}", f"--rdzv-id={rdzv_id}"]
        if net.local_addr:
            node_flags.append(f"--local-addr={net.local_addr}")
        if net.is_host is not None:
            node_flags.append(f"--rdzv-conf=is_host={str(net.is_host).lower()}")
            notes.append("this machine holds the master address: it hosts the rendezvous store" if net.is_host else
                         "the rendezvous store runs on the master")
    else:
        endpoint = f"127.0.0.1:{port or free_port()}"
        notes = [f"rendezvous on {endpoint} (a free port)"]
        node_flags = ["--nnodes=1"]
    argv = [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        *node_flags,
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--max-restarts={max_restarts}",
    ]
    if entry and entry[0] == "-m":
        argv.append("--module")
        entry = entry[1:]
    argv += entry
    if "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in plan_env:
        threads = max(1, (os.cpu_count() or 1) // max(1, nproc))
        plan_env["OMP_NUM_THREADS"] = str(threads)
        notes.append(f"OMP_NUM_THREADS={threads}: {os.cpu_count()} cores / {nproc} processes")
    # torchrun's workers must import gpurig from wherever this process imported it.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pythonpath = os.environ.get("PYTHONPATH", "")
    if src not in pythonpath.split(os.pathsep):
        plan_env["PYTHONPATH"] = src + (os.pathsep + pythonpath if pythonpath else "")
    return LaunchPlan(argv=argv, env=plan_env, nproc=nproc, device=device, run_dir=run_dir, notes=notes)


# ---------------------------------------------------------------------------------------------
# `gpurig launch`: the plan for a user's own script, with safe defaults and multi-node/Slurm.
# ---------------------------------------------------------------------------------------------

DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0  # torch's own NCCL default; gloo's is 1800 s
FLIGHT_RECORDER_ENTRIES = 2000
TRACE_PREFIX = "nccl_trace_rank_"
INJECT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inject")


@dataclass
class LaunchOptions:
    """What the user asked `gpurig launch` for; `plan_launch` turns it into a `LaunchPlan`."""

    script: str
    script_args: list[str] = field(default_factory=list)
    module: bool = False  # run `script` as `python -m script`
    nproc_per_node: str | int = "auto"
    device: str = "auto"
    nnodes: str | int | None = None  # int or "MIN:MAX"; None: 1, or Slurm's node count
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    max_restarts: int = 0
    collective_timeout_s: float | None = DEFAULT_COLLECTIVE_TIMEOUT_S
    run_dir: str | None = None
    env_overrides: dict[str, str] = field(default_factory=dict)  # --env KEY=VALUE
    use_slurm: bool = True
    rdzv_backend: str = "c10d"
    torchrun_args: list[str] = field(default_factory=list)  # torchrun options passed through as given
    iface: str | None = None  # across machines: the network interface to the other nodes (--iface)


@dataclass
class EnvDefault:
    """One environment default: the value used and where it came from."""

    name: str
    value: str
    source: str  # "gpurig" (our default), "yours" (kept from the environment), "--env"
    why: str


LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")


def endpoint_port_taken(endpoint: str) -> bool:
    """True when `endpoint` names a port on this machine that another program already holds.

    torchrun then joins that program as a rendezvous client and waits (15 minutes by default)
    instead of failing, so a single-node launch checks first.
    """
    host, port = _parse_endpoint(endpoint)
    if port in (None, 0) or host not in LOCAL_HOSTS + (socket.gethostname(),):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore does: TIME_WAIT is not "taken"
            s.bind(("", port))
        except OSError:
            return True
    return False


def parse_env_assignments(items: list[str], flag: str = "--env") -> dict[str, str]:
    """`["A=1", "B=x=y"]` -> {"A": "1", "B": "x=y"}; anything without `=` is bad input."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise BadInput(f"{flag} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _parse_endpoint(endpoint: str, flag: str = "--rdzv-endpoint") -> tuple[str, int | None]:
    host, sep, port = endpoint.rpartition(":")
    if not sep:
        return endpoint, None
    if not host:
        raise BadInput(f"{flag} {endpoint!r}: the host is missing (expected HOST:PORT)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BadInput(f"{flag} {endpoint!r}: {port!r} is not a port number")
    return host, int(port)


def _parse_nnodes(value: str | int | None) -> tuple[str, int]:
    """torchrun's `--nnodes` ("2" or "1:4") and the largest node count it allows."""
    if value is None:
        return "1", 1
    return str(value).strip(), node_range(value)[1]


def _version_tuple(version: str) -> tuple[int, ...]:
    import re

    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def installed_torch_version() -> str | None:
    """torch.__version__ read from its files, without importing torch."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(loc, "version.py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                m = re.search(r"^__version__\s*(?::\s*\w+)?\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
            return m.group(1) if m else None
    return None


def _environment_defaults(
    device: str,
    nproc: int,
    run_dir: str,
    collective_timeout_s: float | None,
    environ: dict[str, str],
    cpu_count: int,
    torch_version: str | None = None,
) -> list[EnvDefault]:
    """The safe defaults, each kept as the user set it when already in their environment."""
    wanted: list[tuple[str, str, str]] = []
    threads = max(1, cpu_count // max(1, nproc))
    wanted.append(("OMP_NUM_THREADS", str(threads), f"{cpu_count} cores / {nproc} processes per node"))
    wanted.append((
        "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1",
        "a failed or timed-out NCCL collective ends the process instead of hanging it",
    ))
    if collective_timeout_s:
        wanted.append((
            "GPURIG_COLLECTIVE_TIMEOUT", f"{collective_timeout_s:g}",
            "init_process_group() without timeout= gets this many seconds per collective",
        ))
    if device == "cuda":
        trace = os.path.join(run_dir, TRACE_PREFIX)
        # torch 2.9 renamed the flight recorder's variables (the old names still work there, with
        # a deprecation warning in every rank); older torch knows only the old ones.
        new_names = torch_version is None or _version_tuple(torch_version) >= (2, 9)
        buffer_var = "TORCH_FR_BUFFER_SIZE" if new_names else "TORCH_NCCL_TRACE_BUFFER_SIZE"
        file_var = "TORCH_FR_DUMP_TEMP_FILE" if new_names else "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
        wanted += [
            (buffer_var, str(FLIGHT_RECORDER_ENTRIES), "the flight recorder keeps the last collectives of every rank"),
            ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "on a watchdog timeout each rank writes its record"),
            (file_var, trace, "where the records go (one file per rank)"),
        ]
    out = []
    for name, value, why in wanted:
        if name in environ:
            out.append(EnvDefault(name, environ[name], "yours", "kept from your environment"))
        else:
            out.append(EnvDefault(name, value, "gpurig", why))
    return out


def default_run_dir(prefix: str = "", now: float | None = None, pid: bool = False) -> str:
    """runs/<prefix><local time>[-<pid>]: where a run goes when no --out names one (one rule for
    train, bench train and launch)."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return os.path.join("runs", f"{prefix}{stamp}" + (f"-{os.getpid()}" if pid else ""))


def plan_launch(
    options: LaunchOptions,
    environ: dict[str, str] | None = None,
    cpu_count: int | None = None,
    device_choice: DeviceChoice | None = None,
    port: int | None = None,
    python: str | None = None,
    torch_version: str | None = "installed",
) -> tuple[LaunchPlan, dict]:
    """Plan `torchrun` for the user's script. Pure apart from `resolve_device` and `free_port`
    (both replaceable by arguments, which is how the tests pin them).

    Returns the plan and a description of it (what `--dry-run --json` prints).
    """
    environ = dict(os.environ if environ is None else environ)
    cpu_count = cpu_count or os.cpu_count() or 1
    choice = device_choice or resolve_device(options.device, options.nproc_per_node, flag="--nproc-per-node")
    nproc = choice.nproc
    run_dir = options.run_dir or default_run_dir("launch-", pid=True)
    notes: list[str] = [f"device: {choice.device} ({choice.reason}), backend {choice.backend}"]

    slurm = None
    if options.use_slurm:
        from gpurig.launch.slurm import slurm_from_env

        slurm = slurm_from_env(environ)
    nnodes_text, max_nodes = _parse_nnodes(options.nnodes)
    node_rank = options.node_rank
    endpoint = options.rdzv_endpoint
    rdzv_id = options.rdzv_id
    if slurm is not None:
        notes.append(
            f"Slurm job {slurm.job_id}: {slurm.nnodes} node(s) {', '.join(slurm.hosts[:4])}"
            f"{' …' if len(slurm.hosts) > 4 else ''}; this is node {slurm.node_rank}"
        )
        if options.nnodes is None:
            nnodes_text, max_nodes = str(slurm.nnodes), slurm.nnodes
        if node_rank is None:
            node_rank = slurm.node_rank
        if endpoint is None:
            endpoint = f"{slurm.first_host}:{slurm.rendezvous_port}"
            notes.append(f"rendezvous on the first host {endpoint} (port from the job id)")
        rdzv_id = rdzv_id or f"slurm-{slurm.job_id}"
        if slurm.ntasks_per_node and slurm.ntasks_per_node > 1:
            notes.append(
                f"SLURM_NTASKS_PER_NODE={slurm.ntasks_per_node}: start one `gpurig launch` per node "
                "(srun --ntasks-per-node=1); it starts the processes of its node itself"
            )
    if node_rank is not None:
        check_nodes(max_nodes, node_rank, nnodes_text)

    multi_node, net = max_nodes > 1, None
    if options.iface is not None and not multi_node:
        raise BadInput("--iface chooses the network between machines: it needs --nnodes 2 or more")
    if multi_node:
        if not endpoint:
            raise BadInput(
                f"--nnodes {nnodes_text} needs --rdzv-endpoint HOST:PORT, the same on every node "
                "(the first node's address)"
            )
        host, ep_port = _parse_endpoint(endpoint)
        if ep_port is None:
            endpoint = f"{host}:29500"
        rdzv_id = rdzv_id or "gpurig"
        notes.append(f"{nnodes_text} nodes meet at {endpoint} (rendezvous id {rdzv_id!r})")
        net = interface_env(host, options.iface, environ)
        notes += [net.note] if net.note else []
    elif endpoint:
        host, ep_port = _parse_endpoint(endpoint)
        if ep_port is None:
            endpoint = f"{host}:29500"
        notes.append(f"rendezvous on {endpoint} (as asked)")
    else:
        chosen = port or free_port()
        endpoint = f"127.0.0.1:{chosen}"
        notes.append(f"rendezvous on {endpoint} (a free port, so no 'Address already in use')")

    log_dir = os.path.join(run_dir, "logs")
    argv = [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes_text}",
        f"--nproc-per-node={nproc}",
        f"--rdzv-backend={options.rdzv_backend}",
        f"--rdzv-endpoint={endpoint}",
    ]
    if rdzv_id:
        argv.append(f"--rdzv-id={rdzv_id}")
    if node_rank is not None and multi_node and options.rdzv_backend == "static":  # c10d ignores it, warning
        argv.append(f"--node-rank={node_rank}")
    if net is not None:
        given = {a.split("=", 1)[0].replace("_", "-") for a in options.torchrun_args}
        if net.local_addr and "--local-addr" not in given:
            argv.append(f"--local-addr={net.local_addr}")  # the address the workers meet at, not the host name's
        if net.is_host is not None and "--rdzv-conf" not in given and options.rdzv_backend == "c10d":
            argv.append(f"--rdzv-conf=is_host={str(net.is_host).lower()}")
    if options.max_restarts < 0:
        raise BadInput(f"--max-restarts must be 0 or more, got {options.max_restarts}")
    argv += [
        f"--max-restarts={options.max_restarts}",
        f"--log-dir={log_dir}",
        "--redirects=3",  # each rank's stdout and stderr into <log_dir>/<id>/attempt_N/<local_rank>/
    ]
    passed = list(options.torchrun_args)
    if not any(a.startswith("--tee") for a in passed):
        argv.append("--tee=3")  # ... and on the terminal as well, prefixed with the rank
    argv += passed
    if options.module:
        argv += ["--module", options.script]
    else:
        argv.append(options.script)
    argv += list(options.script_args)
    notes.append(f"per-rank logs in {log_dir}")

    if options.collective_timeout_s is not None and options.collective_timeout_s <= 0:
        raise BadInput(f"--timeout must be more than 0 seconds, got {options.collective_timeout_s:g}")
    if torch_version == "installed":
        torch_version = installed_torch_version()
    defaults = _environment_defaults(
        choice.device, nproc, run_dir, options.collective_timeout_s, environ, cpu_count, torch_version
    )
    for name, value in (net.env if net is not None else {}).items():
        defaults = [d for d in defaults if d.name != name]
        defaults.append(EnvDefault(name, value, "--iface" if options.iface else "gpurig", net.note or ""))
    for name, value in options.env_overrides.items():
        defaults = [d for d in defaults if d.name != name]
        defaults.append(EnvDefault(name, value, "--env", "asked for with --env"))
    if options.env_overrides.get("NCCL_NVLS_ENABLE") == "1":
        raise BadInput("--env NCCL_NVLS_ENABLE=1: gpurig never switches on NVLink multicast")
    plan_env = {d.name: d.value for d in defaults if d.source != "yours"}
    # The collective-timeout hook and the per-worker error file (see launch/inject/sitecustomize.py).
    pythonpath = environ.get("PYTHONPATH", "")
    plan_env["PYTHONPATH"] = INJECT_DIR + (os.pathsep + pythonpath if pythonpath else "")
    if options.collective_timeout_s is None:
        notes.append("collective timeout: torch's default (NCCL 600 s, gloo 1800 s)")
    if choice.device != "cuda":
        notes.append("flight recorder: NCCL only; on gloo a hang is read from the rank logs")

    plan = LaunchPlan(argv=argv, env=plan_env, nproc=nproc, device=choice.device, run_dir=run_dir, notes=notes)
    description = {
        "command": plan.command_line(),
        "argv": argv,
        "env": plan_env,
        "defaults": [dataclasses_asdict(d) for d in defaults],
        "nproc_per_node": nproc,
        "nnodes": nnodes_text,
        "node_rank": node_rank,
        "rdzv_endpoint": endpoint,
        "rdzv_id": rdzv_id,
        "device": choice.device,
        "backend": choice.backend,
        "run_dir": run_dir,
        "log_dir": log_dir,
        "slurm": None if slurm is None else dataclasses_asdict(slurm),
        "collective_timeout_s": options.collective_timeout_s,
        "notes": notes,
    }
    return plan, description


def dataclasses_asdict(obj) -> dict:
    import dataclasses

    return dataclasses.asdict(obj)
