"""`import gpurig` from Python: `gpurig.fit()` trains your own functions' model and data through
torchrun as `gpurig train --model/--data` does, and `doctor()`, `verify()`, `check()` return the
commands' `--json` documents; all of it renders in Jupyter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import gpurig
from gpurig.errors import BadInput
from gpurig.train.fitting import overrides_of

CODE = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset


def build_model(num_classes=4):
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, num_classes))


def _blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn((n, 16), generator=g) * 0.3 + nn.functional.one_hot(y, 16).float() * 2
    return TensorDataset(x, y)


def build_train():
    return _blobs(256, 0)


def build_test():
    return _blobs(64, 1)
'''


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "fitcode.py").write_text(textwrap.dedent(CODE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("fitcode")
    yield module
    sys.modules.pop("fitcode", None)


def test_import_gpurig_offers_the_api_and_nothing_else_and_loads_nothing_heavy():
    assert [n for n in dir(gpurig) if not n.startswith("__")] == ["check", "doctor", "fit", "verify"]
    code = "import sys, gpurig; print(json.dumps(sorted(m for m in ('torch', 'tensorflow', 'rich', 'typer') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    with pytest.raises(AttributeError, match="no attribute 'train_model'"):
        gpurig.train_model  # noqa: B018


def test_fit_trains_your_functions_on_two_ranks_and_returns_the_summary(user_module, tmp_path):
    s = gpurig.fit(user_module.build_model, user_module.build_train, user_module.build_test, device="cpu", nproc=2,
                   out=tmp_path / "run", steps=40, batch_size=16, lr=0.05, quiet=True)
    assert s["world_size"] == 2 and s["steps"] == 40 and s["accuracy"] >= 0.9 and s["eval_samples"] == 64
    assert s["model"].endswith("fitcode.py:build_model") and (tmp_path / "run" / "summary.json").is_file()
    page = s._repr_html_()
    assert "samples/s" in page and "test accuracy" in page and "<details>" in page  # the choices, folded


def test_fit_is_the_same_as_gpurig_train_fit(user_module):
    from gpurig.train import fit

    assert fit is gpurig.fit


@pytest.mark.parametrize("model, words", [
    (lambda: None, "is a lambda, or defined in a notebook cell or inside a function"),
    ("object", "got a Sequential object; give the function that builds it"),
])
def test_fit_refuses_what_the_training_processes_cannot_build(user_module, model, words):
    if model == "object":
        model = user_module.build_model()
    with pytest.raises(BadInput, match=words):
        gpurig.fit(model, user_module.build_train, device="cpu")


def test_config_keywords_name_their_key_or_say_why_not():
    assert overrides_of({"steps": 5, "lr": 0.1, "optim__name": "adamw", "compile": False}, {"data.batch_size": 8}) == [
        "data.batch_size=8", "train.steps=5", "optim.lr=0.1", "optim.name=adamw", "train.compile=false"]
    with pytest.raises(BadInput, match="no config key is called 'stepz'"):
        overrides_of({"stepz": 5}, None)
    with pytest.raises(BadInput, match="'enabled' is in several tables; say which: checkpoint__enabled= or eval__enabled="):
        overrides_of({"enabled": False}, None)


def test_doctor_returns_the_json_document_and_renders(tmp_path):
    doc = gpurig.doctor()
    assert set(doc) == {"facts", "findings"} and isinstance(doc["findings"], list)
    assert doc._repr_html_().startswith("<table>")


def test_check_returns_the_json_document_and_writes_the_report(monkeypatch, tmp_path):
    from gpurig.suite import runner

    def fake(name):
        return lambda ctx: runner.StepResult(name, "passed", reason="fine", data={"facts": {}, "findings": []}
                                             if name == "doctor" else {})

    monkeypatch.setattr(runner, "STEPS", [(n, fake(n)) for n in ("doctor", "verify", "bench comm", "bench train")])
    doc = gpurig.check(device="cpu", nproc=2, out=tmp_path / "c")
    assert doc["passed"] is True and [s["status"] for s in doc["steps"]] == ["passed"] * 4
    assert (tmp_path / "c" / "check.json").is_file() and (tmp_path / "c" / "report.html").is_file()
    assert "<html" in doc._repr_html_()
    with pytest.raises(BadInput, match="holds an earlier check"):
        gpurig.check(device="cpu", nproc=2, out=tmp_path / "c")
