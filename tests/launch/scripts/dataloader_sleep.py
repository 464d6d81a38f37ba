"""Each rank iterates a slow DataLoader with 2 worker processes, forever; every process writes its
pid into PID_DIR so a test can check that Ctrl-C on `gpurig launch` leaves none of them alive."""
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

PID_DIR = os.environ["PID_DIR"]


class Slow(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(0.2)
        return torch.zeros(1)


def note_worker(worker_id):
    with open(os.path.join(PID_DIR, f"rank{os.environ['RANK']}-worker{worker_id}.pid"), "w") as f:
        f.write(str(os.getpid()))


dist.init_process_group("gloo")
with open(os.path.join(PID_DIR, f"rank{dist.get_rank()}.pid"), "w") as f:
    f.write(str(os.getpid()))
for _batch in DataLoader(Slow(), batch_size=1, num_workers=2, worker_init_fn=note_worker):
    pass
