"""Your own model, data and loss through `gpurig train --model/--data/--loss`: every bad entry is
refused before any worker starts, naming the flag and the user's own line; good ones train on two
gloo ranks exactly as one process on the whole batch does."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from gpurig.errors import BadInput
from gpurig.train.config import load_config
from gpurig.train.run import run_training
from gpurig.train.torch import checkpoint as ckpt
from gpurig.train.torch.entries import probe, probe_entries

MODEL = '''
import torch
from torch import nn


def build(width=8, num_classes=10):
    return nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(width * 4, num_classes))


def not_a_module():
    return "a string"


def boom():
    return helper()


def helper():
    raise ValueError("the user's own mistake")


class OwnLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = build()

    def forward(self, x, labels):
        return nn.functional.cross_entropy(self.net(x), labels)


def own_loss():
    return OwnLoss()


def flat():
    return nn.Linear(10, 3)
'''

DATA = '''
import torch
from torch.utils.data import Dataset


class Blobs(Dataset):
    """Images of one bright quadrant; the label is the quadrant (4 classes)."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.x = torch.rand((n, 1, 8, 8), generator=g) * 0.2
        for i, q in enumerate(self.y.tolist()):
            r, c = divmod(q, 2)
            self.x[i, 0, r * 4:(r + 1) * 4, c * 4:(c + 1) * 4] += 1.0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def build(seed=0):
    return Blobs(256, seed), Blobs(64, seed + 1)


def train_only():
    return Blobs(128, 0)


def not_a_dataset():
    return 42
