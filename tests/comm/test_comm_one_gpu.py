"""bench comm on one GPU: no link between GPUs to measure, so the host link and device memory are
measured and judged instead; the check step, the terminal and the report say so."""

from __future__ import annotations

import io

import pytest
from comm_facts import two_gpu_facts

from gpurig.commands.bench_comm import render
from gpurig.diagnose.links import judge_host_and_memory

# As measured on one H200 (PCIe Gen5 x16): the figures' shape, not a claim about any machine.
MEASURED = {"host_bytes": 256 << 20, "device_bytes": 1 << 30, "copies": 4, "repeats": 5,
            "h2d_gbps": 53.1, "d2h_gbps": 52.4, "bidirectional_gbps": 98.0, "d2d_gbps": 4010.0}


def one_h200(gen_current: int = 5, width_current: int = 16):
    facts = two_gpu_facts()
    facts.gpus = facts.gpus[:1]
    facts.pairs = []
    facts.gpus[0].pcie_gen_current, facts.gpus[0].pcie_width_current = gen_current, width_current
    return facts


def test_host_link_and_memory_are_held_against_pcie_and_the_datasheet():
    mem, findings = judge_host_and_memory(dict(MEASURED), one_h200())
    assert mem["host_link"]["how"] == "PCIe Gen5 x16"
    assert mem["host_link"]["gbps"] == pytest.approx(63.0, abs=0.1)
    assert mem["h2d_efficiency"] == pytest.approx(53.1 / 63.008, rel=1e-3)
    assert mem["bidirectional_efficiency"] == pytest.approx(98.0 / (2 * 63.008), rel=1e-3)
    assert mem["device_memory"]["gbps"] == 4800.0 and "H200" in mem["device_memory"]["how"]
    assert mem["d2d_efficiency"] == pytest.approx(4010 / 4800)
    assert findings == []


def test_a_slow_host_link_is_a_finding_that_names_a_downtrained_link():
    slow = dict(MEASURED, h2d_gbps=14.0, d2h_gbps=13.5)
    _, findings = judge_host_and_memory(slow, one_h200(gen_current=3, width_current=8))
    (f,) = findings
    assert f.id == "host-link-slow" and f.severity == "warn"
    assert "Gen3 x8" in f.detail and "Gen5 x16" in f.detail


def test_a_memory_copy_far_below_the_datasheet_is_a_finding():
    _, findings = judge_host_and_memory(dict(MEASURED, d2d_gbps=1500.0), one_h200())
    assert [f.id for f in findings] == ["memory-bandwidth-low"]
    assert "4800" in findings[0].title


def test_an_unknown_part_is_measured_but_not_judged():
    facts = one_h200()
    facts.gpus[0].name = "NVIDIA Imaginary X1"
    mem, findings = judge_host_and_memory(dict(MEASURED, d2d_gbps=10.0), facts)
    assert mem["d2d_efficiency"] is None and mem["device_memory"]["gbps"] is None
    assert "no datasheet figure" in mem["device_memory"]["how"]
    assert findings == []


def _data(mem):
    return {"nproc": 1, "device": "cuda", "backend": "nccl", "dtype": "float32", "iters": 20, "repeats": 5, "warmup": 5,
            "nccl": {"version": "2.28.9", "settings": {}}, "results": [], "p2p": None, "memory": mem, "findings": [],
            "capability": {"kind": None, "gbps": None, "how": "one GPU: no link", "link": None}, "ok": True,
            "error": None, "run_dir": None}


def test_the_terminal_says_there_is_no_link_and_shows_what_was_measured():
    from rich.console import Console

    console = Console(file=io.StringIO(), width=160)
    render(console, _data(judge_host_and_memory(dict(MEASURED), one_h200())[0]))
    text = console.file.getvalue()
    assert "no link between GPUs to measure" in text
    assert "host → device" in text and "53.1" in text and "84%" in text
    assert "4010" in text and "4800 GB/s" in text
    assert "busbw" not in text and "link bounding the collectives" not in text


def test_the_check_step_passes_with_the_single_gpu_figures(monkeypatch, tmp_path):
    from gpurig.suite import runner as check

    data = _data(judge_host_and_memory(dict(MEASURED), one_h200())[0])
    monkeypatch.setattr("gpurig.comm.bench.run_bench_comm", lambda **kw: data)
    ctx = check.CheckContext.__new__(check.CheckContext)
    ctx.device, ctx.nproc, ctx.out_dir, ctx.facts = "cuda", "auto", tmp_path, None
    step = check._step_bench_comm(ctx)
    assert step.status == "passed"
    assert "one GPU" in step.reason and "53.1 GB/s" in step.reason and "84% of PCIe Gen5 x16" in step.reason


def test_the_report_shows_the_memory_table_and_no_empty_bandwidth_plot():
    from gpurig.report.html import render_report

    data = _data(judge_host_and_memory(dict(MEASURED), one_h200())[0])
    page = render_report({"steps": [{"name": "bench comm", "status": "passed"}], "bench_comm": data,
                          "verify": {"passed": True, "checks": [], "transport": {"nccl_version": "2.28.9"}}})
    assert 'id="memory-table"' in page and "4010" in page.replace(",", "")
    assert "bus bandwidth against message size" not in page and 'id="bandwidth-table"' not in page
    assert 'id="transport-table"' not in page  # no pair, no table (not a row "nccl_version")


def test_a_real_one_gpu_run_renders_its_figures():
    """`gpurig bench comm --json` on one H200 (2026-12-02), rendered as the terminal shows it."""
    import json
    from pathlib import Path

    from rich.console import Console

    data = json.loads((Path(__file__).resolve().parents[1] / "report" / "fixtures" / "bench_comm_h200x1.json").read_text())
    assert data["results"] == [] and data["findings"] == []
    console = Console(file=io.StringIO(), width=140)
    render(console, data)
    text = console.file.getvalue()
    assert "pinned host copies of 256 MiB" in text and "PCIe Gen5 x16" in text
    assert "87%" in text and "NVIDIA H200's datasheet" in text
