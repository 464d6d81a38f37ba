"""Like the seed tutorial's template: the rendezvous address is hard-coded (init_method=tcp://),
here to the port in BUSY_PORT, which another program already holds."""
import os

# The pid first, before torch's seconds-long import: rank 0 fails as soon as it has imported torch,
# and the launcher then stops rank 1, which must have said who it is by then.
with open(os.path.join(os.environ["PID_DIR"], f"rank{os.environ['RANK']}.pid"), "w") as f:
    f.write(str(os.getpid()))

import torch.distributed as dist  # noqa: E402

dist.init_process_group(
    "gloo",
    init_method=f"tcp://127.0.0.1:{os.environ['BUSY_PORT']}",
    rank=int(os.environ["RANK"]),
    world_size=int(os.environ["WORLD_SIZE"]),
)
dist.barrier()
