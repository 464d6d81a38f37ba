"""NCCL version of skip_allreduce.py: rank 1 skips the second all-reduce and is stuck elsewhere;
rank 0 waits in it until the NCCL watchdog's timeout (from `gpurig launch --timeout`), which
dumps the flight recorder of every rank into the run directory."""
import os
import time

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
rank = dist.get_rank()
t = torch.ones(1024, device="cuda")
for step in range(3):
    if rank == 1 and step == 1:
        time.sleep(300)  # stuck on another code path
    dist.all_reduce(t)
    # .item() waits for the all-reduce: without it rank 0 would run ahead and queue more work.
    print(f"step {step} done, value {t[0].item():.0f}", flush=True)
dist.destroy_process_group()
