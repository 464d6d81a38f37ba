"""What a training worker does when something goes wrong: a restart, a stop signal, a collective
that never completes, a checkpoint that cannot be written, a checkpoint that does not fit.

The loop (`train/torch/trainer.py`) calls in here at a few points; everything decided here is said in
words a user can act on. Environment variables (all optional):

    GPURIG_COLLECTIVE_TIMEOUT  seconds a collective may wait for the other ranks (default 600;
                               the same variable `gpurig launch` sets for user scripts)
    GPURIG_STOP_GRACE          seconds a worker has after SIGTERM/SIGINT to reach a step boundary,
                               write its checkpoint and exit, before it exits anyway (default 20)
    GPURIG_TRAIN_FAULT         fault injection for tests, e.g. `kill:step=25:rank=1` (see `Fault`)

torchrun restarts the workers after a failure (`gpurig train --max-restarts K`); a restarted
worker sees TORCHELASTIC_RESTART_COUNT > 0 and resumes from the newest complete checkpoint.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpurig.errors import BadInput

DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0  # NCCL's own default; gloo's is 1800 s, too long to wait for a hang
DEFAULT_STOP_GRACE_S = 20.0  # below the 30 s Kubernetes and Slurm give between SIGTERM and SIGKILL
LEDGER_EVERY_S = 0.5  # how often each rank publishes where it is (a background thread, not the step loop)
LEDGER_KEY = "gpurig/ledger/"

# Exit codes. A scheduler requeues on 143 (128 + SIGTERM): the job was stopped from outside and
# left a checkpoint to resume from; Kubernetes' podFailurePolicy and Slurm's requeue scripts key
# on it.
EXIT_PREEMPTED = 143
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): the user stopped it; do not requeue


def _env_float(name: str, default: float, env: dict[str, str] | None = None) -> float:
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise BadInput(f"{name}={raw!r}: must be more than 0 seconds")
    return value


def collective_timeout() -> datetime.timedelta:
    """How long a collective waits for the others before it fails (and the run says who is missing)."""
    return datetime.timedelta(seconds=_env_float("GPURIG_COLLECTIVE_TIMEOUT", DEFAULT_COLLECTIVE_TIMEOUT_S))


def stop_grace(env: dict[str, str] | None = None) -> float:
    """Seconds a worker has after SIGTERM to checkpoint and exit (`env` first, then os.environ)."""
    if env and env.get("GPURIG_STOP_GRACE"):
        return _env_float("GPURIG_STOP_GRACE", DEFAULT_STOP_GRACE_S, env)
    return _env_float("GPURIG_STOP_GRACE", DEFAULT_STOP_GRACE_S)


def stop_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Variables for torchrun: it waits as long as the workers' grace (plus a margin) before SIGKILL."""
    if "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in os.environ:
        return {}
    return {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(int(stop_grace(env) + 5))}


def parent_grace(env: dict[str, str] | None = None) -> float:
    """How long the parent waits after passing SIGTERM on before it SIGKILLs what is left."""
    return stop_grace(env) + 10


# ---------------------------------------------------------------------------------------------
# Restarts


