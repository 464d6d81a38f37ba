"""Like the seed tutorial's template: the rendezvous address is hard-coded (init_method=tcp://),
here to the port in BUSY_PORT, which another program already holds."""
import os

import torch.distributed as dist

with open(os.path.join(os.environ["PID_DIR"], f"rank{os.environ['RANK']}.pid"), "w") as f:
    f.write(str(os.getpid()))
dist.init_process_group(
    "gloo",
    init_method=f"tcp://127.0.0.1:{os.environ['BUSY_PORT']}",
    rank=int(os.environ["RANK"]),
    world_size=int(os.environ["WORLD_SIZE"]),
)
dist.barrier()
