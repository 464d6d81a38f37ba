"""The stop request of a TensorFlow worker, set by SIGTERM. Imports nothing heavy: the worker
installs it first, before TensorFlow loads, so a stop asked for during start-up is not lost."""

from __future__ import annotations

import signal


class Stop:
    """Set by SIGTERM: the loop finishes the step it is in, saves a checkpoint and exits."""

    requested: str | None = None

    @classmethod
    def install(cls) -> None:
        def handler(signum, frame):  # noqa: ARG001
            cls.requested = "SIGTERM"

        signal.signal(signal.SIGTERM, handler)