def restart_count() -> int:
    """How many times torchrun has restarted this worker group (0 on the first attempt)."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def init_kwargs() -> dict[str, Any]:
    """Extra arguments for init_process_group: a store private to this torchrun attempt.

    torchrun keeps one key-value store for all attempts; the process group's keys (gloo's peer
    addresses, NCCL's unique id) of a killed attempt are still there when the restarted workers
    meet, and a rank that reads one before its peer overwrites it connects to a dead process
    ("Gloo connectFullMesh failed ... Connection refused") or waits for a stale NCCL id. A prefix
    per attempt keeps every attempt's keys apart on one node, where one agent counts the attempts.
    Across nodes the agents can count differently, so multi-node plans ask torchrun for a fresh
    store per rendezvous round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, `gpurig.train.nodes`); the
    workers then do not use the agent's store and this returns nothing.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
        return {}
    import torch.distributed as dist

    store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=collective_timeout())
    return {"store": dist.PrefixStore(f"gpurig/attempt_{restart_count()}", store),
            "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}


def resume_after_restart(resume: str | None, fallback: bool, run_dir: str | os.PathLike) -> tuple[str | None, bool]:
    """On a restart every rank resumes from the newest complete checkpoint of this run.

    A checkpoint file the user named is used only while the run has none of its own yet. A
    corrupt newest checkpoint falls back to the one before (the restart is automatic; nobody is
    there to add --resume-fallback).
    """
    if restart_count() == 0:
        return resume, fallback
    from gpurig.train.torch import checkpoint as ckpt

    if resume and resume not in ("auto", "none") and not ckpt.list_checkpoints(run_dir):
        return resume, fallback
    return "auto", True


# ---------------------------------------------------------------------------------------------
# Stop signals: a bounded exit


class _StopDeadline:
    """Ends the process `grace` seconds after SIGTERM/SIGINT if the loop has not exited by then.

    The loop's Python handler only sets a flag that the ranks agree on at a step boundary; a rank
    blocked inside a collective or a data loader never gets there. The C-level handler writes the
    signal number to a wakeup pipe even while the main thread is blocked in C++, and a thread
    reading that pipe starts the clock.
    """

    armed = False
    started = False

    @classmethod
    def install(cls) -> None:
        if cls.armed or threading.current_thread() is not threading.main_thread():
            return
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            return
        cls.armed = True
        threading.Thread(target=cls._watch, args=(r,), name="gpurig-stop-deadline", daemon=True).start()

    @classmethod
    def _watch(cls, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGTERM, signal.SIGINT) and not cls.started:
                    cls.started = True
                    threading.Thread(target=cls._expire, args=(signum,), daemon=True).start()

    @staticmethod
    def _expire(signum: int) -> None:
        grace = stop_grace()
        time.sleep(grace)
        rank = os.environ.get("RANK", "?")
        name = signal.Signals(signum).name
        print(f"gpurig: rank {rank}: no step boundary reached within {grace:g} s of {name} "
              f"(GPURIG_STOP_GRACE); exiting now, where it was:", file=sys.stderr, flush=True)
        try:
            import faulthandler

            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        except Exception:
            pass
        os._exit(128 + signum)


def install_stop_deadline() -> None:
    """Call once in the worker's main thread after the stop-signal handlers are set."""
    _StopDeadline.install()


# ---------------------------------------------------------------------------------------------
# Where each rank is: the ledger read when a collective times out


class Ledger:
    """Each rank publishes (step, collectives issued) into torchrun's key-value store twice a second.

    The step loop only assigns a Python int; a background thread does the publishing, so the loop
    pays nothing. When a collective times out, the rank that waited reads everyone's entry and
    can say which ranks never arrived and where they last were.
    """

    current: Ledger | None = None

    def __init__(self, rank: int, world: int) -> None:
        import torch.distributed as dist

        self.rank, self.world = rank, world
        self.step = 0
        self.store = dist.distributed_c10d._get_default_store()
        self.group = dist.distributed_c10d._get_default_group()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._publish_loop, name="gpurig-ledger", daemon=True)
        self.thread.start()

    def sequence(self) -> int | None:
        try:
            return int(self.group._get_sequence_number_for_group())
        except Exception:
            return None

    def entry(self) -> dict[str, Any]:
        return {"rank": self.rank, "step": self.step, "collectives": self.sequence(), "time": time.time(),
                "pid": os.getpid(), "host": socket.gethostname()}

    def publish(self) -> None:
        self.store.set(f"{LEDGER_KEY}{self.rank}", json.dumps(self.entry()))

    def _publish_loop(self) -> None:
        while not self.stopped.wait(LEDGER_EVERY_S):
            try:
                self.publish()  # every time, unchanged or not: the time stamp says the rank is alive
            except Exception:
                return  # the store is gone: the run is ending

    def read_all(self) -> dict[int, dict[str, Any]]:
        out = {}
        for r in range(self.world):
            try:
                if not self.store.check([f"{LEDGER_KEY}{r}"]):
                    continue
                out[r] = json.loads(self.store.get(f"{LEDGER_KEY}{r}"))
            except Exception:
                continue
        return out

    def close(self) -> None:
        self.stopped.set()


