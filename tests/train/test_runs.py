"""Real multi-process training on the CPU (torchrun, gloo, 2 ranks, short runs)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from tests import datafiles

from gpurig.train.config import load_config
from gpurig.train.run import run_training
from gpurig.train.torch import checkpoint as ckpt

pytestmark = pytest.mark.slow

# The demo's model and data, 60 steps of 2 x 16 samples (44 per epoch), checkpoints every 30 (mid-epoch).
# Dropout off: two ranks draw different dropout masks than one process would.
BASE = ["eval.enabled=false", "train.steps=60", "checkpoint.every_steps=30", "checkpoint.keep=5", "model.dropout=0"]


def _params(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """2 ranks x 16 samples, indices recorded."""
    out = tmp_path_factory.mktemp("ddp")
    cfg = load_config(preset_name="demo", overrides=BASE + ["data.batch_size=16"])
    summary = run_training(cfg, device="cpu", nproc=2, out_dir=out, record_indices=True, timeout=240)
    return out, summary


def test_demo_reaches_95_percent_and_reports(run_cli, tmp_path):
    proc = run_cli("train", "--preset", "demo", "--device", "cpu", "--nproc", "2", "--out", str(tmp_path / "r"),
                   "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads(proc.stdout)
    assert s["accuracy"] >= 0.95
    assert s["eval_samples"] == 359  # every held-out sample once, none twice
    assert s["world_size"] == 2 and s["device"] == "cpu" and s["memory_total_bytes"] is None
    assert s["samples_per_s"] > 0 and s["samples_per_s_per_device"] == pytest.approx(s["samples_per_s"] / 2)
    assert {r["rank"] for r in s["per_rank"]} == {0, 1}
    assert s["gpu_clock"] is None and all(r["gpu_clock"] is None for r in s["per_rank"])  # no GPU: no clocks
    assert set(s["step_time"]) >= {"mean_s", "data_wait_fraction", "compute_fraction", "comm_exposed_fraction"}
    assert {c["name"] for c in s["choices"]} >= {"precision", "compile", "strategy", "data_placement"}
    assert (tmp_path / "r" / "summary.json").is_file() and list((tmp_path / "r" / "tensorboard").iterdir())
    assert ckpt.list_checkpoints(tmp_path / "r")


def test_every_rank_saw_a_disjoint_shard(ddp_run):
    out, _ = ddp_run
    rec = json.loads((out / "indices.json").read_text())
    for epoch in rec["0"]:
        r0, r1 = set(rec["0"][epoch]), set(rec["1"][epoch])
        assert len(r0) == len(rec["0"][epoch]) and not (r0 & r1)
    assert rec["0"]["0"] != rec["0"]["1"]  # a new shuffle in the second epoch


def test_ddp_on_two_ranks_equals_one_process_on_the_whole_batch(ddp_run, tmp_path):
    out, _ = ddp_run
    cfg = load_config(preset_name="demo", overrides=BASE + ["data.batch_size=32"])
    run_training(cfg, device="cpu", nproc=1, out_dir=tmp_path, timeout=240)
    two, one = _params(ckpt.checkpoint_path(out, 60)), _params(ckpt.checkpoint_path(tmp_path, 60))
    for k in two:
        torch.testing.assert_close(two[k], one[k], rtol=1e-4, atol=1e-5)


def test_compiled_ddp_with_compiled_autograd_equals_one_compiled_process(tmp_path):
    """train.compile_ddp=python_reducer: the backward, and DDP's all-reduces in it, run under compiled
    autograd; two ranks must still end where one process on the whole batch does."""
    steps = ["train.steps=20", "checkpoint.every_steps=20", "train.compile=on"]
    two = load_config(preset_name="demo", overrides=BASE + steps + ["data.batch_size=16",
                                                                   "train.compile_ddp=python_reducer"])
    lines: list[str] = []
    s = run_training(two, device="cpu", nproc=2, out_dir=tmp_path / "two", timeout=240,
                     on_event=lambda kind, p: lines.append(p["text"]) if kind == "line" else None)
    assert {c["name"]: c["value"] for c in s["choices"]}["compile_ddp"] == "python_reducer"
    # dynamo's notice that DDP's profiler label is dropped is not passed on to the user
    assert not [t for t in lines if "Profiler record function" in t], lines
    run_training(load_config(preset_name="demo", overrides=BASE + steps + ["data.batch_size=32"]),
                 device="cpu", nproc=1, out_dir=tmp_path / "one", timeout=240)
    a, b = _params(ckpt.checkpoint_path(tmp_path / "two", 20)), _params(ckpt.checkpoint_path(tmp_path / "one", 20))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


def test_stop_and_resume_equals_a_straight_run_and_a_corrupt_checkpoint_is_named(ddp_run, tmp_path):
    from gpurig.errors import BadInput

    out, _ = ddp_run
    # The run "stopped" at step 30: a run directory holding the step-30 checkpoint, and a newer one
    # that was torn by something outside gpurig.
    (tmp_path / "checkpoints").mkdir()
    shutil.copy(ckpt.checkpoint_path(out, 30), tmp_path / "checkpoints")
    torn = ckpt.checkpoint_path(tmp_path, 45)
    torn.write_bytes(ckpt.checkpoint_path(out, 30).read_bytes()[:5000])
    cfg = load_config(preset_name="demo", overrides=BASE + ["data.batch_size=16"])
    with pytest.raises(BadInput, match="step-000000045.pt is corrupt"):
        run_training(cfg, device="cpu", nproc=2, out_dir=tmp_path, resume="auto", timeout=240)
    summary = run_training(cfg, device="cpu", nproc=2, out_dir=tmp_path, resume="auto", resume_fallback=True,
                           timeout=240)
    assert summary["resumed_from"].endswith("step-000000030.pt") and summary["steps"] == 60
    straight, resumed = _params(ckpt.checkpoint_path(out, 60)), _params(ckpt.checkpoint_path(tmp_path, 60))
    for k in straight:
        torch.testing.assert_close(resumed[k], straight[k], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "args, key",
    [
        (["--set", "optim.lrr=0.1"], "optim.lrr"),
        (["--set", "data.batch_size=big"], "data.batch_size"),
        (["--set", "data.global_batch_size=100", "--nproc", "3"], "data.global_batch_size"),
        (["--set", "data.dataset=mnist", "--set", "data.path=no/such/dir"], "data.path"),
    ],
)
def test_bad_configs_exit_2_naming_the_key(run_cli, tmp_path, args, key):
    proc = run_cli("train", "--device", "cpu", "--out", str(tmp_path / "r"), *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert key in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing started, nothing written


def test_fsdp_follows_the_same_curve_as_ddp(ddp_run, tmp_path):
    out, ddp_summary = ddp_run
    cfg = load_config(preset_name="demo", overrides=BASE + ["data.batch_size=16", "train.strategy=fsdp"])
    summary = run_training(cfg, device="cpu", nproc=2, out_dir=tmp_path, timeout=240)
    assert summary["strategy"] == "fsdp"
    assert summary["final_loss"] == pytest.approx(ddp_summary["final_loss"], rel=1e-4)
    ddp, fsdp = _params(ckpt.checkpoint_path(out, 60)), _params(ckpt.checkpoint_path(tmp_path, 60))
    for k in ddp:
        torch.testing.assert_close(fsdp[k], ddp[k], rtol=1e-4, atol=1e-5)


def test_fsdp_trains_a_conv_net_in_channels_last(tmp_path):
    """fully_shard refuses non-contiguous parameters, which channels_last conv weights are: under FSDP
    only the input batches go NHWC (the default for conv nets on CUDA; asked for here on the CPU)."""
    over = BASE + ["data.batch_size=16", "model.name=cnn", "train.channels_last=on", "train.steps=20"]
    fsdp = run_training(load_config(preset_name="demo", overrides=over + ["train.strategy=fsdp"]), device="cpu",
                        nproc=2, out_dir=tmp_path / "f", timeout=240)
    choice = next(c for c in fsdp["choices"] if c["name"] == "channels_last")
    assert fsdp["strategy"] == "fsdp" and choice["value"] is True and "input batches only" in choice["reason"]
    ddp = run_training(load_config(preset_name="demo", overrides=over), device="cpu", nproc=2, out_dir=tmp_path / "d",
                       timeout=240)
    assert fsdp["final_loss"] == pytest.approx(ddp["final_loss"], rel=1e-3)


def test_sigterm_saves_a_checkpoint_and_leaves_no_process(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil
    from tests.conftest import ROOT

    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpurig", "train", "--preset", "demo", "--device", "cpu", "--out", str(out),
         "--set", "train.steps=1000000", "--set", "train.log_every=50", "--set", "eval.enabled=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            lines.append(line)
            if "step 100/" in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + rest
    assert proc.returncode == 143, text[-3000:]  # SIGTERM is a preemption: exit 143, requeue and resume
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] and summary["stop_reason"] == "SIGTERM"
    saved = ckpt.list_checkpoints(out)
    assert saved and int(saved[-1].name[5:14]) == summary["steps"] >= 100
    time.sleep(1)
    left = [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    assert not left, [p.info["cmdline"] for p in left]


@pytest.mark.parametrize(
    "command, args, flag",
    [
        (["train"], ["--out", "/proc/gpurig-test/run"], "--out"),
        (["bench", "train"], ["--out", "/proc/gpurig-test/bench"], "--out"),
        (["train"], ["--timeout", "0"], "--timeout"),
        (["bench", "train"], ["--timeout", "-5"], "--timeout"),
        (["train"], ["--max-time", "0"], "--max-time"),
        (["bench", "train"], ["--max-time", "-1"], "--max-time"),
    ],
)
def test_unwritable_out_and_bad_timeout_exit_2(run_cli, command, args, flag):
    proc = run_cli(*command, "--device", "cpu", *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr and "Traceback" not in proc.stderr


def test_batchnorm_statistics_synced_before_evaluation_only_change_nothing_rank_0_keeps(tmp_path):
    """ResNet-style nets: DDP skips the per-forward buffer broadcast (buffer_sync=eval). Rank 0's
    state, hence every checkpoint, is bit for bit what per-forward syncing gives, and the
    evaluation on two ranks scores exactly what the checkpointed model scores in one process."""
    import numpy as np

    from gpurig.train.torch import data as D
    from gpurig.train.torch.models import build_model

    root = tmp_path / "data" / "cifar-10-batches-py"
    root.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for name, n in [("data_batch_1", 64), ("test_batch", 30)]:
        datafiles.write_cifar_batch(root / name, rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
                            rng.integers(0, 10, n).tolist())
    common = ["data.dataset=cifar10", f"data.path={root.parent}", "model.name=cnn", "model.width=8",
              "data.batch_size=8", "train.steps=6", "model.dropout=0", "data.augment=off", "checkpoint.enabled=true", "eval.enabled=true"]
    runs = {}
    for mode in ("forward", "eval"):
        cfg = load_config(preset_name="resnet50-cifar", overrides=common + [f"train.buffer_sync={mode}"])
        runs[mode] = run_training(cfg, device="cpu", nproc=2, out_dir=tmp_path / mode, timeout=240)
        assert {c["name"]: c["value"] for c in runs[mode]["choices"]}["buffer_sync"] == mode
    auto = {c["name"]: c["value"] for c in runs["eval"]["choices"]}
    a = torch.load(ckpt.checkpoint_path(tmp_path / "forward", 6), weights_only=True)["model"]
    b = torch.load(ckpt.checkpoint_path(tmp_path / "eval", 6), weights_only=True)["model"]
    assert a.keys() == b.keys() and any("running_mean" in k for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # One process, the checkpoint's weights and statistics, the same 30 test images.
    cfg = load_config(preset_name="resnet50-cifar", overrides=common)
    arrays = D.load_arrays(cfg)
    model = build_model(cfg, tuple(arrays.x_test.shape[1:]), 10)
    model.load_state_dict(b)
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for x, y, mask in D.eval_batches(arrays, cfg, 0, 1, torch.device("cpu"), False):
            out = model(x).float()
            correct += int(((out.argmax(1) == y) & mask.bool()).sum())
            loss += float((torch.nn.functional.cross_entropy(out, y, reduction="none") * mask).sum())
    assert runs["eval"]["eval_samples"] == 30 and auto["buffer_sync"] == "eval"
    assert runs["eval"]["accuracy"] == pytest.approx(correct / 30)
    assert runs["eval"]["eval_loss"] == pytest.approx(loss / 30, rel=1e-6)  # the statistics, too


def test_dynamos_profiler_notice_is_dropped_and_other_warnings_pass(caplog):
    """A compiled DDP module makes dynamo warn once per rank that DDP's profiler label is ignored;
    the run's printout must not carry it, and must keep every other warning of that logger."""
    import logging

    from gpurig.train.torch.base import quiet_known_torch_notices

    quiet_known_torch_notices()
    quiet_known_torch_notices()  # idempotent: one filter
    log = logging.getLogger("torch._dynamo.variables.ctx_manager")
    assert len(log.filters) == 1
    with caplog.at_level(logging.WARNING, logger=log.name):
        log.warning("Profiler record function %s will be ignored", "record_function")
        log.warning("graph break: something real")
    assert [r.getMessage() for r in caplog.records] == ["graph break: something real"]
