"""--nnodes / --node-rank are checked once, in one wording, by every command that takes them,
before any process starts."""

from __future__ import annotations

import pytest

from gpurig.errors import BadInput
from gpurig.launch.plan import check_nodes


def test_check_nodes_names_the_flag():
    check_nodes(2, 1)
    with pytest.raises(BadInput, match=r"^--node-rank: 2 is outside 0\.\.1 \(--nnodes 2\)$"):
        check_nodes(2, 2)
    with pytest.raises(BadInput, match=r"^--node-rank: -1 is outside"):
        check_nodes(2, -1)
    with pytest.raises(BadInput, match=r"^--nnodes: must be at least 1, got 0$"):
        check_nodes(0, 0)


@pytest.mark.parametrize("argv", [
    ["train", "--device", "cpu"],
    ["train", "--framework", "tf"],
    ["launch", "--device", "cpu"],
])
def test_every_command_says_a_bad_node_rank_the_same_way(run_cli, tmp_path, argv):
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    extra = [str(script)] if argv[0] == "launch" else ["--out", str(tmp_path / "run")]
    proc = run_cli(*argv, "--nnodes", "2", "--node-rank", "5", "--master-addr", "127.0.0.1", *extra, timeout=120)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "--node-rank: 5 is outside 0..1 (--nnodes 2)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()
