"""`docker run` lines and compose files that give a training container the GPUs and the memory it needs.

The flags fix what bites multi-GPU jobs in containers: no GPUs without `--gpus`, DataLoader
workers and NCCL dying on Docker's 64 MB `/dev/shm`, pinned memory capped by `ulimit -l`,
zombie worker processes without an init, and Jupyter or SSH published on every interface.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from gpurig.errors import BadInput
from gpurig.recipes.base import (
    DEFAULT_IMAGE,
    JUPYTER_PORT,
    SSH_PORT,
    TENSORBOARD_PORT,
    USER_HOME,
    WORKDIR,
    HostSummary,
    Recipe,
    gib_ceil,
    parse_gpu_selection,
    require_positive,
)

IPC_MODES = ("host", "private")
PREFETCH_FACTOR = 2  # PyTorch DataLoader's default batches in flight per worker
CPU_NPROC = 2  # gpurig's CPU fallback: two gloo processes
STACK_BYTES = 67108864  # 64 MiB: the stack limit NVIDIA's framework containers ask for


@dataclass
class ContainerOptions:
    """What the user asked for; the defaults are what a single-user training box wants."""

    image: str = DEFAULT_IMAGE
    gpus: str = "all"  # "all" or indices "0,1" (a user's share of a shared server)
    ipc: str = "host"  # "host" shares the host's IPC namespace; "private" sizes --shm-size instead
    workers: int = 4  # DataLoader workers per training process (sizes /dev/shm when ipc=private)
    batch: int = 256  # samples per batch per process (sizes /dev/shm when ipc=private)
    sample_mb: float = 0.6  # one decoded sample in MB (3x224x224 float32 is 0.6 MB)
    data: str | None = None  # a host directory with the datasets, mounted read-only
    jupyter: bool = False
    ssh: bool = False
    tensorboard: bool = False
    public: bool = False  # publish the ports on every interface instead of 127.0.0.1
    name: str = "gpurig"
    command: list[str] = field(default_factory=list)


@dataclass
class _Plan:
    """The decisions shared by the docker run line and the compose file."""

    gpu_indices: list[int] | None
    nproc: int
    shm_size_gib: int | None
    shm_why: str  # why --ipc=host, or the arithmetic behind --shm-size
    ports: list[tuple[str, int, str]]  # (bind address, port, service)
    reasons: list[str]
    warnings: list[str]


def shm_bytes_needed(nproc: int, workers: int, batch: int, sample_mb: float) -> float:
    """Bytes of /dev/shm the DataLoaders hold at once: every worker keeps `PREFETCH_FACTOR` batches."""
    return nproc * workers * PREFETCH_FACTOR * batch * sample_mb * 1e6


def _plan(host: HostSummary, opts: ContainerOptions) -> _Plan:
    if opts.ipc not in IPC_MODES:
        raise BadInput(f"--ipc must be one of {', '.join(IPC_MODES)}, got {opts.ipc!r}")
    if opts.workers < 0:
        raise BadInput(f"--workers must be 0 or more, got {opts.workers}")
    require_positive(opts.batch, "--batch")
    if opts.sample_mb <= 0:
        raise BadInput(f"--sample-mb must be more than 0, got {opts.sample_mb}")
    if not opts.image.strip() or any(c.isspace() for c in opts.image):
        raise BadInput(f"--image must be an image name without spaces, got {opts.image!r}")
    if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", opts.name):
        raise BadInput(f"--name must be letters, digits, '_', '.' or '-' (a container name), got {opts.name!r}")
    if opts.data is not None and (":" in opts.data or not opts.data.strip()):
        raise BadInput(f"--data must be a folder path without ':' (docker -v splits on it), got {opts.data!r}")
    indices = parse_gpu_selection(opts.gpus, host)
    reasons: list[str] = []
    warnings: list[str] = []
    if not host.has_gpu:
        reasons.append("the host has no NVIDIA GPU: the container runs on the CPU (two gloo processes)")
        nproc = CPU_NPROC
    else:
        nproc = len(indices) if indices is not None else host.gpu_count

    shm_size = None
    if opts.ipc == "host":
        shm_why = (
            "DataLoader workers pass batches and NCCL passes data through /dev/shm; "
            "Docker's 64 MB default makes them die with 'bus error' or hang"
        )
    else:
        need = shm_bytes_needed(nproc, opts.workers, opts.batch, opts.sample_mb)
        shm_size = gib_ceil(2 * need)
        shm_why = (
            f"{nproc} process(es) x {opts.workers} workers x {PREFETCH_FACTOR} "
            f"prefetched batches x {opts.batch} samples x {opts.sample_mb:g} MB = {need / 1e9:.2f} GB, "
            "doubled for headroom (at least 1 GiB, for NCCL's shared-memory buffers); "
            "a private IPC namespace keeps other users' shared memory out of reach"
        )

    bind = "0.0.0.0" if opts.public else "127.0.0.1"
    ports: list[tuple[str, int, str]] = []
    if opts.jupyter:
        ports.append((bind, JUPYTER_PORT, "Jupyter"))
    if opts.tensorboard:
        ports.append((bind, TENSORBOARD_PORT, "TensorBoard"))
    if opts.ssh:
        ports.append((bind, SSH_PORT, "SSH"))
    if ports and not opts.public:
        reasons.append(
            "ports are published on 127.0.0.1 only: reach them from your laptop through an SSH tunnel "
            f"(ssh -L {ports[0][1]}:127.0.0.1:{ports[0][1]} you@server)"
        )
    if ports and opts.public:
        warnings.append(
            "--public publishes " + ", ".join(f"{s} ({p})" for _, p, s in ports)
            + " on every network interface of the host: anyone who can reach the machine can try to log in; "
            "put a firewall or a TLS proxy in front, and prefer an SSH tunnel"
        )
    return _Plan(indices, nproc, shm_size, shm_why, ports, reasons, warnings)


def _gpus_flag(indices: list[int] | None) -> str:
    if indices is None:
        return "all"
    # The inner double quotes are part of the value: Docker reads "device=0,1" as one option, and
    # without them the comma would start a second option.
    return "'\"device=" + ",".join(str(i) for i in indices) + "\"'"


def _host_path(path: str) -> str:
    """A bind-mount source for the shell: docker -v takes a relative path for a volume name, so anchor it."""
    if path == "~":
        return path
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])  # the slash stays unquoted, or bash would not expand the ~
    if path.startswith("/"):
        return shlex.quote(path)
    return '"$PWD"/' + shlex.quote(path.removeprefix("./"))


def docker_run_recipe(host: HostSummary, opts: ContainerOptions) -> Recipe:
    """The `docker run` line, with one comment per flag saying why it is there."""
    plan = _plan(host, opts)
    interactive = not (opts.jupyter or opts.ssh or opts.tensorboard)
    flags: list[tuple[str, str]] = []  # (flag as typed in a shell, why)
    if host.has_gpu:
        if plan.gpu_indices is None:
            why = f"every GPU of the host ({host.gpu_count}), handed in by the NVIDIA Container Toolkit"
        else:
            why = (f"only GPUs {','.join(map(str, plan.gpu_indices))}: your share of a shared server; "
                   "inside the container they are numbered from 0")
        flags.append((f"--gpus {_gpus_flag(plan.gpu_indices)}", why))
    if interactive:
        flags.append(("--rm -it", "an interactive shell; the container is removed when you leave it"))
    else:
        flags.append(("-d", "runs in the background; `docker logs " + opts.name + "` shows the Jupyter URL"))
    flags.append((f"--name {shlex.quote(opts.name)}", "a name to find it by (docker logs, docker exec)"))
    flags.append(("--init", "an init process reaps exited DataLoader workers and forwards Ctrl-C and SIGTERM"))
    if plan.shm_size_gib is None:
        flags.append(("--ipc=host", plan.shm_why))
    else:
        flags.append((f"--shm-size={plan.shm_size_gib}g", plan.shm_why))
    flags.append(("--ulimit memlock=-1", "no cap on pinned (page-locked) host memory for fast host-to-GPU copies and NCCL"))
    flags.append((f"--ulimit stack={STACK_BYTES}", "a 64 MiB stack, as NVIDIA's framework containers ask for"))
    flags.append((f'-v "$PWD":{WORKDIR}', "your project, edited on the host and seen live in the container"))
    flags.append((f"-w {WORKDIR}", "start in the project directory"))
    if opts.data:
        flags.append((f"-v {_host_path(opts.data)}:/data:ro", "the datasets, read-only so a bug cannot delete them"))
    for bind, port, service in plan.ports:
        flags.append((f"-p {bind}:{port}:{port}", f"{service} on port {port} of the host, "
                      + ("on every interface (--public)" if bind == "0.0.0.0" else "on 127.0.0.1 only")))
    if opts.jupyter:
        flags.append(("-e JUPYTER_TOKEN", "passes your JUPYTER_TOKEN through if set; otherwise Jupyter makes "
                      "a random token and prints it in `docker logs`"))
        if opts.public:
            flags.append(("-e JUPYTER_PASSWORD_HASH", "the password hash Jupyter requires with --public "
                          "(make one with: python -c \"from jupyter_server.auth import passwd; print(passwd())\")"))
    if opts.ssh:
        flags.append((f"-v ~/.ssh/authorized_keys:{USER_HOME}/.ssh/authorized_keys:ro",
                      "the public keys allowed to log in (key login only; no passwords)"))

    command = " ".join(shlex.quote(c) for c in opts.command)
    head = [
        "#!/usr/bin/env bash",
        f"# docker run for {host.describe()}; made by `gpurig env docker-run`.",
    ]
    if host.has_gpu:
        head.append("# Needs the NVIDIA Container Toolkit on the host (it is what makes --gpus work).")
    head.append("# Why each flag is there:")
    width = max(len(f) for f, _ in flags)
    head += [f"#   {f.ljust(width)}  {why}" for f, why in flags]
    lines = ["docker run \\"] + [f"  {f} \\" for f, _ in flags]
    lines.append(f"  {shlex.quote(opts.image)}" + (f" {command}" if command else ""))
    text = "\n".join(head + lines) + "\n"
    reasons = plan.reasons + [f"{f}: {why}" for f, why in flags]
    return Recipe(
        kind="docker-run",
        text=text,
        reasons=reasons,
        warnings=plan.warnings,
        facts_used=host.to_dict() | {"nproc": plan.nproc},
    )


def compose_recipe(host: HostSummary, opts: ContainerOptions) -> Recipe:
    """A docker compose file with the same choices as `docker_run_recipe`, one comment per key."""
    plan = _plan(host, opts)
    y: list[str] = [
        f"# docker compose file for {host.describe()}; made by `gpurig env docker-run --compose`.",
        "# Start with `docker compose up -d`"
        + ("; needs the NVIDIA Container Toolkit on the host." if host.has_gpu else "."),
        "services:",
        f"  {opts.name}:  # the training container",
        f"    image: {opts.image}  # the image `docker build -t {opts.image} .` makes from `gpurig env dockerfile`",
        "    build:",
        "      context: .  # `docker compose build` builds it from the Dockerfile here",
        "    init: true  # an init process reaps exited DataLoader workers and forwards SIGTERM",
    ]
    if opts.command:
        y.append("    command: [" + ", ".join(_yaml_str(c) for c in opts.command) + "]  # what the container runs")
    elif not (opts.jupyter or opts.ssh or opts.tensorboard):
        y.append("    stdin_open: true  # keep a shell open: `docker compose exec` into it")
        y.append("    tty: true  # a terminal for that shell")
    if plan.shm_size_gib is None:
        y.append("    ipc: host  # DataLoader workers and NCCL use /dev/shm; Docker's 64 MB default is too small")
    else:
        y.append(f"    shm_size: {plan.shm_size_gib}gb  # sized from workers and batch: "
                 f"{plan.shm_why.split(';')[0]}")
    y += [
        "    ulimits:",
        "      memlock: -1  # no cap on pinned host memory (fast host-to-GPU copies, NCCL)",
        f"      stack: {STACK_BYTES}  # a 64 MiB stack, as NVIDIA's framework containers ask for",
        "    working_dir: " + WORKDIR + "  # start in the project directory",
        "    volumes:",
        f"      - ./:{WORKDIR}  # the project, edited on the host and seen live in the container",
    ]
    if opts.data:
        y.append(f"      - {_yaml_str(opts.data + ':/data:ro')}  # the datasets, read-only")
    if opts.ssh:
        y.append(f"      - ~/.ssh/authorized_keys:{USER_HOME}/.ssh/authorized_keys:ro  # keys allowed to log in")
    if plan.ports:
        y.append("    ports:")
        for bind, port, service in plan.ports:
            where = "every interface (--public)" if bind == "0.0.0.0" else "127.0.0.1 only: use an SSH tunnel"
            y.append(f"      - \"{bind}:{port}:{port}\"  # {service}, on {where}")
    if opts.jupyter:
        y.append("    environment:")
        y.append("      - JUPYTER_TOKEN  # passed through when set; otherwise a random token in `docker compose logs`")
        if opts.public:
            y.append("      - JUPYTER_PASSWORD_HASH  # required with --public: Jupyter refuses to start without it")
    if host.has_gpu:
        y += [
            "    deploy:",
            "      resources:",
            "        reservations:",
            "          devices:",
            "            - driver: nvidia  # GPUs through the NVIDIA Container Toolkit",
        ]
        if plan.gpu_indices is None:
            y.append(f"              count: all  # every GPU of the host ({host.gpu_count})")
        else:
            ids = ", ".join(f'"{i}"' for i in plan.gpu_indices)
            y.append(f"              device_ids: [{ids}]  # your share of a shared server")
        y.append("              capabilities: [gpu]")
    text = "\n".join(y) + "\n"
    shm = "ipc: host" if plan.shm_size_gib is None else f"shm_size: {plan.shm_size_gib}gb"
    return Recipe(
        kind="compose",
        text=text,
        reasons=[*plan.reasons, f"{shm}: {plan.shm_why}", "ulimits memlock -1 and stack 64 MiB: pinned memory "
                 "and the stack NVIDIA's framework containers ask for"],
        warnings=plan.warnings,
        facts_used=host.to_dict() | {"nproc": plan.nproc},
    )


def _yaml_str(value: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    import json

    return json.dumps(value)
