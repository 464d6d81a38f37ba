"""A function of the project that the script calls on every rank and that writes several shared files
(a whole training loop that saves its config, its last and its best model) is one finding at the call:
it names the first write, says how many more there are, and carries every place among its `related`,
so the user sees each write to guard, and the fix says to guard them inside when the function trains.
Each project is written for the test."""

from __future__ import annotations

from gpurig.diagnose.lint import lint_file

TRAIN = """\
import json
import os

import torch


def train_model(model, loader, optimizer, rank, output_dir):
    with open(os.path.join(output_dir, "config.json"), "w") as f:
        json.dump({"lr": 0.1}, f)
    best = None
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            optimizer.step()
        torch.save(model.state_dict(), os.path.join(output_dir, "current_model.pt"))
        if best is None or loss.item() < best:
            best = loss.item()
            torch.save(model.state_dict(), os.path.join(output_dir, "best_model.pt"))
        if rank == 0:
            torch.save(model.state_dict(), os.path.join(output_dir, "last_model.pt"))
"""

SCRIPT = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from train import train_model


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_model(model, [], optimizer, dist.get_rank(), "out")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _saves(tmp_path, train: str = TRAIN):
    (tmp_path / "train.py").write_text(train)
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    return [f for f in lint_file(str(script)) if f.id == "save-on-every-rank"]


def test_every_unguarded_write_of_the_called_function_is_a_place_of_the_one_finding(tmp_path):
    found = _saves(tmp_path)
    assert len(found) == 1 and found[0].line == 16
    assert found[0].related == ["train.py:8", "train.py:17", "train.py:20"]  # not the rank-0 save at 22
    assert "and 2 more writes" in found[0].title
    assert "train.py:17" in found[0].fix and "train.py:20" in found[0].fix


def test_a_function_with_one_write_names_it_alone(tmp_path):
    one = TRAIN.replace('        torch.save(model.state_dict(), os.path.join(output_dir, "current_model.pt"))\n', "") \
        .replace("        if best is None or loss.item() < best:\n            best = loss.item()\n"
                 '            torch.save(model.state_dict(), os.path.join(output_dir, "best_model.pt"))\n', "")
    found = _saves(tmp_path, one)
    assert len(found) == 1 and found[0].related == ["train.py:8"]
    assert "more write" not in found[0].title and "also" not in found[0].fix


def test_a_function_whose_writes_are_all_on_rank_zero_is_not_a_finding(tmp_path):
    guarded = TRAIN.replace('    with open(os.path.join(output_dir, "config.json"), "w") as f:\n        json.dump({"lr": 0.1}, f)\n', "") \
        .replace('        torch.save(model.state_dict(), os.path.join(output_dir, "current_model.pt"))\n', "") \
        .replace("        if best is None or loss.item() < best:\n", "        if rank == 0 and (best is None or loss.item() < best):\n")
    assert _saves(tmp_path, guarded) == []