def start_ledger(rank: int, world: int) -> None:
    """Start publishing this rank's position (after init_process_group). Quietly nothing without a store."""
    if world < 2 or Ledger.current is not None:
        return
    try:
        Ledger.current = Ledger(rank, world)
    except Exception:
        Ledger.current = None


# ---------------------------------------------------------------------------------------------
# Step boundary: the ledger's step and the injected faults


@dataclass
class Fault:
    """One injected fault, from GPURIG_TRAIN_FAULT=`kind:key=value:...` (several joined by `,`).

    kill     the rank SIGKILLs itself after optimizer step `step` (like the OOM killer)
    hang     the rank stops taking part after step `step`: it never enters its next collective
    enospc   every checkpoint write from step `step` on fails with "No space left on device"
             after half the bytes are written
    `rank` (default 0) picks the rank; `attempt` (default 0) the torchrun attempt it happens on.
    """

    kind: str
    step: int
    rank: int = 0
    attempt: int = 0


FAULT_KINDS = ("kill", "hang", "enospc")


def parse_faults(text: str) -> list[Fault]:
    faults = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        kind, *pairs = item.split(":")
        if kind not in FAULT_KINDS:
            raise BadInput(f"GPURIG_TRAIN_FAULT: unknown fault {kind!r}; one of {', '.join(FAULT_KINDS)}")
        kw: dict[str, int] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in ("step", "rank", "attempt") or not value.isdigit():
                raise BadInput(f"GPURIG_TRAIN_FAULT: {pair!r} in {item!r}: expected step=N, rank=N or attempt=N")
            kw[key] = int(value)
        if "step" not in kw:
            raise BadInput(f"GPURIG_TRAIN_FAULT: {item!r} needs step=N")
        faults.append(Fault(kind=kind, **kw))
    return faults


_FAULTS: list[Fault] = []
_RANK = 0


def install(rank: int, world: int) -> None:
    """Worker start: the stop deadline, the ledger, and any injected fault."""
    global _FAULTS, _RANK
    _RANK = rank
    install_stop_deadline()
    start_ledger(rank, world)
    _FAULTS = [f for f in parse_faults(os.environ.get("GPURIG_TRAIN_FAULT", ""))
               if f.rank == rank and f.attempt == restart_count()]
    if any(f.kind == "enospc" for f in _FAULTS):
        _inject_enospc(min(f.step for f in _FAULTS if f.kind == "enospc"))