'''


@pytest.fixture()
def user_code(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "mydata.py").write_text(textwrap.dedent(DATA))
    (tmp_path / "broken.py").write_text("import torch\nx = 1 / 0\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _cfg(*overrides: str):
    return load_config(overrides=list(overrides))


def test_a_good_model_and_dataset_are_probed(user_code):
    info = probe(_cfg("model.entry=mymodels.py:build", "data.entry=mydata.py:build"))
    assert info["samples"] == 256 and info["test_samples"] == 64 and info["sample_shape"] == [1, 8, 8]
    assert info["num_classes"] == 4 and info["output_shape"] == [4]  # num_classes given to the model by name
    assert info["has_conv2d"] and not info["returns_loss"]


def test_the_probe_finds_data_dependent_control_flow_that_compile_would_break_on(user_code, monkeypatch):
    (user_code / "branchy.py").write_text(textwrap.dedent('''
        import torch

        class Branchy(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))

            def forward(self, x):
                if x.mean() > 0.5:  # a Python branch on the data
                    return self.net(x)
                return self.net(-x)

        def build():
            return Branchy()
        '''))
    monkeypatch.setenv("GPURIG_PROBE_COMPILE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(user_code / "inductor"))  # dynamo sets it when unset
    info = probe(_cfg("model.entry=branchy.py:build", "data.entry=mydata.py:build"))
    assert info["compile"]["graph_breaks"] >= 1 and "branchy.py:" in info["compile"]["break_reason"]
    from gpurig.train.torch.choices import choose_compile

    cfg = _cfg("model.entry=branchy.py:build", "train.steps=5000")
    off = choose_compile(cfg, torch.device("cuda"), 5000, info["compile"])
    assert off.value is False and "control flow" in off.reason
    clean = probe(_cfg("model.entry=mymodels.py:build", "data.entry=mydata.py:build"))
    assert clean["compile"]["graph_breaks"] == 0
    assert choose_compile(cfg, torch.device("cuda"), 5000, clean["compile"]).value is True  # not the mlp rule


def test_a_model_that_takes_the_labels_uses_its_own_loss(user_code):
    info = probe(_cfg("model.entry=mymodels.py:own_loss", "data.entry=mydata.py:build"))
    assert info["returns_loss"]


@pytest.mark.parametrize("overrides, words", [
    (["model.entry=nosuch.py:build"], ["--model (model.entry)", "nosuch.py: no such file"]),
    (["model.entry=mymodels.py:bulid"], ["mymodels.py has no 'bulid'", "build", "own_loss"]),
    (["model.entry=mymodels.py"], ["must be FILE.py:function"]),
    (["model.entry=mymodels.py:not_a_module"], ["returned a str, not a torch.nn.Module"]),
    (["model.entry=mymodels.py:boom"], ["boom() raised", "mymodels.py", "in helper", "the user's own mistake"]),
    (["model.entry=broken.py:build"], ["importing broken.py raised", "ZeroDivisionError"]),
    (["data.entry=mydata.py:not_a_dataset"], ["--data (data.entry)", "returned a int, not a map-style Dataset"]),
    (["model.entry=mymodels.py:flat", "data.entry=mydata.py:build"],
     ["the model cannot take a sample", "(1, 8, 8)"]),
    (["train.loss_entry=mymodels.py:nothing"], ["--loss (train.loss_entry)", "has no 'nothing'"]),
])
def test_every_bad_entry_is_refused_naming_the_flag(user_code, overrides, words):
    with pytest.raises(BadInput) as err:
        probe(_cfg(*overrides))
    for w in words:
        assert w in str(err.value), str(err.value)


def test_the_probe_runs_in_a_child_that_sees_no_gpu(user_code):
    info = probe_entries(_cfg("model.entry=mymodels.py:build", "data.entry=mydata.py:build"))
    assert info["num_classes"] == 4
    with pytest.raises(BadInput, match="boom\\(\\) raised"):
        probe_entries(_cfg("model.entry=mymodels.py:boom"))


def test_a_loss_function_is_pytorch_only():
    with pytest.raises(BadInput, match="train.loss_entry"):
        load_config(overrides=["framework=tf", "train.loss_entry=m.py:loss"])
    assert load_config(overrides=["framework=tf", "model.entry=m.py:build"]).model.entry == "m.py:build"


def test_a_bad_entry_exits_2_from_the_cli_before_any_worker(run_cli, user_code):
    proc = run_cli("train", "--model", "mymodels.py:bulid", "--data", "mydata.py:build", "--device", "cpu",
                   "--out", str(user_code / "r"), timeout=120)
    assert proc.returncode == 2 and "--model (model.entry)" in proc.stderr and "Traceback" not in proc.stderr
    assert not (user_code / "r").exists()


BASE = ["eval.enabled=false", "train.steps=20", "checkpoint.every_steps=20", "model.entry=mymodels.py:build",
        "data.entry=mydata.py:build", "optim.lr=0.05"]


def test_user_entries_train_on_two_ranks_as_one_process_on_the_whole_batch(user_code):
    two = run_training(_cfg(*BASE, "data.batch_size=16"), device="cpu", nproc=2, out_dir=user_code / "two",
                       timeout=240)
    choices = {c["name"]: c["value"] for c in two["choices"]}
    assert choices["model"] == f"{user_code / 'mymodels.py'}:build" and choices["data_placement"] == "memory"
    assert two["world_size"] == 2 and two["steps"] == 20 and two["final_loss"] < 1.4
    run_training(_cfg(*BASE, "data.batch_size=32"), device="cpu", nproc=1, out_dir=user_code / "one", timeout=240)
    a = torch.load(ckpt.checkpoint_path(user_code / "two", 20), weights_only=True)["model"]
    b = torch.load(ckpt.checkpoint_path(user_code / "one", 20), weights_only=True)["model"]
    moved = max((a[k] - _initial(user_code)[k]).abs().max().item() for k in a)
    assert moved > 0.05  # training moved the weights far more than the tolerance below
    for k in a:
        # Convolutions sum in another order for 16 and 32 samples: 20 steps drift by ~1e-4, a wrong
        # shard by ~1e-2.
        torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-3)


def _initial(root):
    import sys

    sys.path.insert(0, str(root))
    try:
        import mymodels

        cfg = _cfg(*BASE)
        torch.manual_seed(cfg.seed)  # as the trainer does, with the [model] table's width given by name
        return mymodels.build(width=cfg.model.width, num_classes=4).state_dict()
    finally:
        sys.path.remove(str(root))


def test_a_model_with_its_own_loss_trains_without_an_accuracy(run_cli, user_code):
    proc = run_cli("train", "--model", "mymodels.py:own_loss", "--data", "mydata.py:build", "--device", "cpu",
                   "--nproc", "2", "--out", str(user_code / "r"), "--set", "train.epochs=4", "--set",
                   "data.batch_size=16", "--set", "optim.lr=0.05", "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads(proc.stdout)
    assert s["final_loss"] < 1.0 and s["accuracy"] is None  # its forward gives a loss, not class scores


def test_a_user_loss_and_a_train_only_dataset(user_code):
    (user_code / "myloss.py").write_text("import torch\n\ndef smooth(out, y):\n"
                                         "    return torch.nn.functional.cross_entropy(out, y, label_smoothing=0.1)\n")
    s = run_training(_cfg("model.entry=mymodels.py:build", "data.entry=mydata.py:train_only",
                          "train.loss_entry=myloss.py:smooth", "train.steps=10", "data.batch_size=16"),
                     device="cpu", nproc=2, out_dir=user_code / "r", timeout=240)
    assert s["steps"] == 10 and s["accuracy"] is None
    assert {c["name"]: c["value"] for c in s["choices"]}["loss"].endswith("/myloss.py:smooth")


def test_the_example_of_docs_train_md_runs_as_documented(run_cli, tmp_path):
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "train.md").read_text()
    section = doc.split("## Train your own model", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    command = re.findall(r"```\n(gpurig train --model .*?)\n```", section, re.S)[0].split()
    (tmp_path / "myproject.py").write_text(code)
    proc = run_cli(*command[1:], "--set", "train.epochs=1", "--device", "cpu", "--out", str(tmp_path / "r"),
                   "--json", timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads(proc.stdout)
    assert s["accuracy"] >= 0.95 and s["eval_samples"] == 1024 and s["model"].endswith("myproject.py:build_model")


def test_a_run_of_your_own_model_resumes_exactly(user_code):
    import shutil

    base = [*BASE, "data.batch_size=16", "checkpoint.every_steps=10", "checkpoint.keep=5"]
    run_training(_cfg(*base), device="cpu", nproc=2, out_dir=user_code / "straight", timeout=240)
    (user_code / "resumed" / "checkpoints").mkdir(parents=True)
    shutil.copy(ckpt.checkpoint_path(user_code / "straight", 10), user_code / "resumed" / "checkpoints")
    s = run_training(_cfg(*base), device="cpu", nproc=2, out_dir=user_code / "resumed", resume="auto", timeout=240)
    assert s["resumed_from"].endswith("step-000000010.pt") and s["steps"] == 20
    a = torch.load(ckpt.checkpoint_path(user_code / "straight", 20), weights_only=True)["model"]
    b = torch.load(ckpt.checkpoint_path(user_code / "resumed", 20), weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)


def test_a_model_inside_a_package_keeps_its_relative_imports(user_code):
    pkg = user_code / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text("from torch import nn\n\ndef head(n):\n    return nn.Linear(64, n)\n")
    (pkg / "models.py").write_text("from torch import nn\n\nfrom .layers import head\n\n\n"
                                   "def build(num_classes):\n    return nn.Sequential(nn.Flatten(), head(num_classes))\n")
    for entry in ("mypkg/models.py:build", "mypkg.models:build"):
        info = probe(_cfg(f"model.entry={entry}", "data.entry=mydata.py:build"))
        assert info["output_shape"] == [4] and not info["has_conv2d"]


def test_the_model_is_sized_by_every_target_not_the_first_ones(user_code):
    (user_code / "late.py").write_text(textwrap.dedent('''
        import torch
        from torch.utils.data import TensorDataset


        def build():
            y = torch.zeros(5000, dtype=torch.long)
            y[-8:] = 9  # a class that only appears after the probe's first 4096 samples
            return TensorDataset(torch.randn(5000, 1, 8, 8), y)
        '''))
    s = run_training(_cfg("model.entry=mymodels.py:build", "data.entry=late.py:build", "train.steps=3",
                          "data.batch_size=32"), device="cpu", nproc=1, out_dir=user_code / "r", timeout=240)
    assert s["steps"] == 3
    state = torch.load(ckpt.checkpoint_path(user_code / "r", 3), weights_only=True)["model"]
    assert state["4.weight"].shape[0] == 10  # the last Linear scores 10 classes


def test_a_dataset_too_big_to_hold_is_streamed_and_trains_the_same(user_code, monkeypatch):
    held = run_training(_cfg(*BASE, "data.batch_size=16", "eval.enabled=true"), device="cpu", nproc=2,
                        out_dir=user_code / "held", timeout=240)
    monkeypatch.setenv("GPURIG_HOLD_LIMIT_BYTES", "20000")  # the 256 training samples (67 KB) no longer fit
    streamed = run_training(_cfg(*BASE, "data.batch_size=16", "eval.enabled=true", "data.workers=1"), device="cpu",
                            nproc=2, out_dir=user_code / "streamed", timeout=240)
    choices = {c["name"]: c for c in streamed["choices"]}
    assert choices["data_placement"]["value"] == "loader" and "DataLoader" in choices["data_placement"]["reason"]
    assert streamed["eval_samples"] == 64 == held["eval_samples"]  # the test set still fits: evaluated
    a = torch.load(ckpt.checkpoint_path(user_code / "held", 20), weights_only=True)["model"]
    b = torch.load(ckpt.checkpoint_path(user_code / "streamed", 20), weights_only=True)["model"]
    for k in a:  # the same shards, the same order: the same weights
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)
