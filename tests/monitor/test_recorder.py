"""Recordings: one JSON line per sample, flushed as written, bounded memory, torn lines survived."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest

from gpurig.commands.monitor import MonitorOptions, run
from gpurig.monitor.recorder import Recorder, RecordingError, read_recording
from gpurig.monitor.sampler import FakeBackend, Sampler


class _Discard:
    """A console file that keeps nothing, so the test measures the monitor and not its output."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


def _quiet_console():
    from rich.console import Console

    return Console(file=_Discard(), width=200)


def test_each_sample_is_one_flushed_json_line(tmp_path):
    path = tmp_path / "rec.jsonl"
    sampler = Sampler(FakeBackend(gpus=2))
    rec = Recorder(path)
    for _ in range(3):
        rec.write(sampler.sample())
    # read while the recorder is still open: every line is already on disk
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    for line in lines:
        doc = json.loads(line)
        assert set(doc) == {"time", "gpus", "schema"}
        assert [g["index"] for g in doc["gpus"]] == [0, 1]
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.write(sampler.sample())


def test_recorder_never_creates_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        Recorder(tmp_path / "sub" / "rec.jsonl")
    assert not (tmp_path / "sub").exists()


def test_recorder_appends_to_an_existing_recording(tmp_path):
    path = tmp_path / "rec.jsonl"
    sampler = Sampler(FakeBackend(gpus=1))
    with Recorder(path) as rec:
        rec.write(sampler.sample())
    with Recorder(path) as rec:
        rec.write(sampler.sample())
    assert len(read_recording(path).samples) == 2


def test_recording_memory_does_not_grow_with_its_length(tmp_path):
    """Memory held after 50 samples and after 500 is the same: the loop keeps a small window only."""
    held: dict[int, int] = {}
    calls = {"n": 0}

    def sleep(_s):
        calls["n"] += 1
        if calls["n"] in (50, 500):
            gc.collect()
            held[calls["n"]] = tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        run(MonitorOptions(record=tmp_path / "rec.jsonl", count=501, interval=0.001),
            backend=FakeBackend(gpus=4), console=_quiet_console(), sleep=sleep)
    finally:
        tracemalloc.stop()
    # 450 more samples of 4 GPUs would hold ~1.5 MB if the loop kept them
    assert held[500] - held[50] < 100_000, held
    assert len((tmp_path / "rec.jsonl").read_text().splitlines()) == 501


def test_torn_last_line_is_skipped_with_a_note(tmp_path):
    path = tmp_path / "rec.jsonl"
    with Recorder(path) as rec:
        rec.write(Sampler(FakeBackend(gpus=1)).sample())
    with path.open("a") as f:
        f.write('{"time": 12, "gpus": [{"ind')  # killed while writing
    recording = read_recording(path)
    assert len(recording.samples) == 1
    assert recording.skipped and "line 2" in recording.skipped[0]


def test_bad_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "rec.jsonl"
    sampler = Sampler(FakeBackend(gpus=1))
    with Recorder(path) as rec:
        rec.write(sampler.sample())
    with path.open("a") as f:
        f.write("not json\n")
    with Recorder(path) as rec:
        rec.write(sampler.sample())
    with pytest.raises(RecordingError, match="line 2"):
        read_recording(path)


def test_missing_and_empty_recordings(tmp_path):
    with pytest.raises(RecordingError, match="no such file"):
        read_recording(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(RecordingError, match="no samples"):
        read_recording(tmp_path / "empty.jsonl")


def test_fields_keeps_only_what_the_plot_needs(tmp_path):
    from gpurig.monitor.recorder import PLOT_FIELDS

    path = tmp_path / "rec.jsonl"
    with Recorder(path) as rec:
        rec.write(Sampler(FakeBackend(gpus=2)).sample())
    gpu = read_recording(path, fields=PLOT_FIELDS).samples[0]["gpus"][0]
    assert "uuid" not in gpu and "pcie_rx_bytes_per_s" not in gpu
    assert gpu["utilization_pct"] is not None and gpu["index"] == 0
