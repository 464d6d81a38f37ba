"""What a user's results become when they resume, stop or mistype: nothing finished is rewritten,
nothing is lost, one clear message, no torchrun traceback. Real `gpurig train` runs on the CPU."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from tests.conftest import ROOT, assert_no_process_left, signal_after

from gpurig.train.torch import checkpoint as ckpt

pytestmark = pytest.mark.slow

SHORT = ["--device", "cpu", "--set", "train.steps=20", "--set", "checkpoint.every_steps=10", "--set",
         "checkpoint.keep=3", "--set", "eval.enabled=false"]
NOISE = ("Traceback", "ChildFailedError", "SignalException", "torch/distributed", "Root Cause")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run that reached its last step (20), with checkpoints at 10 and 20."""
    out = tmp_path_factory.mktemp("finished") / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-m", "gpurig", "train", "--out", str(out), *SHORT],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_the_summary_fits_the_one_schema(finished):
    from gpurig.train.summary import RunSummary, summary_problems

    summary = json.loads((finished / "summary.json").read_text())
    assert summary_problems(summary) == []  # the one schema the TensorFlow trainer fills too
    bad = dict(summary, throughput_typo=1)
    del bad["step_time"]["mean_s"]
    assert summary_problems(bad) == ["summary.throughput_typo: not a field of RunSummary",
                                     "summary.step_time.mean_s: missing"]
    assert RunSummary.__doc__


