"""collect_facts on a real GPU machine, cross-checked against nvidia-smi's own answers.

NVML (what gpurig reads) and nvidia-smi (what a person checks by hand) must tell the same story:
the same GPUs, the same link code for every pair, the same NVLink speeds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from gpurig.probe import smi
from gpurig.probe.collect import collect_facts
from gpurig.probe.facts import RigFacts

pytestmark = pytest.mark.gpu

LINK_CODES = re.compile(r"^(NV\d+|PIX|PXB|PHB|NODE|SYS)$")


@pytest.fixture(scope="module")
def facts() -> RigFacts:
    return collect_facts(frameworks=True, timeout=120)


def test_driver_and_gpus_from_nvml(facts):
    assert facts.driver.source == "nvml", facts.notes
    assert re.fullmatch(r"\d+\.\d+(\.\d+)*", facts.driver.driver_version)
    assert re.fullmatch(r"\d+\.\d", facts.driver.cuda_driver_version)
    assert facts.driver.kernel_module_loaded in (True, None)  # None only where /sys/module is hidden
    assert facts.gpus
    for g in facts.gpus:
        assert re.fullmatch(r"\d+\.\d+", g.compute_capability)
        assert g.uuid.startswith(("GPU-", "MIG-"))
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", g.pci_bus_id)
        assert g.memory_total_mib > 1024 and 0 <= g.memory_used_mib <= g.memory_total_mib
        assert g.pcie_gen_max and g.pcie_width_max
        assert g.compute_mode in ("Default", "Exclusive_Process", "Prohibited")
        assert g.sm_clock_max_mhz and g.power_limit_w
        assert isinstance(g.throttle_reasons, list)
        assert g.cpu_affinity is None or re.fullmatch(r"[\d,-]+", g.cpu_affinity)
    # Every GPU NVML lists is on the PCI bus with the nvidia driver bound.
    bus = {d.slot: d for d in facts.pci_devices or []}
    for g in facts.gpus:
        if g.pci_bus_id in bus:  # a VM may renumber the bus it shows
            assert bus[g.pci_bus_id].kind == "gpu" and bus[g.pci_bus_id].driver == "nvidia"


def test_every_pair_has_a_link_code(facts):
    n = len(facts.gpus)
    assert len(facts.pairs) == n * (n - 1) // 2
    for p in facts.pairs:
        assert LINK_CODES.match(p.link), p
        assert p.p2p_read in (True, False, None)


@pytest.mark.skipif(not shutil.which("nvidia-smi"), reason="needs nvidia-smi")
def test_nvml_and_nvidia_smi_agree(facts):
    res = smi.read_smi()
    assert res.error is None, res.error
    assert [(g.uuid, g.pci_bus_id, g.compute_capability) for g in res.gpus] == [
        (g.uuid, g.pci_bus_id, g.compute_capability) for g in facts.gpus]
    assert res.driver_version == facts.driver.driver_version
    assert res.cuda_driver_version == facts.driver.cuda_driver_version
    assert [(p.gpu_a, p.gpu_b, p.link) for p in res.pairs] == [(p.gpu_a, p.gpu_b, p.link) for p in facts.pairs]
    for ours, theirs in zip(facts.gpus, res.gpus, strict=True):
        assert [(nl.link, nl.active, nl.speed_gbps) for nl in ours.nvlinks if nl.active] == [
            (nl.link, nl.active, nl.speed_gbps) for nl in theirs.nvlinks if nl.active]


def test_torch_sees_the_gpus_the_snapshot_lists(facts):
    t = facts.frameworks.torch
    if not t.installed:
        pytest.skip("torch is not installed")
    assert t.error is None and t.cuda_available is True
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert t.device_count == len(facts.gpus)
    cc = facts.gpus[0].compute_capability.replace(".", "")
    assert any(a.startswith(f"sm_{cc}") for a in t.arch_list), (cc, t.arch_list)


def test_two_gpus_joined_by_nvlink():
    out = subprocess.run(["nvidia-smi", "nvlink", "-s"], capture_output=True, text=True, timeout=60)
    facts = collect_facts(frameworks=False)
    if len(facts.gpus) < 2 or "GB/s" not in out.stdout:
        pytest.skip("needs 2 GPUs joined by NVLink")
    pair = facts.pair(0, 1)
    assert pair.link.startswith("NV") and pair.nvlink_count == int(pair.link[2:])
    assert pair.p2p_read is True
    active = [nl for nl in facts.gpus[0].nvlinks if nl.active]
    assert active and all(nl.speed_gbps and nl.speed_gbps > 10 for nl in active)
