"""Pasted `collect_env` and `nvidia-smi` output turned into facts, and judged by the doctor's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpurig.diagnose.explain import explain_text
from gpurig.probe.pasted import facts_from_pasted, parse_nvidia_smi

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _read(name: str) -> str:
    return (LOGS / name).read_text()


def test_new_nvidia_smi_table():
    driver, gpus = parse_nvidia_smi(_read("pasted_nvidia_smi_h200.txt"))
    assert driver.driver_version == "580.95.05" and driver.cuda_driver_version == "13.0"
    assert [g.name for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    g = gpus[1]
    assert g.pci_bus_id == "00000000:3B:00.0"
    assert g.memory_total_mib == 143771 and g.memory_used_mib == 0
    assert g.power_limit_w == 700 and g.power_draw_w == 75 and g.temperature_c == 28
    assert g.persistence_mode is True and g.compute_mode == "Default" and g.mig_enabled is False
    assert g.ecc_volatile_uncorrected == 0


def test_old_nvidia_smi_table_with_a_process():
    driver, gpus = parse_nvidia_smi(_read("pasted_nvidia_smi_t4_driver470.txt"))
    assert driver.driver_version == "470.256.02" and driver.cuda_driver_version == "11.4"
    assert len(gpus) == 2 and gpus[0].persistence_mode is False
    assert gpus[0].mig_enabled is None  # "N/A": the T4 has no MIG
    assert [(p.pid, p.name, p.used_memory_mib) for p in gpus[1].processes] == [(48211, "python", 1339)]
    assert gpus[0].processes == []


def test_collect_env_report():
    facts, kinds = facts_from_pasted(_read("pasted_collect_env_t4_driver470.txt"))
    assert kinds == ["collect_env"]
    torch = facts.frameworks.torch
    assert torch.installed and torch.version == "2.7.0+cu128" and torch.cuda_build == "12.8"
    assert torch.cuda_available is False and torch.cudnn_version is None
    assert torch.nccl_version == "2.26.2"
    assert facts.driver.driver_version == "470.256.02"
    assert facts.driver.cuda_driver_version == "11.4"  # from the knowledge base: what driver 470 supports
    assert [g.name for g in facts.gpus] == ["Tesla T4", "Tesla T4"]
    assert facts.gpus[0].compute_capability == "7.5"
    assert facts.system.cpu_count == 16 and facts.system.python == "3.10.14"


def test_both_reports_pasted_together():
    facts, kinds = facts_from_pasted(_read("pasted_nvidia_smi_t4_driver470.txt") + "\n" + _read("pasted_collect_env_t4_driver470.txt"))
    assert kinds == ["nvidia-smi", "collect_env"]
    assert facts.gpus[1].memory_used_mib == 1342  # the table's detail is kept
    assert facts.frameworks.torch.cuda_build == "12.8"


def test_text_without_a_report():
    assert facts_from_pasted("RuntimeError: CUDA error: invalid device ordinal") == (None, [])


def test_cu128_torch_on_driver_470_is_found_from_a_pasted_report():
    pytest.importorskip("gpurig.diagnose.rules")
    result = explain_text(_read("pasted_collect_env_t4_driver470.txt"))
    assert result.facts is not None
    top = result.matches[0]
    assert top.id.startswith("doctor:") and "12.8" in top.title and "470" in top.title
    assert "470.256.02" in top.evidence


def test_healthy_nvidia_smi_gives_no_error():
    pytest.importorskip("gpurig.diagnose.rules")
    result = explain_text(_read("pasted_nvidia_smi_h200.txt"))
    assert result.facts is not None
    assert not [m for m in result.matches if m.confidence >= 0.9]


def test_real_h200_reports_are_read():
    facts, kinds = facts_from_pasted(_read("h200_nvidia_smi.txt") + _read("h200_collect_env.txt"))
    assert kinds == ["nvidia-smi", "collect_env"]
    assert facts.driver.driver_version == "580.159.04" and facts.driver.cuda_driver_version == "13.0"
    assert [g.pci_bus_id for g in facts.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    torch = facts.frameworks.torch
    assert torch.version == "2.11.0+cu130" and torch.cuda_available is True and torch.cudnn_version == "9.14.0"
    assert facts.system.cpu_count == 32


@pytest.mark.parametrize(
    "name",
    ["h200_collect_env.txt", "h200_nvidia_smi.txt", "h200_nccl_info_default.txt", "h200_nccl_info_ipc.txt",
     "h200_nccl_info_net.txt", "h200_nccl_info_p2p_disabled.txt"],
)
def test_real_healthy_h200_output_explains_nothing(name):
    """Captured on a working 2xH200 NVLink machine (NCCL INFO logs of a good all-reduce): no false alarm."""
    assert [m.id for m in explain_text(_read(name)).matches if m.confidence >= 0.9] == []
    assert [m.id for m in explain_text(_read(name)).matches if not m.id.startswith("doctor:")] == []
