"""What every part of the PyTorch worker shares: the rank's context, the step timers, the
background TensorBoard writer, the stop flag set by SIGTERM/SIGINT, and rank 0's output."""

from __future__ import annotations

import logging
import resource
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# Dense bf16/fp16 tensor-core peak FLOP/s (NVIDIA datasheets), for model FLOPs utilisation.
PEAK_FLOPS_16BIT = {"H200": 989e12, "H100": 989e12, "H800": 989e12, "GH200": 989e12, "B200": 2250e12,
                    "A100": 312e12, "A800": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12,
                    "V100": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}

@dataclass
class Context:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    control: Any = None  # a gloo group for host-only agreement (stop flags, RNG gathering)

    @property
    def main(self) -> bool:
        return self.rank == 0

@dataclass
class Timers:
    """Step-time parts of this rank over the measured steps."""

    steps: int = 0
    wall_s: float = 0.0
    data_wait_s: float = 0.0
    busy_s: float = 0.0
    comm_exposed_per_step_s: float = 0.0
    events: list = field(default_factory=list)

class BackgroundTB:
    """A TensorBoard SummaryWriter opened in a background thread (importing tensorboard takes
    seconds); scalars logged before it is ready are buffered, none are lost."""

    def __init__(self, log_dir: Path) -> None:

        self.writer = None
        self.error: str | None = None
        self.pending: list[tuple[str, float, int]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._open, args=(log_dir,), daemon=True)
        self.thread.start()

    def _open(self, log_dir: Path) -> None:
        try:
            # tensorboard imports TensorFlow when it is installed (seconds of start-up and a TF
            # runtime in a PyTorch worker); blocking the import makes it use its own stub writer.
            if "tensorflow" not in sys.modules:
                sys.modules["tensorflow"] = None  # type: ignore[assignment]
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=str(log_dir))
        except Exception as exc:  # tensorboard is optional; the run goes on without it
            self.error = f"{type(exc).__name__}: {exc}"
            return
        with self.lock:
            self.writer = writer

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        with self.lock:
            if self.writer is None:
                self.pending.append((tag, value, step))
                return
            pending, self.pending = self.pending, []
        for t, v, s in pending:
            self.writer.add_scalar(t, v, s)
        self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self.thread.join(timeout=60)
        if self.writer is not None:
            for t, v, s in self.pending:
                self.writer.add_scalar(t, v, s)
            self.pending = []
            self.writer.close()

class _Stop:
    requested = False
    signal_name = ""

def _on_signal(signum: int, _frame: Any) -> None:
    _Stop.requested = True
    _Stop.signal_name = signal.Signals(signum).name

def say(ctx: Context, text: str) -> None:
    """Rank 0 alone speaks."""
    if ctx.main:
        print(text, flush=True)

def _memory(ctx: Context) -> tuple[int | None, int | None]:
    if ctx.device.type == "cuda":
        return torch.cuda.max_memory_allocated(ctx.device), torch.cuda.get_device_properties(ctx.device).total_memory
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None


class _DropProfilerNotice(logging.Filter):
    """Dynamo's "Profiler record function ... will be ignored": DDP's forward names itself for the
    profiler, and a compiled DDP module says once per rank that the name is dropped. Nothing to act
    on, and it lands among the run's choices; every other message passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Profiler record function", "Profiler function"))


def quiet_known_torch_notices() -> None:
    for name in ("torch._dynamo.variables.ctx_manager", "torch._dynamo.variables.torch"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropProfilerNotice) for f in logger.filters):
            logger.addFilter(_DropProfilerNotice())
