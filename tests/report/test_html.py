"""The check report: every section from a full document, every section's null path, no external assets."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpurig.report.html import render_report

FIXTURE = Path(__file__).parent / "fixtures" / "check_h200x2.json"
SECTIONS = ("steps", "machine", "findings", "verify", "bandwidth", "scaling", "verdict")


@pytest.fixture
def doc():
    return json.loads(FIXTURE.read_text())


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.tags: list[tuple[str, dict]] = []
        self.table_rows: dict[str, int] = {}
        self._table: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "table":
            self._table = a.get("id")
        if tag == "tr" and self._table:
            self.table_rows[self._table] = self.table_rows.get(self._table, 0) + 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None


def _parse(html: str) -> _Collect:
    p = _Collect()
    p.feed(html)
    return p


def test_full_report_has_every_section_and_its_content(doc):
    html = render_report(doc)
    page = _parse(html)
    for section in SECTIONS:
        assert section in page.ids
    # findings table: a header row plus one row per doctor finding, worst first
    assert page.table_rows["findings-table"] == 1 + len(doc["doctor"]["findings"])
    assert html.index("shm-small") < html.index("nccl-nvls-off") < html.index("gpus-ok")
    assert page.table_rows["checks-table"] == 1 + len(doc["verify"]["checks"])
    assert page.table_rows["gpu-table"] == 1 + 2 and "NV18" in html
    assert "580.159.04" in html and "2.11.0+cu130" in html
    # two plots, inline
    imgs = [a for t, a in page.tags if t == "img"]
    assert len(imgs) == 2 and all(a["src"].startswith("data:image/png;base64,") for a in imgs)
    # bandwidth against the link's capability: 326.3 of 478 GB/s
    assert "478 GB/s" in html and "68%" in html
    # scaling: 2 processes x 6502 samples/s
    assert "13004.0" in html and "98%" in html
    # the verdict, computed from the training summary because the document carries none
    assert 'id="headline"' in html and "balanced" in html
    assert "memory headroom unused" in html


def test_the_rank_table_gives_each_gpus_clock_when_recorded(doc):
    assert "GPU clock" not in render_report(doc)  # this document has no clocks: no empty column
    doc["train"]["per_rank"][0]["gpu_clock"] = {"sm_clock_mhz": 1888.4, "power_capped_fraction": 1.0}
    doc["train"]["per_rank"][1]["gpu_clock"] = {"sm_clock_mhz": 1800.0, "power_capped_fraction": 0.0}
    html = render_report(doc)
    assert "GPU clock" in html and "1,888 MHz, power cap 100%" in html and "1,800 MHz</td>" in html


def test_no_external_assets_and_no_script(doc):
    html = render_report(doc)
    page = _parse(html)
    assert not [t for t, _ in page.tags if t in ("script", "link", "iframe")]
    for _tag, attrs in page.tags:
        for key in ("src", "href"):
            if key in attrs:
                assert attrs[key].startswith("data:"), attrs
    assert not re.search(r"url\(\s*['\"]?https?:", html)


@pytest.mark.parametrize("section, step, shown", [
    ("doctor", "doctor", ["machine", "findings"]),
    ("verify", "verify", ["verify"]),
    ("bench_comm", "bench comm", ["bandwidth"]),
    ("bench_train", "bench train", ["scaling"]),
])
def test_a_null_section_says_why(doc, section, step, shown):
    doc[section] = None
    for s in doc["steps"]:
        if s["name"] == step:
            s["status"], s["reason"] = "skipped", "the doctor found an error (no driver); fix it first"
    html = render_report(doc)
    assert f"the {step} step skipped: the doctor found an error (no driver)" in html
    page = _parse(html)
    for section_id in shown:
        assert section_id in page.ids  # the section stays, with the reason


def test_everything_null_still_renders(doc):
    bare = {"gpurig_version": "0.1.0", "created_at": "now", "device": "cpu",
            "steps": [{"name": n, "status": "skipped", "seconds": 0.0, "reason": "stopped early"}
                      for n in ("doctor", "verify", "bench comm", "bench train")],
            "doctor": None, "verify": None, "bench_comm": None, "bench_train": None, "train": None, "verdicts": []}
    html = render_report(bare)
    assert html.count("stopped early") >= 6
    assert "<img" not in html
    assert "some steps failed" in html


def test_missing_keys_inside_sections_are_na_not_errors(doc):
    d = copy.deepcopy(doc)
    d["doctor"]["facts"] = {"gpus": [{"index": 0}], "pairs": [{"gpu_a": 0, "gpu_b": 1}]}
    d["bench_comm"] = {"results": [{"op": "allreduce", "bytes": 1024}]}  # no bandwidth measured
    d["bench_train"] = {"results": [{"nproc": 2}]}
    d["train"] = {"world_size": 2}
    d.pop("passed")
    html = render_report(d)
    assert "n/a" in html and "No measurement to plot" in html
    assert "No verdict: the run recorded no step-time breakdown" in html


def test_verdicts_in_the_document_are_used_headline_first(doc):
    doc["verdicts"] = [
        {"id": "memory-headroom", "severity": "info", "title": "memory headroom unused", "fix": "--set data.batch_size=512"},
        {"id": "input-bound", "severity": "warn", "title": "input-bound: data wait is 41% of step time",
         "fix": "raise workers"},
    ]
    html = render_report(doc)
    headline = html[html.index('id="headline"'):]
    assert headline.index("input-bound") < headline.index("</div>")


def test_text_is_escaped(doc):
    doc["doctor"]["findings"][0]["title"] = "<script>alert(1)</script>"
    html = render_report(doc)
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_verify_transport_in_the_simple_form(doc):
    doc["verify"]["transport"] = {"0-1": "SHM"}
    assert re.search(r"<td>0-1</td><td>n/a</td><td>SHM</td>", render_report(doc))


def test_rejects_a_document_that_is_not_an_object():
    with pytest.raises(TypeError, match="dict"):
        render_report([])  # type: ignore[arg-type]


def test_bench_findings_are_shown_with_their_section(doc):
    page = _parse(render_report(doc))
    assert page.table_rows["bandwidth-findings"] == 2
    assert "scaling-findings" not in page.ids  # bench train reported none


def test_a_real_cpu_check_document_renders():
    # `gpurig check --device cpu --json` on a 2-core machine without a GPU (run paths shortened).
    real = json.loads((Path(__file__).parent / "fixtures" / "check_cpu_real.json").read_text())
    html = render_report(real)
    page = _parse(html)
    assert "No GPU was found on this machine" in html
    assert page.table_rows["findings-table"] == 1 + len(real["doctor"]["findings"])
    assert page.table_rows["checks-table"] == 1 + len(real["verify"]["checks"])
    assert len([t for t, _ in page.tags if t == "img"]) == 2
    assert "n/a on CPU (gloo)" in html  # no link capability on the CPU, and the report says why
    head = real["verdicts"][0]["title"]
    assert head.split(":")[0] in html[html.index('id="headline"'):][:400]


def test_verdicts_may_be_finding_objects(doc):
    from gpurig.diagnose.findings import Finding

    doc["verdicts"] = [Finding(id="input-bound", severity="warn", title="input-bound: data wait is 41% of step time")]
    assert "input-bound: data wait is 41%" in render_report(doc)


def test_a_balanced_run_keeps_balanced_as_the_headline_over_advice(doc):
    doc["verdicts"] = [
        {"id": "training-balanced", "severity": "ok", "title": "balanced: no bottleneck found", "fix": ""},
        {"id": "memory-headroom", "severity": "info", "title": "memory headroom unused", "fix": "--set data.batch_size=512"},
    ]
    html = render_report(doc)
    headline = html[html.index('id="headline"'):]
    assert headline.index("balanced: no bottleneck found") < headline.index("</div>")


def test_the_report_names_the_host_and_prints_cleanly(doc):
    doc["host"] = "gpu-node-07"
    html = render_report(doc)
    assert 'id="host">gpu-node-07<' in html
    assert "@media print" in html
    del doc["host"]  # a document from before the host was recorded still renders
    assert 'id="host"' not in render_report(doc)


def test_bandwidth_axis_is_logarithmic_when_small_messages_would_sit_on_zero():
    from gpurig.report.plots import wants_log_scale

    assert wants_log_scale([0.1, 5.3, 120.0, 328.0])  # 1 KiB to 1 GiB on NVLink
    assert not wants_log_scale([20.2, 47.3, 219.5, 329.7])
    assert not wants_log_scale([])


def test_a_cpu_machine_shows_no_raw_driver_errors(doc):
    facts = doc["doctor"]["facts"]
    facts["gpus"], facts["pairs"] = [], []
    facts["driver"] = {"driver_version": None, "cuda_driver_version": None,
                       "error": "NVML: NVML library (libnvidia-ml.so.1) not found (NVML Shared Library Not Found); "
                                "nvidia-smi: nvidia-smi not found on PATH"}
    html = render_report(doc)
    assert "no NVIDIA driver here" in html and "libnvidia-ml.so.1" not in html
    # On a GPU machine a driver error is the news: it is shown as NVML said it.
    facts["gpus"] = json.loads(FIXTURE.read_text())["doctor"]["facts"]["gpus"]
    facts["driver"]["error"] = "NVML: Driver/library version mismatch"
    assert "Driver/library version mismatch" in render_report(doc)


def test_a_real_one_gpu_check_shows_what_one_gpu_can_prove():
    """The check document of a real run on one H200 (2026-12-02): no links, no scaling curve, no transport
    row; the host link and memory instead."""
    doc = json.loads((Path(__file__).parent / "fixtures" / "check_h200x1.json").read_text())
    page = render_report(doc)
    assert 'id="memory-table"' in page and "PCIe Gen5 x16" in page and "datasheet" in page
    assert 'id="bandwidth-table"' not in page and 'id="transport-table"' not in page
    assert "scaling needs two or more" in page
    assert page.count('src="data:image/png;base64,') == 0  # neither a flat bandwidth plot nor a one-point curve
