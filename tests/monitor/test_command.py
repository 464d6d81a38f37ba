"""`gpurig monitor` end to end: no-GPU paths through the real entry point, the view on scripted GPUs."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gpurig.commands.monitor import MonitorOptions, run
from gpurig.errors import BadInput
from gpurig.monitor.recorder import Recorder, read_recording
from gpurig.monitor.sampler import FakeBackend, MonitorUnavailable, NvmlBackend, Sampler

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "monitor"


def _nvml_has_gpu() -> bool:
    try:
        with Sampler(NvmlBackend()):
            return True
    except MonitorUnavailable:
        return False


needs_no_gpu = pytest.mark.skipif(_nvml_has_gpu(), reason="this machine has a GPU; the no-GPU path cannot be seen")


def _console(terminal: bool = False) -> Console:
    return Console(file=io.StringIO(), width=220, force_terminal=terminal, color_system=None)


@needs_no_gpu
def test_once_without_a_gpu_prints_one_line_and_exits_0(run_cli):
    res = run_cli("monitor", "--once")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpurig monitor: no GPU to watch:")


@needs_no_gpu
def test_json_without_a_gpu_is_one_document(run_cli):
    res = run_cli("monitor", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["available"] is False and doc["reason"] and doc["sample"] is None


@needs_no_gpu
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_live_view_without_a_gpu_waits_and_a_signal_ends_it_cleanly(sig):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "gpurig", "monitor", "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stdout.readline()  # printed before it starts waiting
        assert first.startswith("gpurig monitor: no GPU to watch:")
        assert proc.poll() is None, "it should wait for a GPU, not exit"
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_plot_writes_a_png_and_judges_the_recording(run_cli, tmp_path):
    rec = tmp_path / "run.jsonl"
    sampler = Sampler(FakeBackend(gpus=2))
    with Recorder(rec) as r:
        for _ in range(5):
            r.write(sampler.sample())
    (tmp_path / "plots").mkdir()  # gpurig never creates the folder of a file it writes
    out = tmp_path / "plots" / "run.png"
    res = run_cli("monitor", "--plot", str(rec), "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["plot"] == str(out) and doc["samples"] == 5 and doc["gpus"] == [0, 1]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_defaults_to_the_recordings_name(tmp_path):
    rec = tmp_path / "run.jsonl"
    with Recorder(rec) as r:
        r.write(Sampler(FakeBackend(gpus=1)).sample())
    assert run(MonitorOptions(plot=rec), console=_console()) == 0
    assert (tmp_path / "run.png").stat().st_size > 1000


@pytest.mark.parametrize("args, flag", [
    (["--interval", "0"], "--interval"),
    (["--count", "-1"], "--count"),
    (["--out", "x.png"], "--out"),
    (["--plot", "missing.jsonl"], "--plot"),
    (["--plot", "x.jsonl", "--once"], "--plot"),
    (["--json", "--record", "x.jsonl"], "--json"),
])
def test_bad_usage_exits_2_naming_the_flag(run_cli, tmp_path, args, flag):
    res = run_cli("monitor", *args, cwd=tmp_path)
    assert res.returncode == 2
    assert flag in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_plot_of_a_file_that_is_not_a_recording_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"time": 1, "gpus": []}\nhello\n{"time": 2, "gpus": []}\n')
    with pytest.raises(BadInput, match="line 2"):
        run(MonitorOptions(plot=bad), console=_console())


def test_once_on_scripted_gpus_shows_every_column_and_rates():
    console = _console()
    assert run(MonitorOptions(once=True), backend=FakeBackend(gpus=2), console=console, sleep=lambda s: None) == 0
    text = console.file.getvalue()
    for word in ("util", "memory GiB", "power W", "temp", "SM MHz", "throttle", "PCIe", "NVLink", "processes"):
        assert word in text
    assert "80/80 GB/s" in text  # NVLink rate from two readings
    assert "python[1000]" in text


def test_json_snapshot_on_scripted_gpus(capsys):
    assert run(MonitorOptions(json_out=True), backend=FakeBackend(gpus=2), sleep=lambda s: None) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["available"] is True
    assert [g["index"] for g in doc["sample"]["gpus"]] == [0, 1]
    assert doc["sample"]["gpus"][0]["nvlink_tx_bytes_per_s"] > 0


def _one_idle(tick, index):
    busy = index == 0
    return {"name": "Fake", "utilization_pct": 97.0 if busy else 0.0, "sm_clock_mhz": 1980 if busy else 345,
            "memory_used_bytes": 2**30, "memory_total_bytes": 80 * 2**30, "throttle_reasons": [] if busy else ["gpu_idle"]}


def test_live_view_highlights_an_idle_gpu_and_says_the_fix(tmp_path):
    console = _console(terminal=True)
    rec = tmp_path / "live.jsonl"
    code = run(MonitorOptions(count=3, interval=0.01, record=rec), backend=FakeBackend(gpus=2, profile=_one_idle),
               console=console, sleep=lambda s: None)
    assert code == 0
    text = console.file.getvalue()
    assert "GPU 1 idle while GPU 0 work" in text
    assert "fix:" in text and "nproc" in text
    assert "recorded 3 samples" in text
    assert len(rec.read_text().splitlines()) == 3


def test_ctrl_c_in_the_loop_keeps_what_was_recorded(tmp_path):
    rec = tmp_path / "r.jsonl"
    calls = {"n": 0}

    def sleep(_s):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt

    code = run(MonitorOptions(record=rec), backend=FakeBackend(gpus=1), console=_console(), sleep=sleep)
    assert code == 0
    assert len(rec.read_text().splitlines()) == 4


@pytest.mark.gpu
def test_once_and_json_on_real_gpus(run_cli):
    res = run_cli("monitor", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["available"] is True and doc["sample"]["gpus"]
    for g in doc["sample"]["gpus"]:
        assert g["error"] is None and g["memory_total_bytes"] > 0
        assert g["pcie_tx_bytes_per_s"] is not None  # two readings give a rate
    res = run_cli("monitor", "--once")
    assert res.returncode == 0 and "GPU  util" in res.stdout


def test_record_to_a_path_that_cannot_be_written_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="--record"):
        run(MonitorOptions(record=tmp_path, count=1), backend=FakeBackend(gpus=1), console=_console(),
            sleep=lambda s: None)


@needs_no_gpu
@pytest.mark.parametrize("extra", [[], ["--record", "r.jsonl"]], ids=["count", "record-count"])
def test_count_without_a_gpu_ends_after_the_one_line(run_cli, tmp_path, extra):
    res = run_cli("monitor", "--count", "3", *extra, cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith("gpurig monitor: no GPU to watch:")


def test_record_to_an_unwritable_path_exits_2_naming_record(run_cli, tmp_path):
    res = run_cli("monitor", "--record", str(tmp_path), "--count", "1", timeout=60)
    assert res.returncode == 2 and "--record" in res.stderr and "Traceback" not in res.stderr


def test_record_into_a_missing_folder_exits_2_and_creates_nothing(run_cli, tmp_path):
    res = run_cli("monitor", "--record", str(tmp_path / "no" / "x.jsonl"), "--count", "1", timeout=60)
    assert res.returncode == 2
    assert f"--record {tmp_path / 'no' / 'x.jsonl'}: the folder {tmp_path / 'no'} does not exist" in res.stderr
    assert not (tmp_path / "no").exists()


def test_record_extends_an_existing_recording(tmp_path):
    rec = tmp_path / "run.jsonl"
    for _ in range(2):
        assert run(MonitorOptions(record=rec, count=3, interval=0.01), backend=FakeBackend(gpus=2),
                   console=_console(), sleep=lambda s: None) == 0
    assert len(read_recording(rec).samples) == 6


def test_record_never_appends_to_a_file_that_is_not_a_recording(run_cli, tmp_path):
    mine = tmp_path / "train.py"
    mine.write_text("print('my training script')\n")
    res = run_cli("monitor", "--record", str(mine), "--count", "1", timeout=60)
    assert res.returncode == 2
    assert f"--record {mine}: the file exists and is not a monitor recording" in res.stderr
    assert mine.read_text() == "print('my training script')\n"


def test_extending_a_recording_with_a_torn_last_line_keeps_it_readable(tmp_path):
    # A monitor killed (SIGKILL, a crash) in the middle of a line leaves it torn; samples appended
    # after it would leave that line in the middle of the file, and the recording unreadable.
    rec = tmp_path / "run.jsonl"
    with Recorder(rec) as r:
        for _ in range(3):
            r.write(Sampler(FakeBackend(gpus=1)).sample())
    whole = rec.read_text()
    rec.write_text(whole + whole.splitlines()[0][:40])
    console = _console()
    assert run(MonitorOptions(record=rec, count=2, interval=0.01), backend=FakeBackend(gpus=1),
               console=console, sleep=lambda s: None) == 0
    back = read_recording(rec)
    assert len(back.samples) == 5 and back.skipped == []
    assert rec.read_text().startswith(whole)  # every whole sample kept, in order
    assert "its last line was cut off (40 bytes" in console.file.getvalue()


def test_plot_out_follows_the_one_rule(run_cli, tmp_path):
    rec = tmp_path / "run.jsonl"
    with Recorder(rec) as r:
        for _ in range(3):
            r.write(Sampler(FakeBackend(gpus=1)).sample())
    missing = run_cli("monitor", "--plot", str(rec), "--out", str(tmp_path / "no" / "run.png"))
    assert missing.returncode == 2 and "--out" in missing.stderr and "does not exist" in missing.stderr
    assert not (tmp_path / "no").exists()
    png = tmp_path / "run.png"
    png.write_bytes(b"my own picture")
    again = run_cli("monitor", "--plot", str(rec))  # the default PNG, next to the recording
    assert again.returncode == 2
    assert f"--out {png}: the file exists; add --force to replace it" in again.stderr
    assert png.read_bytes() == b"my own picture"
    forced = run_cli("monitor", "--plot", str(rec), "--force")
    assert forced.returncode == 0, forced.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    itself = run_cli("monitor", "--plot", str(rec), "--out", str(rec), "--force")
    assert itself.returncode == 2 and "is the recording --plot reads" in itself.stderr
    assert len(read_recording(rec).samples) == 3
