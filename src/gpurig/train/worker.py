"""torchrun entry point of a training worker: `python -m torch.distributed.run ... -m gpurig.train.worker`."""

from __future__ import annotations

import sys

from gpurig.train.loop import main

if __name__ == "__main__":
    sys.exit(main())
