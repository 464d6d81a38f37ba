"""Which rank caused a failed run: recorded run directories and flight recorder dumps, no processes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from gpurig.diagnose.run_diagnosis import analyze_traces, exit_code_for, explain_run, user_frame
from gpurig.launch.collect import (
    RankLog,
    RunRecord,
    TableFailure,
    TraceEntry,
    collect_run,
    parse_failure_table,
    read_trace_dump,
)

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_failure_table_from_real_torchrun_output():
    failures = parse_failure_table((LOGS / "torchrun_rank1_raises_gloo.log").read_text())
    assert [(f.rank, f.exitcode, f.signal, f.root_cause) for f in failures] == [(0, -15, "SIGTERM", False), (1, 1, None, True)]
    assert failures[1].error_file.endswith("attempt_0/1/error.json")


@pytest.mark.parametrize("worker, shell", [(1, 1), (-9, 137), (-6, 134), (-7, 135), (None, 1), (0, 1)])
def test_exit_code_for(worker, shell):
    assert exit_code_for(worker) == shell


def _record(**kw) -> RunRecord:
    return RunRecord(run_dir="r", nproc_per_node=2, nnodes=1, world_size=2, **kw)


def test_first_error_by_time_wins_over_torchruns_order():
    # Both ranks raised; torchrun happened to list rank 0 first, but rank 1's error came 2 s earlier.
    record = _record(
        failures=[TableFailure(rank=0, local_rank=0, exitcode=1, root_cause=True), TableFailure(rank=1, local_rank=1, exitcode=1)],
        ranks={
            0: RankLog(0, 0, text="RuntimeError: CUDA error: invalid device ordinal", error_time=102.0),
            1: RankLog(1, 1, text="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has", error_time=100.0),
        },
    )
    diag = explain_run(record, returncode=1)
    assert diag.root_rank == 1 and diag.matches[0].id == "cuda-out-of-memory"


def test_consequence_is_not_the_root_cause():
    # Rank 0 errored first in time, but only with "connection closed by peer": rank 1 (killed) is the cause.
    record = _record(
        failures=[TableFailure(rank=0, local_rank=0, exitcode=1, root_cause=True), TableFailure(rank=1, local_rank=1, exitcode=-9, signal="SIGKILL")],
        ranks={0: RankLog(0, 0, text="RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:1", error_time=1.0), 1: RankLog(1, 1, text="")},
    )
    diag = explain_run(record, returncode=1)
    assert diag.root_rank == 1 and diag.exit_code == 137 and diag.signal == "SIGKILL"
    assert diag.matches[0].id == "host-out-of-memory-killed"
    assert diag.ranks == {"0": "secondary", "1": "primary"}


def test_where_is_the_users_line_not_a_dist_packages_or_stdlib_frame():
    # NGC containers and Debian's Python keep packages in dist-packages; a conda Python's standard
    # library is under lib/python3.X: neither is where the user's code was.
    trace = """Traceback (most recent call last):
  File "/workspace/train.py", line 88, in <module>
    main()
  File "/workspace/train.py", line 42, in main
    trainer.train()
  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 1539, in train
    return inner_training_loop(
  File "/opt/conda/lib/python3.11/concurrent/futures/_base.py", line 456, in result
    return self.__get_result()
RuntimeError: DataLoader worker (pid 4121) is killed by signal: Bus error.
"""
    assert user_frame(trace) == "train.py:42 trainer.train()"
    windows = trace.replace("/usr/local/lib/python3.10/dist-packages/", "C:\\Python311\\Lib\\site-packages\\")
    windows = windows.replace("/workspace/", "D:\\work\\")
    assert user_frame(windows) == "train.py:42 trainer.train()"


def _dump(path: Path, entries: list[tuple[int, str, str]], pg=("0", "default_pg")) -> None:
    data = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "entries": [
            {
                "record_id": i, "pg_id": 0, "process_group": pg, "collective_seq_id": seq, "p2p_seq_id": 0,
                "op_id": seq, "profiling_name": op, "time_created_ns": 1000 + i, "input_sizes": [[1024]],
                "output_sizes": [[1024]], "state": state, "is_p2p": False, "retired": state == "completed",
                "timeout_ms": 20000, "frames": [{"name": "all_reduce", "filename": "train.py", "line": 17}],
            }
            for i, (seq, op, state) in enumerate(entries)
        ],
    }
    path.write_bytes(pickle.dumps(data))


def test_flight_recorder_names_the_collective_and_the_missing_ranks(tmp_path):
    done = [(1, "nccl:all_reduce", "completed"), (2, "nccl:broadcast", "completed")]
    for rank in (0, 2):
        _dump(tmp_path / f"nccl_trace_rank_{rank}", done + [(3, "nccl:all_reduce", "started")])
    _dump(tmp_path / "nccl_trace_rank_1", done)  # rank 1 never reached collective 3
    traces = {r: read_trace_dump(tmp_path / f"nccl_trace_rank_{r}") for r in (0, 1, 2)}
    merged = analyze_traces(traces, world_size=4)
    assert merged["collective"] == "all_reduce" and merged["sequence"] == 3
    assert merged["arrived_ranks"] == [0, 2]
    assert merged["missing_ranks"] == [1, 3]  # rank 3 left no dump at all
    assert merged["no_dump_ranks"] == [3]


def test_flight_recorder_everyone_stuck_is_not_a_missing_rank():
    traces = {r: [TraceEntry(pg="0", seq=1, op="nccl:all_reduce", state="started")] for r in (0, 1)}
    merged = analyze_traces(traces, world_size=2)
    assert merged["missing_ranks"] == [] and merged["arrived_ranks"] == [0, 1]


class Evil:
    pass


def test_dump_with_foreign_objects_is_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"entries": [Evil()]}))
    with pytest.raises(ValueError, match="not a readable flight recorder dump"):
        read_trace_dump(path)


def test_hang_read_from_flight_recorder_in_a_run_directory(tmp_path):
    run = tmp_path / "run"
    attempt = run / "logs" / "none_abc" / "attempt_0"
    for rank in (0, 1):
        (attempt / str(rank)).mkdir(parents=True)
    (attempt / "0" / "stderr.log").write_text(
        "[rank0]:[E1129 10:00:21.000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=20000) ran for 20012 milliseconds before timing out.\n"
    )
    (attempt / "1" / "stdout.log").write_text("step 0 done\n")
    (run / "plan.json").write_text(json.dumps({"nproc_per_node": 2, "nnodes": "1", "node_rank": None}))
    (run / "launcher.log").write_text((LOGS / "torchrun_gloo_timeout.log").read_text())
    _dump(run / "nccl_trace_rank_0", [(1, "nccl:all_reduce", "completed"), (2, "nccl:all_reduce", "started")])
    _dump(run / "nccl_trace_rank_1", [(1, "nccl:all_reduce", "completed")])
    record = collect_run(run)
    assert record.world_size == 2 and set(record.ranks) == {0, 1}
    diag = explain_run(record, returncode=1)
    assert diag.status == "hang" and diag.hang_source == "flight-recorder"
    assert diag.collective == "all_reduce" and diag.sequence == 2
    assert diag.missing_ranks == [1] and diag.root_rank == 1
    assert diag.matches[0].id == "nccl-watchdog-timeout"
    assert diag.log_tail == ["step 0 done"]  # the missing rank's last words


def test_clean_run_and_interrupted_run():
    assert explain_run(_record(), returncode=0).status == "ok"
    diag = explain_run(_record(ranks={0: RankLog(0, 0, text="KeyboardInterrupt")}), returncode=-15, interrupted=True)
    assert diag.status == "interrupted" and diag.exit_code == 130


@pytest.mark.parametrize("stop_signal, code, words", [
    (None, 130, "Ctrl-C (SIGINT)"),  # a runner that does not say which signal: Ctrl-C
    ("SIGINT", 130, "Ctrl-C (SIGINT)"),
    ("SIGTERM", 143, "SIGTERM (from a scheduler or kill)"),
])
def test_interrupted_run_is_one_line_without_advice(stop_signal, code, words):
    # What the workers said as they were stopped (an NCCL error, torchrun's table) is not explained.
    record = _record(
        failures=[TableFailure(rank=0, local_rank=0, exitcode=-15, signal="SIGTERM", root_cause=True)],
        ranks={0: RankLog(0, 0, text="RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error"),
               1: RankLog(1, 1, text="KeyboardInterrupt")},
    )
    diag = explain_run(record, returncode=-15, interrupted=True, stop_signal=stop_signal)
    assert diag.status == "interrupted" and diag.exit_code == code
    assert diag.signal == (stop_signal or "SIGINT")
    assert diag.summary == f"stopped by {words}; every worker was stopped; logs in r; run the same command again to start over"
    assert diag.matches == [] and diag.next_steps == [] and diag.log_tail == [] and diag.where is None
    again = explain_run(record, returncode=-15, interrupted=True, stop_signal=stop_signal, again="start it again")
    assert again.summary.endswith("; logs in r; start it again")


def test_real_flight_recorder_dump_from_this_torch(tmp_path):
    """A dump made by the installed torch (its gloo flight recorder) reads back as its collectives."""
    code = (
        "import sys, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', rank=0, world_size=1, store=dist.HashStore())\n"
        "t = torch.ones(4)\n"
        "dist.all_reduce(t); dist.broadcast(t, 0)\n"
        "dump = getattr(torch._C._distributed_c10d, '_dump_fr_trace', None)\n"
        "if dump is None: sys.exit(3)\n"
        "open(sys.argv[1], 'wb').write(dump())\n"
        "dist.destroy_process_group()\n"
    )
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURIG_")}
    env["TORCH_FR_BUFFER_SIZE"] = "100"
    path = tmp_path / "nccl_trace_rank_0"
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode == 3:
        pytest.skip("this torch has no gloo flight recorder")
    assert out.returncode == 0, out.stderr
    entries = read_trace_dump(path)
    assert [(e.pg, e.seq, e.op.split(":")[-1]) for e in entries] == [("0", 1, "all_reduce"), ("0", 2, "broadcast")]


def test_real_nccl_hang_captured_on_two_h200(tmp_path):
    """`gpurig launch --timeout 20` of tests/launch/scripts/skip_allreduce_cuda.py on 2 H200 GPUs:
    the run directory as it was left (logs, torchrun's table, both ranks' flight recorder dumps;
    machine paths shortened)."""
    import shutil

    run = tmp_path / "hang-run"
    shutil.copytree(LOGS / "h200_nccl_hang_run", run)
    record = collect_run(run)
    assert sorted(record.traces) == [0, 1]
    # torch 2.11 prints no "(SIGABRT)" after the exit code; the signal is still named.
    assert [(f.rank, f.exitcode, f.signal, f.root_cause) for f in record.failures] == [
        (1, -15, "SIGTERM", False), (0, -6, "SIGABRT", True)]
    diag = explain_run(record, returncode=1)
    assert diag.status == "hang" and diag.hang_source == "flight-recorder"
    assert diag.collective == "all_reduce" and diag.sequence == 2
    assert diag.arrived_ranks == [0] and diag.missing_ranks == [1] and diag.root_rank == 1
    assert diag.exit_code == 134 and diag.worker_exitcode == -6  # NCCL's watchdog aborts the process
    assert diag.matches[0].id == "nccl-watchdog-timeout"
    assert "SeqNum=2, OpType=ALLREDUCE" in diag.matches[0].evidence
    assert diag.where == "rank 0 waited at skip_allreduce_cuda.py:18"
    assert "last collective of rank 1: all_reduce #1 at skip_allreduce_cuda.py:18" in diag.summary
    assert diag.ranks == {"0": "timeout", "1": "secondary"}


def test_a_rank_that_only_raised_gets_the_closest_resolved_thread(monkeypatch):
    # The catalogue can say only "the script raised": a resolved thread with the same error says why.
    from gpurig.diagnose import threads

    case = threads.Case(id="t-1", url="https://example.org/t/1", title="FrobnicatorError on rank 1", framework="pytorch",
                        cls="frobnicator-misconfigured", log="FrobnicatorError: the quux frobnicator refused the widget",
                        cause="The frobnicator needs a widget per rank.", fix="Give each rank its own widget.",
                        established_by="maintainer", found_by="issues: frobnicator")
    other = threads.Case(id="t-2", url="https://example.org/t/2", title="Port in use", framework="pytorch",
                         cls="rendezvous-port-in-use", log="RuntimeError: Address already in use", cause="c", fix="f",
                         established_by="maintainer", found_by="issues: port")
    for c in (case, other):
        c.tokens = c.compute_tokens()
    monkeypatch.setattr(threads, "default_index", lambda: threads.ThreadIndex([case, other, other], examples=False))
    monkeypatch.setattr(threads, "load_calibration", lambda: threads.Calibration(a=0.0, b=2.2, low=0.0, high=1.0, cap=0.9))
    record = _record(
        failures=[TableFailure(rank=1, local_rank=1, exitcode=1, root_cause=True)],
        ranks={0: RankLog(0, 0, text="step 1\n"),
               1: RankLog(1, 1, text="Traceback (most recent call last):\nFrobnicatorError: the quux frobnicator refused the widget\n")},
    )
    diag = explain_run(record, returncode=1)
    assert diag.root_rank == 1
    assert [(m.kind, m.cls or m.id) for m in diag.matches] == [("thread", "frobnicator-misconfigured"), ("catalogue", "uncaught-exception")]
    assert diag.matches[0].source == "https://example.org/t/1" and "widget per rank" in diag.matches[0].cause
