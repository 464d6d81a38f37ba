"""Real TensorFlow runs on two logical CPU devices: accuracy, exact resume, SIGTERM, fit, multi-worker.

Each run is a real `run_tf_training` in its own process (as `gpurig train --framework tf` runs
it), so the test process itself never imports TensorFlow here. Runs are short; one reference run
is shared by the resume, fit and multi-worker tests.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from tfrun import _argv, _env, compare_checkpoints, train

from gpurig.launch.plan import free_port

pytestmark = [pytest.mark.tf, pytest.mark.slow]

# The shared workload: the seeds' MLP with dropout on digits, long enough to be interrupted.
REFERENCE = ["framework=tf", "train.steps=90", "train.log_every=5", "model.dropout=0.2",
             "optim.name=adam", "optim.lr=0.003"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf-reference")
    proc, summary = train(out, REFERENCE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, summary


def test_digits_demo_reaches_95_percent_with_the_shared_summary(tmp_path):
    proc, s = train(tmp_path, ["framework=tf"], preset="demo")  # the demo exactly as a user runs it
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert s["accuracy"] >= 0.95
    assert s["world_size"] == 2 and s["strategy"] == "mirrored" and s["device"] == "cpu"
    for key in ("samples_per_s", "samples_per_s_per_device", "step_time", "per_rank", "peak_memory_bytes",
                "memory_total_bytes", "batch_size_per_device", "final_loss", "accuracy", "choices", "verdicts"):
        assert key in s, key
    assert s["step_time"]["mean_s"] > 0 and 0 <= s["step_time"]["data_wait_fraction"] < 1
    assert {c["name"] for c in s["choices"]} >= {"device", "replicas", "precision", "memory_growth",
                                                   "cross_device_ops", "global_batch", "loop"}
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["accuracy"] == s["accuracy"]
    from gpurig.train.summary import summary_problems

    assert summary_problems(on_disk) == []  # the one schema the PyTorch trainer fills too
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert (tmp_path / "checkpoints" / "checkpoint").is_file()


def interrupt_then_resume(out, overrides: list[str], at: str):
    """Run, SIGTERM gpurig once the log shows `at` (as Slurm or Kubernetes would), then --resume."""
    proc = subprocess.Popen(_argv(out, overrides), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())
    log = out / "tf-worker0.log"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and at in log.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    stopped = json.loads(stdout.split("SUMMARY ", 1)[1])
    proc2, resumed = train(out, overrides, resume=True)
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    return stopped, resumed


def test_sigterm_saves_and_resume_is_exact(reference, tmp_path):
    _, ref = reference
    stopped, resumed = interrupt_then_resume(tmp_path, REFERENCE, "step 20/90")
    assert stopped["stopped"] is True and stopped["stop_reason"] == "SIGTERM"
    assert 20 <= stopped["steps"] < 90
    assert stopped["checkpoints"][-1].endswith(f"ckpt-{stopped['steps']}")
    assert resumed["resumed_from"].endswith(f"ckpt-{stopped['steps']}") and resumed["steps"] == 90
    # Bitwise: weights, optimizer moments and step counter, and the dropout RNG state.
    assert resumed["weights_sha256"] == ref["weights_sha256"]
    assert stopped["weights_sha256"] != ref["weights_sha256"]
    diffs = compare_checkpoints(ref["checkpoints"][-1], resumed["checkpoints"][-1])
    different = {k: d for k, (d, _) in diffs.items() if d != 0.0}
    assert not different, list(different.items())[:5]
    assert any(k.startswith("rng/") for k in diffs)


def test_fit_loop_interrupted_and_resumed_equals_the_custom_loop(reference, tmp_path):
    _, ref = reference
    fit_config = [*REFERENCE, "tf.loop=fit"]
    stopped, fit = interrupt_then_resume(tmp_path, fit_config, "step 30/90")
    assert stopped["stopped"] and 30 <= stopped["steps"] < 90 and fit["steps"] == 90
    assert {c["name"]: c["value"] for c in fit["choices"]}["loop"] == "fit"
    # Same samples per replica and the same loss over the global batch: model.fit, stopped and
    # resumed mid-epoch, ends where the uninterrupted custom loop ends.
    assert fit["weights_sha256"] == ref["weights_sha256"]
    assert stopped["weights_sha256"] != ref["weights_sha256"]
    assert fit["accuracy"] == ref["accuracy"]


def test_multi_worker_on_localhost_agrees_with_one_worker(reference, tmp_path):
    _, ref = reference
    hosts = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(_argv(tmp_path, REFERENCE, nnodes=2, node_rank=r, worker_hosts=hosts),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
             for r in (0, 1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    chief = json.loads(outs[0][0].split("SUMMARY ", 1)[1])
    assert chief["strategy"] == "multi_worker_mirrored" and chief["workers"] == 2 and chief["world_size"] == 2
    assert [r["rank"] for r in chief["per_rank"]] == [0, 1]
    assert (tmp_path / "worker-1.json").is_file()
    assert chief["steps"] == 90
    # 2 workers x 1 replica and 1 worker x 2 replicas see the same samples per step.
    diffs = compare_checkpoints(ref["checkpoints"][-1], chief["checkpoints"][-1])
    worst = {k: d / max(scale, 1e-12) for k, (d, scale) in diffs.items()}
    assert max(worst.values()) <= 1e-4, sorted(worst.items(), key=lambda kv: -kv[1])[:3]
    assert chief["final_loss"] == pytest.approx(ref["final_loss"], rel=1e-4)


def test_a_bad_config_found_in_the_worker_exits_2(tmp_path):
    # The global batch (2 x 1000) is larger than digits' training split: found after loading the data.
    proc, summary = train(tmp_path, ["framework=tf", "data.batch_size=1000"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert summary is None
    assert "data.batch_size" in proc.stderr and "1438 training samples" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_resuming_a_finished_run_keeps_its_summary(reference, tmp_path, run_cli):
    """`gpurig train --out RUN --resume auto` on a finished TensorFlow run: the run's own config
    (config.toml) says it is TensorFlow and complete; nothing trains and summary.json stays whole."""
    import shutil

    out, _ = reference
    run = tmp_path / "run"
    shutil.copytree(out, run)
    before = (run / "summary.json").read_bytes()
    proc = run_cli("train", "--device", "cpu", "--out", str(run), "--resume", "auto", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already complete at step 90" in proc.stdout
    assert (run / "summary.json").read_bytes() == before
