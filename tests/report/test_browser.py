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


_MEASURE = """<script>
window.addEventListener("load", () => {
  const cut = [...document.querySelectorAll("#step-legend li, #step-breakdown div, th, td")]
    .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow === "hidden")
    .map(e => e.textContent.trim());
  const legend = [...document.querySelectorAll("#step-legend li")].map(e => e.textContent.trim());
  document.body.setAttribute("data-cut", JSON.stringify(cut));
  document.body.setAttribute("data-legend", JSON.stringify(legend));
  document.body.setAttribute("data-width", String(document.documentElement.scrollWidth));
});
</script>"""


def _measured(tmp_path, html: str, width: int = 1280) -> dict:
    import html as html_mod
    import re

    page = tmp_path / "measured.html"
    page.write_text(html.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    res = _chromium(tmp_path, "--dump-dom", f"--window-size={width},2000", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", res.stdout).group(1)
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', body))
    return {k: json.loads(html_mod.unescape(v)) for k, v in attrs.items()}


def test_at_1280_px_no_label_is_cut_and_the_step_legend_reads_in_full(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["train"]["step_time"].update({"compute_fraction": 0.70, "data_wait_fraction": 0.12, "comm_exposed_fraction": 0.15})
    got = _measured(tmp_path, render_report(doc))
    assert got["cut"] == []
    assert any(x.startswith("exposed communication") and x.endswith("%") for x in got["legend"]), got["legend"]
    assert got["width"] <= 1280  # nothing wider than the window


def test_the_cut_measure_sees_a_cut_label(tmp_path):
    # Control: a label that cannot fit is reported, so the test above can fail for the right reason.
    html = ("<!DOCTYPE html><html><body><table><tr><td style='max-width:40px;overflow:hidden;white-space:nowrap'>"
            "exposed communication 15%</td></tr></table></body></html>")
    assert _measured(tmp_path, html)["cut"] == ["exposed communication 15%"]


def test_the_report_prints_to_pdf(report_file, tmp_path):
    pdf = tmp_path / "report.pdf"
    res = _chromium(tmp_path, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", report_file.as_uri())
    assert pdf.is_file(), res.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    pages = data.count(b"/Type /Page") - data.count(b"/Type /Pages")
    assert pages >= 2 and len(data) > 50_000, (pages, len(data))  # text and both plots, over several pages


def test_a_one_gpu_report_renders_without_console_errors(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    mem = {"gpu": "NVIDIA H200", "h2d_gbps": 53.1, "d2h_gbps": 52.4, "bidirectional_gbps": 98.0, "d2d_gbps": 4010.0,
           "host_link": {"gbps": 63.0, "how": "PCIe Gen5 x16"}, "device_memory": {"gbps": 4800.0, "how": "datasheet"},
           "h2d_efficiency": 0.84, "d2h_efficiency": 0.83, "bidirectional_efficiency": 0.78, "d2d_efficiency": 0.84}
    doc["bench_comm"].update({"results": [], "memory": mem, "nproc": 1})
    page = tmp_path / "one.html"
    page.write_text(render_report(doc), encoding="utf-8")
    res = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert 'id="memory-table"' in res.stdout and 'id="bandwidth-table"' not in res.stdout
    assert _console_messages(res.stderr) == []
