"""Rank 1 skips the second all-reduce and gets stuck elsewhere: rank 0 waits in it until the
collective timeout. No timeout= here: `gpurig launch --timeout` supplies it."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(os.environ["PID_DIR"], f"rank{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
t = torch.ones(4)
for step in range(3):
    if rank == 1 and step == 1:
        time.sleep(300)  # stuck on another code path (data loading, a deadlock, ...)
    dist.all_reduce(t)
    print(f"step {step} done", flush=True)
