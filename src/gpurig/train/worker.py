"""torchrun entry point of a training worker: `python -m torch.distributed.run ... -m gpurig.train.worker`."""

from __future__ import annotations

import logging
import os
import sys

from gpurig.train.loop import main


def exit_now(code: int) -> None:
    """Leave without interpreter finalization, once the run's results are written.

    `main()` has closed the TensorBoard writer, written the summary and destroyed the process
    group. What is left are C++ objects of torch.distributed that Python would free during
    finalization (pending gloo work held by a module or a future, a store client); freeing them
    there now and then calls std::terminate ("terminate called without an active exception"),
    which turns a finished run into a failed one (pytorch/pytorch#179291). Nothing is lost by
    skipping it: the buffered streams and log handlers are flushed here.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
