"""save-on-every-rank and download-on-every-rank for the writes and fetches a script does by other
means than torch.save and from_pretrained: a plot (`plt.savefig`), an image grid (`save_image`),
`cv2.imwrite`, a copy of the code into the run's folder (`shutil.copyfile`), and a shell download
(`os.system("gdown ...")`, `subprocess.run(["wget", ...])`). Shapes of a person re-identification
script, a diffusion training script and FourCastNet's validation loop."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_source

HEAD = """\
import os
import shlex
import subprocess
from shutil import copyfile
import cv2
import matplotlib.pyplot as plt
import torch.distributed as dist
from torchvision.utils import save_image
dist.init_process_group("nccl")
rank = dist.get_rank()
"""


def _found(body: str) -> list[tuple[str, int]]:
    source = HEAD + textwrap.dedent(body) + "dist.destroy_process_group()\n"
    return [(f.id, f.line - HEAD.count("\n")) for f in lint_source(source)
            if f.id in ("save-on-every-rank", "download-on-every-rank")]


def test_files_a_script_names_written_on_every_rank():
    body = """\
    name = "run1"
    copyfile("./train.py", os.path.join("./model", name, "train.py"))
    plt.savefig(os.path.join("./model", name, "train.jpg"))
    save_image(grid, "samples/epoch.png")
    cv2.imwrite(f"out/{name}.png", image)
    """
    assert _found(body) == [("save-on-every-rank", n) for n in (2, 3, 4, 5)]


def test_per_rank_names_guarded_writes_and_paths_the_caller_gives():
    body = """\
    plt.savefig(f"plots/loss_{rank}.png")
    if rank == 0:
        save_image(grid, "samples/epoch.png")

    def show(filename, images):
        for i, image in enumerate(images):
            plt.savefig(filename + "_" + str(i) + ".png")

    def save_checkpoint(state, filename="checkpoint.pth"):
        copyfile(filename, "model_best.pth")

    show(f"vis/{rank}", [])
    """
    assert _found(body) == []


def test_a_shell_download_on_every_rank():
    body = """\
    if not os.path.isdir("../DG-Market"):
        os.system("gdown 126Gn90Tzpk3zWp2c7OBYPKc")
    subprocess.run(shlex.split(f"wget {url} -O checkpoints/model.pth"))
    os.system("unzip data.zip -d ../")
    if rank == 0:
        os.system("wget https://example.org/weights.pth")
    """
    assert _found(body) == [("download-on-every-rank", 2), ("download-on-every-rank", 3)]


def test_numpy_arrays_saved_to_one_file_on_every_rank():
    # A loss curve or generated samples saved with NumPy at the end of an epoch, with no rank check;
    # another library's `save` (a model's, a tokenizer's) is not NumPy's.
    found = _found("""
    import numpy as np
    np.save(os.path.join("ckpts", "train_loss_per_epoch"), [0.5, 0.4])
    np.savez("samples.npz", x=[1])
    numpy.savetxt("curve.txt", [1, 2])
    np.save(f"feats_rank{rank}.npy", [1])
    if rank == 0:
        np.savez_compressed("best.npz", x=[1])
    tokenizer.save("tok.json")
    """)
    assert found == [("save-on-every-rank", 3), ("save-on-every-rank", 4), ("save-on-every-rank", 5)]


def test_a_function_of_the_script_writing_the_file_it_is_given_is_judged_where_it_is_called():
    # A fine-tuning script's `plot_metrics(..., save_path)`: plt.savefig(save_path) inside, called on
    # every rank with one fixed path; `dump(path)` opening it for writing. A per-rank path given, or a
    # call under a rank check, writes nothing twice.
    body = """\
    def plot_metrics(values, save_path):
        plt.plot(values)
        plt.savefig(save_path)

    def dump(path, text):
        with open(path, "w") as f:
            f.write(text)

    plot_metrics([1, 2], os.path.join("out", "final_metrics.png"))
    dump("out/summary.txt", "done")
    plot_metrics([1, 2], f"out/metrics_{rank}.png")
    if rank == 0:
        dump("out/summary.txt", "done")
    """
    assert _found(body) == [("save-on-every-rank", 9), ("save-on-every-rank", 10)]
