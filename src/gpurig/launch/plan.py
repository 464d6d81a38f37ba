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
from gpurig.probe.visible import torch_cuda_build, torch_installed, visible_gpu_count

DEVICES = ("auto", "cuda", "cpu")
CPU_DEFAULT_NPROC = 2


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
            raise BadInput(f"{flag} must be 'auto' or a positive integer, got {value!r}") from None
    if n < 1:
        raise BadInput(f"{flag} must be at least 1, got {n}")
    return n


def resolve_device(device: str = "auto", nproc: str | int = "auto", flag: str = "--nproc") -> DeviceChoice:
    """Decide CUDA or CPU and the number of processes, from NVML and torch's files alone."""
    if device not in DEVICES:
        raise BadInput(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
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
) -> LaunchPlan:
    """Plan a single-node torchrun: `entry` is `["-m", "module", args...]` or `["script.py", args...]`.

    The rendezvous is c10d on 127.0.0.1 with a port the OS just handed out.
    """
    port = port or free_port()
    argv = [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--max-restarts={max_restarts}",
    ]
    if entry and entry[0] == "-m":
        argv.append("--module")
        entry = entry[1:]
    argv += entry
    plan_env = dict(env or {})
    notes = [f"rendezvous on 127.0.0.1:{port} (a free port)"]
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
