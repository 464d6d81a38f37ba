"""Rank 1 is killed with SIGKILL (what the host's OOM killer does); rank 0 waits at a barrier."""
import os
import signal

import torch.distributed as dist

dist.init_process_group("gloo")
with open(os.path.join(os.environ["PID_DIR"], f"rank{dist.get_rank()}.pid"), "w") as f:
    f.write(str(os.getpid()))
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
