"""Rank 1 raises after the process group is up; rank 0 waits at a barrier."""
import os

import torch.distributed as dist

dist.init_process_group("gloo")
with open(os.path.join(os.environ["PID_DIR"], f"rank{dist.get_rank()}.pid"), "w") as f:
    f.write(str(os.getpid()))
if dist.get_rank() == 1:
    raise ValueError("injected failure on rank 1")
dist.barrier()
