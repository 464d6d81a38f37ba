"""The one rule for files gpurig writes where the user said, and the atomic write behind it."""

import os
import stat

import pytest

from gpurig.errors import BadInput, check_output_file, check_user_file, write_file_atomic


def test_an_output_file_needs_its_folder_and_force_to_replace(tmp_path):
    with pytest.raises(BadInput, match=r"--out .*/missing/x.json: the folder .*missing does not exist"):
        check_output_file(str(tmp_path / "missing" / "x.json"), "--out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is a file, not a folder"):
        check_output_file(str(tmp_path / "file" / "x.json"), "--out")
    with pytest.raises(BadInput, match="is a directory; give a file name"):
        check_output_file(str(tmp_path), "--report")
    with pytest.raises(BadInput, match="the file exists; add --force to replace it"):
        check_output_file(str(tmp_path / "file"), "--save-facts")
    check_output_file(str(tmp_path / "file"), "--save-facts", force=True)
    check_output_file(str(tmp_path / "new.json"), "--out")
    assert not (tmp_path / "missing").exists()  # a folder the user may have mistyped is never made


def test_a_named_input_file_says_missing_or_directory():
    with pytest.raises(BadInput, match="^--config /nonexistent/x.toml: no such file$"):
        check_user_file("/nonexistent/x.toml", "--config /nonexistent/x.toml", "TOML file")
    with pytest.raises(BadInput, match="is a directory, not a TOML file"):
        check_user_file("/", "--config /", "TOML file")


def test_an_atomic_write_gets_the_umasks_mode_and_leaves_no_temporary_file(tmp_path):
    old = os.umask(0o022)
    try:
        write_file_atomic(str(tmp_path / "a.json"), "{}\n", "--out")
        write_file_atomic(str(tmp_path / "b.png"), b"\x89PNG", "--out")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644  # not mkstemp's 0600
    assert (tmp_path / "b.png").read_bytes() == b"\x89PNG"
    write_file_atomic(str(tmp_path / "s.sh"), "#!/bin/sh\n", "--out", mode=0o755)
    assert stat.S_IMODE((tmp_path / "s.sh").stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.png", "s.sh"]


def test_a_full_disk_keeps_the_file_that_was_there(tmp_path, monkeypatch):
    import errno

    target = tmp_path / "report.html"
    target.write_text("earlier")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(BadInput, match="--report .*report.html: cannot write it \\(No space left on device\\)"):
        write_file_atomic(str(target), "<html>new</html>", "--report")
    assert target.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