def at_step(step: int) -> None:
    """Called after each optimizer step (a Python int assignment unless a fault is injected)."""
    if Ledger.current is not None:
        Ledger.current.step = step
    if not _FAULTS:
        return
    for f in _FAULTS:
        if f.step != step:
            continue
        if f.kind == "kill":
            print(f"gpurig: injected fault: rank {_RANK} kills itself after step {step}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if f.kind == "hang":
            print(f"gpurig: injected fault: rank {_RANK} stops taking part after step {step}", file=sys.stderr,
                  flush=True)
            while True:
                time.sleep(3600)


def _inject_enospc(from_step: int) -> None:
    """Make checkpoint writes fail as on a full disk: half the bytes land in the temp file, then ENOSPC."""
    import io

    import torch

    from gpurig.train.torch import checkpoint as ckpt

    real_save = torch.save

    def full_disk_save(obj, f, *args, **kwargs):
        step = obj.get("step", 0) if isinstance(obj, dict) else 0
        if step < from_step or not hasattr(f, "write"):
            return real_save(obj, f, *args, **kwargs)
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    ckpt_torch = getattr(ckpt, "torch", None)
    if ckpt_torch is not None:  # pragma: no cover - checkpoint.py imports torch lazily today
        ckpt_torch.save = full_disk_save
    torch.save = full_disk_save


# ---------------------------------------------------------------------------------------------
# Checkpoint write failures


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written and checkpoint.on_error = "stop"."""


_CHECKPOINT_FAILURES: list[dict[str, Any]] = []


def checkpoint_failed(exc: BaseException, run_dir: str | os.PathLike, step: int, on_error: str) -> str:
    """Rank 0's words for a failed checkpoint write; prints them (warn) and returns them."""
    from gpurig.train.protocol import PROGRESS
    from gpurig.train.torch import checkpoint as ckpt

    d = ckpt.checkpoint_dir(run_dir)
    err = getattr(exc, "errno", None)
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
           errno.EPERM: "permission denied", errno.ENOENT: "the directory vanished"}.get(err)
    if why is None:
        text = str(exc).lower()
        why = ("the disk is full" if "no space" in text else "the file system is read-only" if "read-only" in text
               else f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    try:
        free = __import__("shutil").disk_usage(d if d.exists() else Path(run_dir)).free
        room = f"; {free / 2**20:.1f} MiB free there"
    except OSError:
        room = ""
    previous = ckpt.list_checkpoints(run_dir)
    kept = f"the previous checkpoint {previous[-1].name} is intact" if previous else "no earlier checkpoint exists"
    message = (f"checkpoint for step {step} could not be written to {d}: {why} ({exc}){room}; {kept}")
    _CHECKPOINT_FAILURES.append({"step": step, "error": str(exc), "why": why})
    if on_error == "warn":
        message += "; training goes on (checkpoint.on_error = warn)"
        print(PROGRESS + json.dumps({"event": "note", "text": "warning: " + message}), flush=True)
    else:
        message += "; the run stops (checkpoint.on_error = stop; set it to warn to keep training)"
    print(f"gpurig: {message}", file=sys.stderr, flush=True)
    return message


def agree_checkpoint(failed: str | None, on_error: str, group: Any = None) -> None:
    """Every rank learns whether rank 0's write failed (this replaces the barrier after a save).

    With on_error = "stop", every rank raises CheckpointWriteError, so the run ends together.
    """
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if failed else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if flag.item() and on_error == "stop":
        raise CheckpointWriteError(failed or "rank 0 could not write the checkpoint (its log says why)")


# ---------------------------------------------------------------------------------------------
# A collective that timed out: which one, and who never arrived

# Where in the loop a collective is issued (function name in the traceback) -> what it is.
_OPS = (
    ("agree_stop", "the stop agreement (all_reduce)"),
    ("agree_checkpoint", "the checkpoint agreement (all_reduce)"),
    ("_gather_rng", "the checkpoint's RNG gathering (all_gather)"),
    ("get_model_state_dict", "the checkpoint's parameter gathering (FSDP all_gather)"),
    ("get_optimizer_state_dict", "the checkpoint's optimizer-state gathering (FSDP all_gather)"),
    ("save", "the barrier after a checkpoint"),
    ("calibrate_comm", "the communication calibration (gradient all-reduce)"),
    ("evaluate", "the evaluation's all_reduce"),
    ("_summary", "the summary's all_gather"),
    ("backward", "the gradient all-reduce (DDP/FSDP, during backward)"),
    ("loss_of", "the forward pass (FSDP parameter all_gather)"),
    ("optimizer_step", "the optimizer step"),
)

_TIMEOUT_WORDS = ("timed out", "timeout", "watchdog caught collective operation")
_PEER_GONE_WORDS = ("connection closed by peer", "connection reset by peer", "broken pipe", "connection refused")


def _where_in_loop(tb: Any) -> str | None:
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    for name in reversed(names):  # the innermost loop function wins
        for fn, what in _OPS:
            if name == fn:
                return what
    return None


def _process_gone(entry: dict[str, Any], age: float) -> bool:
    """A rank on this host is gone when its pid is; elsewhere when it stopped publishing."""
    if entry.get("host") == socket.gethostname() and entry.get("pid"):
        try:
            with open(f"/proc/{int(entry['pid'])}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            return state in (b"Z", b"X")  # a killed process its parent has not reaped yet is gone too
        except FileNotFoundError:
            return True
        except (OSError, ValueError, IndexError):
            pass
    return age > 4 * LEDGER_EVERY_S + 2


def describe_failure(exc: BaseException, rank: int, world: int) -> str | None:
    """A collective timeout or a vanished peer, in words: the op, the ranks that never arrived, and
    where they were. None for any other exception."""
    if isinstance(exc, CheckpointWriteError):
        return str(exc)
    text = str(exc).lower()
    timed_out = any(w in text for w in _TIMEOUT_WORDS)
    peer_gone = any(w in text for w in _PEER_GONE_WORDS)
    if not (timed_out or peer_gone):
        return None
    op = _where_in_loop(exc.__traceback__) or "a collective"
    if peer_gone:
        # A killed peer's sockets close a moment before its process is marked dead. Short: on
        # several nodes, the longer this rank lives after its peer died, the likelier its agent
        # restarts it as a membership change rather than a failure (another attempt number).
        time.sleep(0.1)
    ledger = Ledger.current
    mine = ledger.entry() if ledger else {"step": None, "collectives": None}
    others = ledger.read_all() if ledger else {}
    if ledger:
        ledger.close()
    now = time.time()
    seq = mine.get("collectives")
    missing, notes = [], []
    for r in range(world):
        if r == rank:
            continue
        e = others.get(r)
        if e is None:
            missing.append(r)
            notes.append(f"rank {r}: never reported")
            continue
        behind = seq is not None and e.get("collectives") is not None and e["collectives"] < seq
        age = now - float(e.get("time", now))
        if _process_gone(e, age):
            missing.append(r)
            notes.append(f"rank {r}: its process is gone (last seen after step {e.get('step')}, {age:.0f} s ago)")
        elif behind:
            missing.append(r)
            notes.append(f"rank {r}: finished step {e.get('step')} and {e['collectives']} collectives, "
                         f"then never entered the next one (still alive {age:.1f} s ago)")
    step = mine.get("step")
    at = f" after step {step}" if step is not None else ""
    number = f" (collective #{seq} of its group)" if seq else ""
    if timed_out:
        head = f"collective timeout: rank {rank} waited in {op}{at}{number}"
        tail = ("; raise GPURIG_COLLECTIVE_TIMEOUT if the ranks were only slow" if not missing
                else "; find why that rank stopped (its log), or raise GPURIG_COLLECTIVE_TIMEOUT if it was only slow")
    else:
        head = f"a peer's connection closed while rank {rank} was in {op}{at}{number}"
        tail = "; that rank's process ended (killed, crashed or restarted): see its log"
    if missing:
        who = ", ".join(str(r) for r in missing)
        return f"{head}; rank(s) {who} never arrived ({'; '.join(notes)}){tail}"
    return f"{head}; every rank had entered it (a stuck collective, not a missing rank){tail}"


# ---------------------------------------------------------------------------------------------


def report(rank_restart_counts: list[int] | None = None) -> dict[str, Any]:
    """What summary.json says about faults survived in this attempt.

    `restart_count` is the highest attempt number of any rank: on several nodes, the agent whose
    worker died counts a restart, while the others restart theirs for the membership change and
    count none.
    """
    count = max([restart_count(), *(rank_restart_counts or [])])
    return {"restart_count": count, "checkpoint_write_failures": list(_CHECKPOINT_FAILURES)}
