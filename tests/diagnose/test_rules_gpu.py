"""The rules on this machine's live snapshot, on a GPU machine (skipped without CUDA)."""

from __future__ import annotations

import pytest

from gpurig.diagnose.rules import judge
from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as kb

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def live():
    from gpurig.probe.collect import collect_facts

    facts = collect_facts(frameworks=True, timeout=120.0)
    return facts, {f.id: f for f in judge(facts)}


def test_live_gpus_are_judged_without_a_rule_failing(live):
    facts, found = live
    assert facts.gpus, "a GPU machine lists its GPUs"
    assert "doctor-rule-failed" not in found
    assert "gpus-found" in found and "driver-ok" in found
    assert not {"no-nvidia-gpu", "driver-not-loaded", "nvml-driver-mismatch"} & set(found)


def test_the_knowledge_base_knows_this_machine(live):
    facts, found = live
    for g in facts.gpus:
        assert kb.arch_for_cc(g.compute_capability) is not None, g.compute_capability
        if g.name and kb.cc_for_card(g.name):
            assert kb.cc_for_card(g.name) == g.compute_capability, g.name
    if facts.driver.driver_version and facts.driver.cuda_driver_version:
        table = kb.max_cuda_for_driver(facts.driver.driver_version)
        # the table may lag a newer driver, never claim more than the driver reports
        assert table is None or kb.major_minor(table) <= kb.major_minor(facts.driver.cuda_driver_version)


def test_torch_on_this_machine_is_judged(live):
    facts, found = live
    t = facts.frameworks.torch
    if not (t.installed and t.cuda_build and t.cuda_available):
        pytest.skip("no CUDA torch here")
    assert "torch-cuda-driver-ok" in found or "torch-cuda-minor-compat" in found
    assert "torch-arch-ok" in found, sorted(found)
    if kfw.torch_release(t.version) is not None and t.arch_list:
        variant = "cu" + t.cuda_build.replace(".", "")
        table = kfw.torch_arch_list(t.version, variant)
        if table:
            machine_code = {a for a in t.arch_list if a.startswith("sm_")}
            assert machine_code <= set(table) | {a + "a" for a in table}, (t.arch_list, table)


def test_nvlink_pairs_are_summarised(live):
    facts, found = live
    if not any((p.link or "").startswith("NV") for p in facts.pairs):
        pytest.skip("no NVLink pair here")
    assert "nvlink-ok" in found or "nvlink-links-down" in found or "nvlink-slow-links" in found
