"""How a command is stopped: Ctrl-C, or SIGTERM turned into `Stop` while a run goes on.

Kept apart from the runner so that every command can be wrapped in `sigterm_stops` without
importing what starting torchrun needs."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class Stop(KeyboardInterrupt):
    """A stop asked for by a signal other than Ctrl-C; caught wherever KeyboardInterrupt is."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


def signal_words(signame: str | None) -> str:
    """How a person names the signal that stopped a run: "Ctrl-C (SIGINT)", "SIGTERM"."""
    return "Ctrl-C (SIGINT)" if signame in (None, "SIGINT") else signame


@contextlib.contextmanager
def _handling(signum: int, handler) -> Iterator[None]:
    """`handler` for `signum` inside the block, the previous one after it. Outside the main thread
    signals cannot be caught and nothing changes."""
    try:
        previous = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signum, previous)


def sigterm_stops(on_term=None):
    """Inside the block, SIGTERM to this process (a scheduler's preemption, `kill`) stops the run the
    way Ctrl-C does, as `Stop("SIGTERM")`; `on_term()` is called first."""

    def handler(signum, frame):  # noqa: ARG001
        if on_term is not None:
            on_term()
        raise Stop("SIGTERM")

    return _handling(signal.SIGTERM, handler)


def ignoring_interrupts():
    """While the workers are being stopped, further Ctrl-Cs (people press it twice) are ignored:
    the stop that is under way finishes and leaves nothing running."""
    return _handling(signal.SIGINT, signal.SIG_IGN)
