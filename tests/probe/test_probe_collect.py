"""collect_facts: on this machine, and on fake machines (fake NVML, fake nvidia-smi, fake sysfs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from probe_fakes import FakeNvml, FakeNVMLError, base_tree, fake_smi, hgx_tree, pci_device, two_gpus_bridged

from gpurig.probe.collect import collect_facts
from gpurig.probe.facts import RigFacts

ROOT = Path(__file__).resolve().parents[2]


def roundtrip(facts: RigFacts) -> RigFacts:
    return RigFacts.from_dict(json.loads(json.dumps(facts.to_dict())))


def test_this_machine_fast_path_round_trips(tmp_path):
    facts = collect_facts(frameworks=False, smi_exe=str(tmp_path / "no-nvidia-smi") if not _has_gpu() else None)
    assert roundtrip(facts) == facts
    assert facts.collected_at and facts.collected_at.endswith("+00:00")
    assert facts.gpurig_version
    assert facts.frameworks.probed is False
    assert facts.system.python and facts.system.cpu_count
    if not _has_gpu():
        assert facts.gpus == [] and facts.pairs == []
        assert facts.driver.source is None and facts.driver.error
        assert any(n.startswith("no GPU facts:") for n in facts.notes)


def test_this_machine_with_frameworks_round_trips():
    facts = collect_facts(frameworks=True, timeout=120)
    assert roundtrip(facts) == facts
    assert facts.frameworks.probed is True
    assert facts.frameworks.torch.installed is True and facts.frameworks.torch.version.startswith("2.")


def _has_gpu() -> bool:
    return os.path.exists("/dev/nvidia0")


def test_gpus_from_nvml_with_pci_and_module_from_sysfs(tmp_path):
    hgx_tree(tmp_path)
    base_tree(tmp_path)
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    facts = collect_facts(frameworks=False, root=tmp_path, environ={"NCCL_P2P_DISABLE": "1", "HOME": "/root"},
                          nvml=two_gpus_bridged())
    assert facts.driver.source == "nvml" and facts.driver.error is None
    assert facts.driver.kernel_module_loaded is True
    assert [g.name for g in facts.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert facts.pair(1, 0).link == "NV4"
    assert facts.system.nvswitch_count == 1
    assert facts.env == {"NCCL_P2P_DISABLE": "1"}
    assert roundtrip(facts) == facts


def test_nvidia_smi_takes_over_when_nvml_cannot_start(tmp_path):
    base_tree(tmp_path)
    facts = collect_facts(frameworks=False, root=tmp_path, environ={}, nvml=FakeNvml([], init_error=12),
                          smi_exe=fake_smi(tmp_path))
    assert facts.driver.source == "nvidia-smi"
    assert (facts.driver.driver_version, facts.driver.cuda_driver_version) == ("580.95.05", "13.0")
    assert facts.driver.error is None
    assert len(facts.gpus) == 2 and facts.pairs[0].link == "NV18"
    assert any("from nvidia-smi because" in n and "not found" in n for n in facts.notes)


def test_driver_mismatch_keeps_both_tools_words(tmp_path):
    base_tree(tmp_path)
    hgx_tree(tmp_path)
    facts = collect_facts(frameworks=False, root=tmp_path, environ={}, nvml=FakeNvml([], init_error=18),
                          smi_exe=fake_smi(tmp_path, failing="smi_version_mismatch.txt"))
    assert facts.driver.source is None and facts.gpus == []
    assert "Driver/library version mismatch" in facts.driver.error
    assert "nvidia-smi: Failed to initialize NVML: Driver/library version mismatch" in facts.driver.error
    assert any("2 NVIDIA GPU(s) on the PCI bus, bound to: nvidia" in n for n in facts.notes)


def test_gpu_on_the_bus_without_a_driver_is_told_apart_from_no_gpu(tmp_path):
    base_tree(tmp_path)
    pci_device(tmp_path, "0000:65:00.0", "0x10de", "0x2684", "0x030000")  # an RTX 4090, nothing bound
    (tmp_path / "sys/module/i915").mkdir(parents=True)
    no_smi = str(tmp_path / "no-nvidia-smi")
    facts = collect_facts(frameworks=False, root=tmp_path, environ={}, nvml=FakeNvml([], init_error=9),
                          smi_exe=no_smi)
    assert facts.driver.kernel_module_loaded is False
    assert [(d.kind, d.driver) for d in facts.pci_devices] == [("gpu", None)]
    assert any("1 NVIDIA GPU(s) on the PCI bus, bound to: no driver" in n for n in facts.notes)

    empty = tmp_path / "laptop"
    base_tree(empty)
    pci_device(empty, "0000:00:02.0", "0x8086", "0x46a6", "0x030000", "i915")
    facts = collect_facts(frameworks=False, root=empty, environ={}, nvml=FakeNvml([], init_error=12), smi_exe=no_smi)
    assert facts.pci_devices == []
    assert any("no NVIDIA GPU on the PCI bus" in n for n in facts.notes)


def test_module_entry_point_prints_the_snapshot_as_json():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "gpurig.probe.collect", "--no-frameworks"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    facts = RigFacts.from_dict(json.loads(out.stdout))
    assert facts.frameworks.probed is False


def test_nvml_that_never_answers_is_reported_not_waited_for(tmp_path):
    base_tree(tmp_path)
    hgx_tree(tmp_path)
    release = threading.Event()

    class HungNvml(FakeNvml):
        def nvmlInit(self):
            release.wait(120)  # like nvmlInit on a GPU that fell off the bus
            raise FakeNVMLError(15)

    try:
        facts = collect_facts(frameworks=False, root=tmp_path, environ={}, nvml=HungNvml([]),
                              smi_exe=fake_smi(tmp_path), nvml_timeout=1.0)
    finally:
        release.set()
    assert facts.driver.source is None and facts.gpus == []
    assert "no answer within 1 s" in facts.driver.error and "dmesg" in facts.driver.error
    assert any("2 NVIDIA GPU(s) on the PCI bus" in n for n in facts.notes)


def test_a_real_2x_h200_snapshot_loads_and_says_what_the_machine_is():
    # Written by `python -m gpurig.probe.collect` on a 2xH200 machine (GPUs joined through NVSwitch).
    data = json.loads((Path(__file__).parent / "data" / "facts_2x_h200.json").read_text())
    facts = RigFacts.from_dict(data)
    assert roundtrip(facts) == facts
    assert facts.driver.source == "nvml" and facts.driver.cuda_driver_version == "13.0"
    assert [g.compute_capability for g in facts.gpus] == ["9.0", "9.0"]
    assert [g.memory_used_mib for g in facts.gpus] == [0.0, 0.0]  # idle: the driver's reserve is not "used"
    pair = facts.pair(0, 1)
    assert (pair.link, pair.nvlink_count, pair.p2p_read) == ("NV18", 18, True)
    links = facts.gpus[0].nvlinks
    assert len(links) == 18 and {(nl.active, nl.speed_gbps, nl.remote_device_type) for nl in links} == {
        (True, 26.562, "switch")}
    assert facts.frameworks.torch.cuda_available is True and facts.frameworks.torch.device_count == 2
    assert facts.notes == []
