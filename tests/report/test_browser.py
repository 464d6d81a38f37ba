"""The report in a real headless browser (Debian's chromium): it loads without console errors, the
findings table and the plots are in the rendered page, and its screenshot is not blank."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from gpurig.report.html import render_report

FIXTURE = Path(__file__).parent / "fixtures" / "check_h200x2.json"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does it)"),
]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    # Its own session, so a hung browser and all its helper processes go down together.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, HOME=str(tmp_path)))
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish in 120 s: {' '.join(cmd)}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _blankness(png: Path) -> tuple[float, float]:
    """(pixel standard deviation, share of pixels unlike the most common colour) of a screenshot."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.float64)
    flat = pixels.reshape(-1, 3)
    values, counts = np.unique(flat, axis=0, return_counts=True)
    background = values[counts.argmax()]
    differs = np.any(np.abs(flat - background) > 8, axis=1).mean()
    return float(pixels.std()), float(differs)


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_report(json.loads(FIXTURE.read_text())), encoding="utf-8")
    return path


def test_rendered_dom_has_the_findings_table_and_the_plots_and_no_console_errors(report_file, tmp_path):
    res = _chromium(tmp_path, "--dump-dom", report_file.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    assert 'id="findings-table"' in dom and "shm-small" in dom
    assert dom.count('src="data:image/png;base64,') == 2
    for section in ("machine", "verify", "bandwidth", "scaling", "verdict"):
        assert f'id="{section}"' in dom
    assert _console_messages(res.stderr) == []


def test_screenshot_is_not_blank(report_file, tmp_path):
    shot = tmp_path / "report.png"
    res = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", report_file.as_uri())
    assert shot.is_file(), res.stderr[-2000:]
    std, differs = _blankness(shot)
    assert std > 20 and differs > 0.05, (std, differs)


def test_the_blank_measure_does_flag_a_blank_page(tmp_path):
    # Control: the same measure on an empty page, so the test above can fail for the right reason.
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body style='background:#fff'></body></html>")
    shot = tmp_path / "blank.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=640,480", blank.as_uri())
    std, differs = _blankness(shot)
    assert std < 5 and differs < 0.01, (std, differs)


def test_console_errors_are_seen(tmp_path):
    # Control: a page with a script error shows up in the log this test reads.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>undefinedFunction()</script></body></html>")
    res = _chromium(tmp_path, "--dump-dom", bad.as_uri())
    assert any("undefinedFunction" in m for m in _console_messages(res.stderr))
