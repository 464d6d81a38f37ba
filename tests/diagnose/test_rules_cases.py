"""Each doctor finding on a recorded rig changed in one place: the change alone brings the finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpurig.diagnose.rules import judge
from gpurig.probe.facts import (
    GpuPairFacts,
    GpuProcessFacts,
    NvLinkFacts,
    PciDeviceFacts,
    RigFacts,
    TensorFlowFacts,
    TorchFacts,
)

RIGS = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"


def rig(name: str) -> RigFacts:
    return RigFacts.from_dict(json.loads((RIGS / f"{name}.json").read_text()))


def found(facts: RigFacts) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in judge(facts):
        out.setdefault(f.id, []).append(f)
    return out


def one(facts: RigFacts, fid: str, severity: str | None = None):
    got = found(facts).get(fid)
    assert got, f"expected {fid}, got {sorted(found(facts))}"
    assert len(got) == 1, got
    if severity:
        assert got[0].severity == severity, got[0]
    assert got[0].fix.strip()
    return got[0]


def none_of(facts: RigFacts, *fids: str) -> None:
    got = set(found(facts))
    assert not (got & set(fids)), sorted(got & set(fids))


# --- driver -------------------------------------------------------------------------------------

def test_driver_library_mismatch_from_nvml_error():
    f = rig("driver_not_loaded")
    f.driver.error = "NVML: Driver/library version mismatch"
    f.pci_devices = [PciDeviceFacts(slot="0000:01:00.0", kind="gpu", driver="nvidia")]
    finding = one(f, "nvml-driver-mismatch", "error")
    assert "reboot" in finding.fix.lower()
    none_of(f, "driver-not-loaded", "no-nvidia-gpu")


def test_driver_library_mismatch_from_versions():
    f = rig("pcie_downtrained_x8")
    f.driver.kernel_module_version = "550.90.07"
    assert "550.90.07" in one(f, "nvml-driver-mismatch", "error").detail


def test_gpu_bound_to_vfio_next_to_working_ones():
    f = rig("pcie_downtrained_x8")
    f.pci_devices.append(PciDeviceFacts(slot="0000:e1:00.0", device_id="0x26b9", kind="gpu", driver="vfio-pci"))
    assert "vfio-pci" in one(f, "gpu-without-nvidia-driver", "warn").detail


def test_nouveau_holding_the_gpus_is_named():
    f = rig("driver_not_loaded")
    for d in f.pci_devices:
        if d.kind == "gpu":
            d.driver = "nouveau"
    assert "nouveau" in one(f, "driver-not-loaded", "error").detail


def test_gpu_listed_by_nvml_is_driven_even_if_sysfs_hides_the_driver_link():
    f = rig("pcie_downtrained_x8")
    for d in f.pci_devices:
        d.driver = None
    f.gpus[0].pci_bus_id = "00000000:17:00.0"  # nvidia-smi's spelling of the same address
    none_of(f, "gpu-without-nvidia-driver", "driver-not-loaded")


def test_container_started_without_gpus():
    f = rig("laptop_no_gpu")
    f.system.container = "docker"
    f.pci_devices = [PciDeviceFacts(slot="0000:18:00.0", kind="gpu", driver="nvidia")]
    assert "--gpus all" in one(f, "container-without-gpus", "error").fix
    none_of(f, "no-nvidia-gpu", "driver-not-loaded")


def test_driver_loaded_but_user_space_missing():
    f = rig("driver_not_loaded")
    f.driver.kernel_module_loaded = True
    f.driver.error = "NVML: NVML library (libnvidia-ml.so.1) not found; nvidia-smi: nvidia-smi not found on PATH"
    for d in f.pci_devices:
        if d.kind == "gpu":
            d.driver = "nvidia"
    assert "libnvidia-ml" in one(f, "nvml-unavailable", "error").detail
    none_of(f, "driver-not-loaded")


def test_driver_older_than_the_gpu_architecture():
    f = rig("pcie_downtrained_x8")
    for g in f.gpus:
        g.name, g.compute_capability = "NVIDIA GeForce RTX 5090", "12.0"
    f.driver.driver_version, f.driver.cuda_driver_version = "560.35.03", "12.6"
    assert "570.26" in one(f, "driver-too-old-for-gpu", "error").fix


def test_driver_branch_past_end_of_life_is_info_dated_by_the_snapshot():
    f = rig("nccl_p2p_disabled_nvlink")  # R570, end of life 2026-02
    f.collected_at = "2026-11-20T10:00:00+00:00"
    assert "R580" in one(f, "driver-branch-eol", "info").fix
    f.collected_at = "2025-12-01T10:00:00+00:00"
    none_of(f, "driver-branch-eol")
    f.collected_at = None
    none_of(f, "driver-branch-eol")


# --- frameworks ---------------------------------------------------------------------------------

def test_torch_cpu_build_on_a_gpu_machine():
    f = rig("pcie_downtrained_x8")
    f.frameworks.torch = TorchFacts(installed=True, version="2.6.0+cpu", cuda_build=None, cuda_available=False)
    finding = one(f, "torch-cpu-only-build", "error")
    assert "download.pytorch.org/whl/cu12" in finding.fix  # driver 560 runs cu128 via minor-version compat


def test_torch_not_installed_suggests_the_fitting_wheel():
    f = rig("nccl_p2p_disabled_nvlink")
    f.frameworks.torch = TorchFacts(installed=False)
    assert "whl/cu126" in one(f, "torch-not-installed", "error").fix  # driver 570: no cu130; 2.12 has cu126


def test_torch_import_crash_is_a_finding_not_a_failure():
    f = rig("v100x4_cu130")
    f.frameworks.torch = TorchFacts(installed=True, error="ImportError: libcudnn.so.9: cannot open shared object file")
    assert "libcudnn" in one(f, "torch-import-failed", "warn").detail


def test_torch_cuda_minor_version_compatibility():
    f = rig("pcie_downtrained_x8")  # driver 560.35.03 (CUDA 12.6)
    f.frameworks.torch = TorchFacts(installed=True, version="2.8.0+cu128", cuda_build="12.8",
                                    arch_list=["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
                                    cuda_available=True, device_count=2)
    one(f, "torch-cuda-minor-compat", "info")
    one(f, "torch-arch-ok", "ok")  # 8.9 runs sm_86 machine code
    none_of(f, "torch-cuda-too-new-for-driver", "torch-cuda-driver-ok")


def test_ptx_only_gpu_with_a_full_driver_is_a_warning():
    f = rig("pcie_downtrained_x8")
    for g in f.gpus:
        g.compute_capability = "13.0"  # newer than every machine code in the wheel
    f.driver.driver_version, f.driver.cuda_driver_version = "580.95.05", "13.0"
    f.frameworks.torch = TorchFacts(installed=True, version="2.9.1+cu130", cuda_build="13.0",
                                    arch_list=["sm_90", "sm_120", "compute_120"], cuda_available=True, device_count=2)
    one(f, "torch-arch-ptx-only", "warn")


def test_ptx_only_gpu_under_minor_version_compatibility_is_an_error():
    f = rig("pcie_downtrained_x8")
    for g in f.gpus:
        g.compute_capability = "13.0"
    f.driver.driver_version, f.driver.cuda_driver_version = "560.35.03", "12.6"
    f.frameworks.torch = TorchFacts(installed=True, version="2.8.0+cu129", cuda_build="12.9",
                                    arch_list=["sm_90", "sm_120", "compute_120"], cuda_available=True, device_count=2)
    finding = one(f, "torch-arch-ptx-needs-driver", "error")
    assert "575.51.03" in finding.fix


def test_arch_list_falls_back_to_the_published_wheel_when_the_probe_has_none():
    f = rig("v100x4_cu130")
    f.frameworks.torch.arch_list = []
    finding = one(f, "torch-arch-missing", "error")
    assert finding.evidence["arch_list_source"] == "gpurig's table of published wheels"


def test_torch_cannot_use_gpu_without_any_explanation():
    f = rig("pcie_downtrained_x8")
    f.frameworks.torch.cuda_available = False
    one(f, "torch-cannot-use-gpu", "error")


def test_torch_device_count_below_visible_gpus():
    f = rig("rtx4090x4_pcie_iommu")
    f.frameworks.torch.device_count = 3
    one(f, "torch-device-count-mismatch", "warn")


def tf(**kw) -> TensorFlowFacts:
    base = dict(installed=True, version="2.16.1", cuda_build="12.3", cudnn_build="8", built_with_cuda=True,
                gpus=["/physical_device:GPU:0", "/physical_device:GPU:1"])
    base.update(kw)
    return TensorFlowFacts(**base)


def test_tensorflow_sees_the_gpus():
    f = rig("pcie_downtrained_x8")
    f.frameworks.tensorflow = tf()
    assert "2 GPU" in one(f, "tf-ok", "ok").title


def test_tensorflow_without_cuda_libraries_sees_no_gpu():
    f = rig("pcie_downtrained_x8")
    f.frameworks.tensorflow = tf(gpus=[])
    assert "tensorflow[and-cuda]==2.16.*" in one(f, "tf-sees-no-gpu", "error").fix


def test_tensorflow_too_new_for_the_driver():
    f = rig("t4_driver470_cu128")
    f.frameworks.tensorflow = tf(gpus=[])
    finding = one(f, "tf-cuda-too-new-for-driver", "error")
    assert "525.60.13" in finding.fix and "tensorflow[and-cuda]==2.14.*" in finding.fix
    none_of(f, "tf-sees-no-gpu")


def test_tensorflow_cpu_build():
    f = rig("pcie_downtrained_x8")
    f.frameworks.tensorflow = tf(version="2.21.0", cuda_build=None, cudnn_build=None, built_with_cuda=False, gpus=[])
    one(f, "tf-cpu-only-build", "warn")


def test_tensorflow_cudnn_needs_a_newer_gpu():
    f = rig("pcie_downtrained_x8")
    for g in f.gpus:
        g.compute_capability = "3.7"
    f.driver.driver_version, f.driver.cuda_driver_version = "580.95.05", "13.0"
    f.frameworks.tensorflow = tf(cudnn_build="9.17")
    one(f, "tf-gpu-unsupported", "error")


def test_tensorflow_import_crash():
    f = rig("pcie_downtrained_x8")
    f.frameworks.tensorflow = TensorFlowFacts(installed=True, error="Illegal instruction (core dumped)")
    one(f, "tf-import-failed", "warn")


# --- environment --------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, fid, severity", [
    ("", "cuda-visible-devices-empty", "error"),
    ("0,gpu1", "cuda-visible-devices-malformed", "error"),
    ("1,1", "cuda-visible-devices-malformed", "error"),
    ("0,5", "cuda-visible-devices-missing-gpu", "error"),
    ("GPU-deadbeef", "cuda-visible-devices-missing-gpu", "error"),
    ("2,3", "cuda-visible-devices-hides-gpus", "warn"),
])
def test_cuda_visible_devices(raw, fid, severity):
    f = rig("rtx4090x4_pcie_iommu")
    f.env["CUDA_VISIBLE_DEVICES"] = raw
    one(f, fid, severity)


def test_cuda_visible_devices_by_uuid_prefix_is_fine():
    f = rig("rtx4090x4_pcie_iommu")
    f.env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid[:12] for g in f.gpus)
    assert not [x for x in found(f) if x.startswith("cuda-visible-devices")]


def test_mig_uuids_are_not_judged_against_gpu_uuids():
    f = rig("rtx4090x4_pcie_iommu")
    f.env["CUDA_VISIBLE_DEVICES"] = "MIG-6f2ad1c4-ae43-5c2a-a1f3-1ab2c3d4e5f6"
    assert not [x for x in found(f) if x.startswith("cuda-visible-devices")]


def test_device_order_is_fine_when_set():
    f = rig("workstation_mixed")
    f.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    none_of(f, "cuda-device-order")


def test_nccl_p2p_disable_with_unknown_hardware_is_only_info():
    f = rig("nccl_p2p_disabled_nvlink")
    for p in f.pairs:
        p.link = p.nvlink_count = p.p2p_read = None
    for g in f.gpus:
        g.nvlinks = []
    one(f, "nccl-p2p-disabled", "info")


def test_nccl_p2p_disable_is_silent_where_no_pair_has_peer_access():
    f = rig("rtx4090x4_pcie_iommu")
    f.env["NCCL_P2P_DISABLE"] = "1"
    none_of(f, "nccl-p2p-disabled")


def test_nccl_p2p_level_loc_counts_as_disabled():
    f = rig("nccl_p2p_disabled_nvlink")
    del f.env["NCCL_P2P_DISABLE"]
    f.env["NCCL_P2P_LEVEL"] = "LOC"
    assert "NCCL_P2P_LEVEL" in one(f, "nccl-p2p-disabled", "warn").fix


def test_nccl_p2p_disable_zero_is_not_disabled():
    f = rig("nccl_p2p_disabled_nvlink")
    f.env["NCCL_P2P_DISABLE"] = "0"
    none_of(f, "nccl-p2p-disabled")


def test_nccl_shm_disable_where_pairs_lack_p2p():
    f = rig("rtx4090x4_pcie_iommu")
    f.env["NCCL_SHM_DISABLE"] = "1"
    one(f, "nccl-shm-disabled", "warn")
    g = rig("nccl_p2p_disabled_nvlink")
    del g.env["NCCL_P2P_DISABLE"]
    g.env["NCCL_SHM_DISABLE"] = "1"
    one(g, "nccl-shm-disabled", "info")


def test_nccl_ib_disable_and_forced_algorithms():
    f = rig("nccl_p2p_disabled_nvlink")
    f.env.update({"NCCL_IB_DISABLE": "1", "NCCL_ALGO": "Ring"})
    one(f, "nccl-ib-disabled", "info")
    one(f, "nccl-algo-forced", "info")


# --- links --------------------------------------------------------------------------------------

def h200_pair() -> RigFacts:
    f = rig("pcie_downtrained_x8")
    buses = ["0000:18:00.0", "0000:2a:00.0"]
    for i, g in enumerate(f.gpus):
        g.name, g.compute_capability, g.pci_bus_id = "NVIDIA H200", "9.0", buses[i]
        g.pcie_gen_max, g.pcie_width_current = 5, 16
        g.nvlinks = [NvLinkFacts(link=n, active=True, speed_gbps=26.562, remote_pci_bus_id=buses[1 - i],
                                 remote_device_type="gpu") for n in range(18)]
    f.pairs = [GpuPairFacts(0, 1, "NV18", 18, True)]
    return f


def test_two_h200s_joined_by_18_nvlinks():
    finding = one(h200_pair(), "nvlink-ok", "ok")
    assert finding.title == "2 GPUs joined by 18 NVLinks (NV18)"
    assert "450 GB/s" in finding.detail


def test_nvlink_down_on_one_gpu():
    f = h200_pair()
    for nl in f.gpus[1].nvlinks[:2]:
        nl.active = False
    finding = one(f, "nvlink-links-down", "warn")
    assert finding.evidence == {"gpu": 1, "active_links": 16, "best_active_links": 18, "down_links": [0, 1]}
    none_of(f, "nvlink-ok")


def test_nvlink_running_slow():
    f = h200_pair()
    f.gpus[0].nvlinks[5].speed_gbps = 13.281
    one(f, "nvlink-slow-links", "warn")


def test_nvlink_ports_without_a_bridge():
    f = rig("pcie_downtrained_x8")
    for g in f.gpus:
        g.nvlinks = [NvLinkFacts(link=n, active=False) for n in range(4)]
    one(f, "nvlink-inactive", "info")
    none_of(f, "nvlink-links-down")


def test_pcie_generation_low_under_load_is_a_warning():
    f = rig("pcie_downtrained_x8")
    g = f.gpus[0]
    g.utilization_pct, g.throttle_reasons, g.pcie_gen_current = 95.0, [], 3
    assert "Gen3 under load" in one(f, "pcie-gen-below-max", "warn").title


def test_pcie_generation_low_with_unknown_load_is_info():
    f = rig("pcie_downtrained_x8")
    for g in f.gpus:
        g.utilization_pct, g.throttle_reasons = None, None
    assert "load unknown" in one(f, "pcie-gen-idle-downclock", "info").title


def test_fabric_manager_unknown_inside_a_container_and_running():
    f = rig("a100x8_nvswitch_no_fm")
    f.system.fabric_manager_running = None
    one(f, "fabric-manager-unknown", "info")
    f.system.fabric_manager_running = True
    for g in f.gpus:
        for nl in g.nvlinks:
            nl.active, nl.speed_gbps, nl.remote_device_type = True, 25.0, "switch"
    one(f, "fabric-manager-ok", "ok")
    assert "NVSwitch fabric" in one(f, "nvlink-ok", "ok").title


def test_pcie_p2p_with_iommu_on_and_peer_access_reported():
    f = rig("pcie_downtrained_x8")
    f.system.iommu = "on"
    assert "IOMMU is on" in one(f, "pcie-p2p-iommu", "warn").title


# --- GPUs ---------------------------------------------------------------------------------------

def test_ecc_errors():
    f = rig("nccl_p2p_disabled_nvlink")
    f.gpus[2].ecc_volatile_uncorrected = 3
    assert "nvidia-smi -r -i 2" in one(f, "ecc-uncorrected-errors", "error").fix
    g = rig("nccl_p2p_disabled_nvlink")
    g.gpus[1].ecc_aggregate_uncorrected = 7
    one(g, "ecc-uncorrected-errors", "warn")


@pytest.mark.parametrize("field, value, severity", [
    ("remapped_rows_failed", True, "error"),
    ("remapped_rows_pending", True, "error"),
    ("remapped_rows_uncorrectable", 2, "warn"),
])
def test_row_remapping(field, value, severity):
    f = rig("nccl_p2p_disabled_nvlink")
    setattr(f.gpus[0], field, value)
    one(f, "memory-rows-remapped", severity)


def test_retired_pages():
    f = rig("v100x4_cu130")
    f.gpus[3].retired_pages = 4
    one(f, "memory-pages-retired", "warn")
    f.gpus[3].retired_pages_pending = True
    one(f, "memory-pages-retired", "error")


def test_mig_and_compute_modes():
    f = rig("nccl_p2p_disabled_nvlink")
    f.gpus[0].mig_enabled = True
    f.gpus[1].compute_mode = "Exclusive_Process"
    f.gpus[2].compute_mode = "Prohibited"
    assert "-mig 0" in one(f, "mig-enabled", "warn").fix
    assert "-c DEFAULT" in one(f, "compute-mode-exclusive", "warn").fix
    one(f, "compute-mode-prohibited", "error")


def test_memory_held_without_a_visible_process():
    f = rig("pcie_downtrained_x8")
    f.gpus[0].memory_used_mib = 30000.0
    assert "another container" in one(f, "gpu-memory-in-use", "warn").detail


def test_a_small_context_is_not_memory_in_use():
    f = rig("pcie_downtrained_x8")
    f.gpus[0].memory_used_mib = 400.0
    f.gpus[0].processes = [GpuProcessFacts(pid=1234, name="Xorg", used_memory_mib=380.0)]
    none_of(f, "gpu-memory-in-use")


def test_power_cap_is_info_and_power_brake_a_warning():
    f = rig("pcie_downtrained_x8")
    f.gpus[0].throttle_reasons = ["sw_power_cap"]
    one(f, "gpu-power-capped", "info")
    f.gpus[0].throttle_reasons = ["hw_power_brake"]
    one(f, "gpu-throttled", "warn")


def test_same_model_is_not_mixed():
    none_of(rig("nccl_p2p_disabled_nvlink"), "mixed-gpu-models", "cuda-device-order")


def test_mixed_memory_sizes_of_one_name_count_as_mixed():
    f = rig("nccl_p2p_disabled_nvlink")
    f.gpus[3].memory_total_mib = 81920.0
    one(f, "mixed-gpu-models", "warn")


# --- system -------------------------------------------------------------------------------------

def test_small_shm_on_bare_metal_is_a_warning():
    f = rig("pcie_downtrained_x8")
    f.system.shm_total_bytes = 512 * 2**20
    finding = one(f, "shm-too-small", "warn")
    assert "remount" in finding.fix


def test_shm_in_container_fix_names_ipc_host():
    assert "--ipc=host" in one(rig("container_shm64"), "shm-too-small", "error").fix


def test_a_rule_that_crashes_is_reported_not_raised(monkeypatch):
    from gpurig.diagnose import rules

    def broken(ctx):
        raise KeyError("boom")

    monkeypatch.setattr(rules, "RULES", [broken, *rules.RULES])
    f = one(rig("laptop_no_gpu"), "doctor-rule-failed", "warn")
    assert "broken" in f.title
    one(rig("laptop_no_gpu"), "no-nvidia-gpu", "warn")


def test_gpus_found_lists_models():
    f = rig("workstation_mixed")
    title = one(f, "gpus-found", "ok").title
    assert "RTX 3090" in title and "RTX A6000" in title
    single = one(rig("t4_driver470_cu128"), "gpus-found", "ok").title
    assert single.startswith("1 GPU: Tesla T4")


def test_empty_snapshot():
    assert [f.id for f in judge(RigFacts())] == ["no-nvidia-gpu"]


def test_a_cuda_torch_on_a_machine_without_nvidia_gpus_is_a_note_with_the_cpu_wheel():
    """What `gpurig env pip` says for a CPU host, the doctor says too: the CUDA build runs, the CPU
    wheel is the one that fits."""
    facts = RigFacts(pci_devices=[])
    facts.frameworks.probed = True
    facts.frameworks.torch = TorchFacts(installed=True, version="2.14.1+cu130", cuda_build="13.0")
    f = one(facts, "torch-cuda-build-on-cpu-host", "info")
    assert "whl/cpu" in f.fix
    facts.frameworks.torch.cuda_build = None  # the CPU wheel: nothing to say
    none_of(facts, "torch-cuda-build-on-cpu-host")
    facts.frameworks.torch.cuda_build = "13.0"
    facts.pci_devices = [PciDeviceFacts(slot="0000:1b:00.0", kind="gpu", driver=None)]  # a GPU the driver misses
    none_of(facts, "torch-cuda-build-on-cpu-host")
