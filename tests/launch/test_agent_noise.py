"""torchrun's own lines (its log, its SignalException traceback, its ChildFailedError table) are told
apart from the workers' in real merged output, so a stopped run shows the user what matters only."""

from tests.conftest import FIXTURES

from gpurig.launch.runner import AgentNoise

LOGS = FIXTURES / "torchrun"


def _shown(lines):
    noise = AgentNoise()
    out = []
    for line in lines:
        out += noise.feed(line)
    return out + noise.flush()


def test_a_run_stopped_by_sigterm_keeps_the_workers_lines_and_drops_torchruns():
    lines = (LOGS / "stopped-by-sigterm.log").read_text().splitlines()
    shown = _shown(lines)
    text = "\n".join(shown)
    assert "Traceback" not in text and "SignalException" not in text and "death signal" not in text
    assert "torch/distributed" not in text
    # every line the workers wrote is still there, in order
    assert [ln for ln in lines if ln.startswith("GPURIG_")] == [ln for ln in shown if ln.startswith("GPURIG_")]
    assert any('"event": "stopping"' in ln for ln in shown) and any('"event": "checkpoint"' in ln for ln in shown)


def test_a_failed_run_drops_the_childfailederror_traceback_and_its_table():
    lines = (LOGS / "worker-bad-input.log").read_text().splitlines()
    shown = _shown(lines)
    text = "\n".join(shown)
    for gone in ("ChildFailedError", "Root Cause", "exitcode", "Failures:", "=====", "Traceback", "FAILED"):
        assert gone not in text, gone
    assert sum("gpurig: error: --resume" in ln for ln in shown) == 2  # the workers' own words stay


def test_a_workers_own_traceback_is_shown_whole_after_torchruns():
    worker = ["Traceback (most recent call last):", '  File "train.py", line 12, in <module>', "    step()",
              "ValueError: the batch is empty"]
    lines = ["before", *worker, "W1201 21:26:14.864000 4442 torch/distributed/elastic/multiprocessing/api.py:1028] "
             "Sending process 4483 closing signal SIGTERM", "after"]
    assert _shown(lines) == ["before", *worker, "after"]


def test_a_traceback_cut_off_at_the_end_is_shown_unless_it_is_torchruns():
    assert _shown(["Traceback (most recent call last):", '  File "train.py", line 3']) == [
        "Traceback (most recent call last):", '  File "train.py", line 3']
    assert _shown(["Traceback (most recent call last):",
                   '  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1142']) == []


def test_c10ds_reverse_lookup_warning_is_not_shown_but_a_workers_warning_is():
    lines = ["[W1202 14:46:10.182177095 socket.cpp:207] [c10d] The hostname of the client socket cannot be "
             "retrieved. err=-3",
             "[default0]:[W1202 14:46:14.854749177 socket.cpp:207] [c10d] The hostname of the client socket cannot "
             "be retrieved. err=-3",
             "[default0]:[W1202 14:46:15.1 socket.cpp:540] [c10d] The client socket has timed out after 60s"]
    assert _shown(lines) == lines[2:]