def _copy(run, tmp_path):
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def test_resuming_a_finished_run_trains_nothing_and_keeps_its_summary(finished, tmp_path, run_cli):
    run = _copy(finished, tmp_path)
    before = (run / "summary.json").read_bytes()
    assert json.loads(before)["accuracy"] is None or "final_loss" in json.loads(before)
    proc = run_cli("train", "--out", str(run), "--resume", "auto", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "already complete at step 20" in proc.stdout and "nothing to do" in proc.stdout
    assert (run / "summary.json").read_bytes() == before  # the finished run's figures, untouched
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step-000000010.pt", "step-000000020.pt"]
    # --json gives the finished summary, marked
    doc = json.loads(run_cli("train", "--out", str(run), "--resume", "auto", "--json", timeout=120).stdout)
    assert doc["already_complete"] is True and doc["steps"] == 20 and doc["final_loss"] is not None


def test_a_finished_run_whose_summary_is_gone_is_still_complete(finished, tmp_path, run_cli):
    run = _copy(finished, tmp_path)
    (run / "summary.json").unlink()
    proc = run_cli("train", "--out", str(run), "--resume", "auto", timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "already complete at step 20" in proc.stdout
    assert not (run / "summary.json").exists()  # no summary of a run that trained nothing
    assert ckpt.step_of(ckpt.list_checkpoints(run)[-1]) == 20


def test_raising_the_step_count_continues_the_finished_run(finished, tmp_path, run_cli):
    run = _copy(finished, tmp_path)
    proc = run_cli("train", "--out", str(run), "--resume", "auto", "--set", "train.steps=30", timeout=180)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["resumed_from"].endswith("step-000000020.pt")
    # The verdicts are judged before the worker writes the file: it is complete as written, and the
    # command does not write it again.
    from gpurig.diagnose.verdicts import judge_run

    again = judge_run({k: v for k, v in summary.items() if k != "verdicts"})
    assert summary["verdicts"] == json.loads(json.dumps(again, default=str))
    assert not (run / ".summary.json.tmp").exists()


def test_a_truncated_newest_checkpoint_is_refused_once_before_any_worker_and_loses_nothing(finished, tmp_path,
                                                                                            run_cli):
    run = _copy(finished, tmp_path)
    newest = ckpt.list_checkpoints(run)[-1]
    newest.write_bytes(newest.read_bytes()[:4000])
    kept = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    proc = run_cli("train", "--out", str(run), "--resume", "auto", "--set", "train.steps=30", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("gpurig: error:") == 1, proc.stderr
    assert "step-000000020.pt" in proc.stderr and "--resume-fallback" in proc.stderr and "truncated" in proc.stderr
    assert not any(word in proc.stdout + proc.stderr for word in NOISE), proc.stdout
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == kept  # summary.json too
    # and the fallback does what the message says
    proc = run_cli("train", "--out", str(run), "--resume", "auto", "--resume-fallback", "--set", "train.steps=30",
                   timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run / "summary.json").read_text())["resumed_from"].endswith("step-000000010.pt")


def test_a_checkpoint_holding_code_is_refused_without_pytorchs_unsafe_advice(finished, tmp_path, run_cli):
    import torch

    run = _copy(finished, tmp_path)
    buf = io.BytesIO()
    torch.save({"model": torch.nn.Linear(2, 2), "step": 1}, buf)  # a pickled module: code, not weights
    bad = tmp_path / "module.pt"
    bad.write_bytes(buf.getvalue())
    before = (run / "summary.json").read_bytes()
    proc = run_cli("train", "--out", str(run), "--resume", str(bad), "--set", "train.steps=30", timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("gpurig: error:") == 1, proc.stderr
    assert "module.pt" in proc.stderr and "weights_only=True" in proc.stderr
    assert "weights_only=False" not in proc.stderr and "set to `False`" not in proc.stderr
    assert not any(word in proc.stdout + proc.stderr for word in NOISE), proc.stdout + proc.stderr
    assert (run / "summary.json").read_bytes() == before


@pytest.mark.parametrize("args, flag, what", [
    (["--out", "{tmp}/r", "--resume", "{tmp}"], "--resume", "checkpoint file"),
    (["--config", "{tmp}"], "--config", "TOML file"),
])
def test_a_directory_given_as_a_file_is_named_as_one(run_cli, tmp_path, args, flag, what):
    proc = run_cli("train", "--device", "cpu", *[a.format(tmp=tmp_path) for a in args], timeout=60)
    assert proc.returncode == 2
    assert f"{flag} {tmp_path}: is a directory, not a {what}" in proc.stderr


def test_a_config_file_applies_over_the_demo_preset_and_says_so(run_cli, tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text("[train]\nepochs = 20\n")
    proc = run_cli("train", "--config", str(toml), "--set", "optim.lr=0.001", "--show-config", timeout=60)
    assert proc.returncode == 0, proc.stderr
    import tomllib

    assert proc.stdout.splitlines()[0] == f"# preset demo (the default), then {toml}, then --set optim.lr=0.001"
    cfg = tomllib.loads(proc.stdout)
    demo = tomllib.loads(run_cli("train", "--show-config", timeout=60).stdout)
    assert cfg["train"]["epochs"] == 20 and cfg["optim"]["lr"] == 0.001
    assert cfg["optim"]["name"] == demo["optim"]["name"] == "adamw"
    assert cfg["data"]["batch_size"] == demo["data"]["batch_size"]
    assert cfg["schedule"] == demo["schedule"]  # the demo's warm-up too
    with_preset = run_cli("train", "--preset", "resnet50", "--config", str(toml), "--show-config", timeout=60)
    assert with_preset.stdout.startswith(f"# preset resnet50, then {toml}")


def test_ctrl_c_stops_training_with_one_line_and_a_checkpoint_to_continue_from(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurig", "train", "--device", "cpu", "--out", str(out), "--set", "train.steps=1000000",
         "--set", "train.log_every=50", "--set", "eval.enabled=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    text = signal_after(proc, "step 100/", lambda: os.killpg(proc.pid, signal.SIGINT))  # a terminal's Ctrl-C
    rest = text[text.index("step 100/"):] if "step 100/" in text else text
    after = rest.strip().splitlines()
    assert proc.returncode == 130, text[-3000:]
    assert not any(word in rest for word in NOISE + ("NCCL_DEBUG",)), rest
    last = after[-1]
    assert last.startswith("stopped by Ctrl-C (SIGINT) at step") and f"gpurig train --out {out} --resume auto" in last
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] and summary["stop_reason"] == "Ctrl-C (SIGINT)"
    assert ckpt.step_of(ckpt.list_checkpoints(out)[-1]) == summary["steps"]
    assert_no_process_left(str(out))


def test_every_summary_field_is_documented():
    from gpurig.train.summary import field_docs

    doc = (ROOT / "docs" / "train.md").read_text(encoding="utf-8")
    assert [k for k, _ in field_docs() if f"| `{k}` |" not in doc] == []
