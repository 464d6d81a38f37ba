"""`gpurig explain` through the real entry point: files, stdin, run directories, bad input."""

from __future__ import annotations

import json
from pathlib import Path

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def test_file_json_shape_and_best_first(run_cli):
    out = run_cli("explain", "--json", str(LOGS / "torchrun_rank1_raises_gloo.log"))
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert set(doc) >= {"matches"}
    first = doc["matches"][0]
    assert {"id", "title", "cause", "fix", "confidence", "evidence"} <= set(first)
    # torchrun's root cause (rank 1's own exception) before rank 0's "connection closed by peer".
    assert first["id"] == "uncaught-exception" and "boom on rank 1" in first["evidence"]
    catalogue = [m["id"] for m in doc["matches"][1:] if m["kind"] == "catalogue"]
    assert catalogue == ["peer-connection-lost", "worker-terminated-by-launcher"]


def test_gloo_timeout_log(run_cli):
    out = run_cli("explain", "--json", str(LOGS / "torchrun_gloo_timeout.log"))
    doc = json.loads(out.stdout)
    assert doc["matches"][0]["id"] == "gloo-collective-timeout"
    assert "Timed out waiting 5000ms" in doc["matches"][0]["evidence"]


def test_stdin_and_human_output(run_cli):
    out = run_cli("explain", "-", input="[rank1]: RuntimeError: CUDA error: invalid device ordinal\n")
    assert out.returncode == 1
    assert "CUDA error: invalid device ordinal" in out.stdout
    assert "fix:" in out.stdout


def test_nothing_matched_says_so_with_next_steps_that_fit_the_log(run_cli):
    out = run_cli("explain", "-", input="torchrun --nproc-per-node 2 train.py\nepoch 3 loss 0.123\nall good\n")
    assert out.returncode == 0
    assert "No known error matched" in out.stdout
    for step in ("NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL", "gpurig doctor"):
        assert step in out.stdout
    doc = json.loads(run_cli("explain", "--json", "-", input="nothing here\n").stdout)
    assert doc["matches"] == [] and doc["world"] == "unknown" and doc["next_steps"]
    # A TensorFlow log gets TensorFlow's next steps, never NCCL advice.
    doc = json.loads(run_cli("explain", "--json", "-", input="I tensorflow/core/platform/cpu_feature_guard.cc:193] "
                             "This TensorFlow binary is optimized\nEpoch 1/10\n").stdout)
    assert doc["world"] == "tensorflow" and doc["matches"] == []
    assert not any("NCCL" in s for s in doc["next_steps"]) and any("list_physical_devices" in s for s in doc["next_steps"])


def test_empty_and_binary_files_are_said_plainly(run_cli, tmp_path):
    empty, binary = tmp_path / "empty.log", tmp_path / "core.bin"
    empty.write_text("\n  \n")
    binary.write_bytes(b"\x7fELF\x02\x01\x00\x00" + bytes(range(256)) * 8)
    out = run_cli("explain", str(empty))
    assert out.returncode == 2 and "empty.log: empty" in out.stderr and out.stdout == ""
    out = run_cli("explain", str(binary))
    assert out.returncode == 2 and "core.bin: not text" in out.stderr


def test_bad_input_exits_2(run_cli, tmp_path):
    out = run_cli("explain", str(tmp_path / "nope.log"))
    assert out.returncode == 2 and "nope.log: no such file" in out.stderr
    out = run_cli("explain", str(tmp_path))
    assert out.returncode == 2 and "not a `gpurig launch` run directory" in out.stderr
    out = run_cli("explain", cwd=tmp_path)  # no argument and no earlier run here
    assert out.returncode == 2 and "no earlier `gpurig launch` run" in out.stderr
    assert out.stdout == ""


KERNEL_NOTICE = ("Detected kernel version 5.4.17, which is below the recommended minimum of 5.5.0; this can cause the "
                 "process to hang. It is recommended to upgrade the kernel to the minimum version or higher.\n")


def test_a_notice_alone_is_said_to_be_harmless(run_cli):
    out = run_cli("explain", "-", input=KERNEL_NOTICE)
    assert "No error found" in out.stdout and "kernel is older than 5.5" in out.stdout
    doc = json.loads(run_cli("explain", "--json", "-", input=KERNEL_NOTICE).stdout)
    assert doc["matches"] == [] and doc["benign"][0]["id"] == "old-kernel-hang-warning"
    assert doc["failed"] is False  # the notice's own "can cause the process to hang" is not a failure


def test_a_failure_beside_a_notice_is_never_called_no_error(run_cli):
    # A traceback cut before its exception, after Accelerate's kernel notice (as pasted in a real thread):
    # gpurig knows the notice, not the failure, and must not say that no error was found.
    log = (KERNEL_NOTICE + "trainable params: 167772160\nTraceback (most recent call last):\n"
           '  File "/home/u/qlora/train.py", line 1393, in train\n    train_result = trainer.train()\n')
    out = run_cli("explain", "-", input=log)
    assert "No error found" not in out.stdout
    assert "reports a failure, but not one gpurig knows" in out.stdout and "Next steps:" in out.stdout
    doc = json.loads(run_cli("explain", "--json", "-", input=log).stdout)
    assert doc["failed"] is True and doc["benign"][0]["id"] == "old-kernel-hang-warning"


def test_deepspeeds_libaio_warning_is_a_notice_not_the_failure(run_cli):
    warning = ("[WARNING]  async_io requires the dev libaio .so object and headers but these were not found.\n"
               "[WARNING]  async_io: please install the libaio-dev package with apt\n")
    doc = json.loads(run_cli("explain", "--json", "-", input=warning).stdout)
    assert doc["matches"] == [] and [m["id"] for m in doc["benign"]] == ["deepspeed-libaio-warning"]
    # beside a real failure the notice is not mentioned at all
    doc = json.loads(run_cli("explain", "--json", "-", input=warning + "torch.cuda.OutOfMemoryError: CUDA out of memory. "
                             "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB\n").stdout)
    assert doc["matches"][0]["id"] == "cuda-out-of-memory" and "benign" not in doc


def test_json_bad_input_is_still_one_json_document(run_cli, tmp_path):
    # A CI step that parses `gpurig explain --json` gets a document naming the problem, and exit 2.
    out = run_cli("explain", "--json", str(tmp_path / "nope.log"))
    doc = json.loads(out.stdout)
    assert out.returncode == 2 and doc["matches"] == [] and "nope.log: no such file" in doc["error"]
    (tmp_path / "empty.log").write_text("")
    out = run_cli("explain", "--json", str(tmp_path / "empty.log"))
    assert out.returncode == 2 and "empty: nothing to explain" in json.loads(out.stdout)["error"]


def test_help_states_the_size_of_the_shipped_index():
    """`gpurig explain --help` says how many resolved threads it answers from; the number is written
    by hand (counting them would load the index for --help), so it must stay within a tenth of the
    threads the package ships."""
    import re

    from gpurig.commands.explain import HELP
    from gpurig.diagnose.threads import load_cases

    said = int(re.search(r"about ([\d,]+) resolved public threads", HELP).group(1).replace(",", ""))
    shipped = len(load_cases())
    assert abs(said - shipped) <= shipped / 10, (said, shipped)
