"""The questions other layers ask of the knowledge base, on cases with known answers."""

from __future__ import annotations

import pytest

from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import link_speeds as kls
from gpurig.knowledge import loaders as k


def test_min_driver_includes_minor_version_compatibility():
    assert k.min_driver_for_cuda("12.8") == "525.60.13"
    assert k.min_driver_for_cuda("12.8.1") == "525.60.13"
    assert k.min_driver_for_cuda("11.8") == "450.80.02"
    assert k.min_driver_for_cuda("13.0") == "580.65.06"
    assert k.min_driver_for_cuda("10.2") == "440.33"  # no minor-version compatibility in 10.x
    with pytest.raises(k.UnknownVersion):
        k.min_driver_for_cuda("9.0")


def test_full_driver_and_support_levels():
    assert k.full_driver_for_cuda("12.8") == "570.26"
    assert k.driver_support("12.8", "535.104.05") == "minor-version"
    assert k.driver_support("12.8", "570.26") == "full"
    assert k.driver_support("12.8", "470.82.01") == "none"
    assert k.driver_support("13.0", "575.57.08") == "none"  # CUDA 13 needs the R580 driver
    assert k.driver_support("14.0", "600.1") == "unknown"


def test_max_cuda_for_driver():
    assert k.max_cuda_for_driver("470.82.01") == "11.4"
    assert k.max_cuda_for_driver("470.57.02") == "11.4"
    assert k.max_cuda_for_driver("525.60.13") == "12.0"
    assert k.max_cuda_for_driver("570.26") == "12.8"
    assert k.max_cuda_for_driver("580.159.04") == "13.0"
    assert k.max_cuda_for_driver("418.67") is None


def test_version_key_orders_driver_strings_numerically():
    assert k.driver_meets("570.124.06", "570.26")
    assert not k.driver_meets("570.26", "570.124.06")
    assert k.version_key("2.11.0+cu130") == (2, 11, 0)
    with pytest.raises(k.UnknownVersion):
        k.version_key("garbage")


def test_torch_variants_and_arch_lists():
    assert kfw.torch_variants("2.8.0+cu128") == ["cu126", "cu128", "cu129"]
    assert kfw.torch_variants("2.11.0") == ["cu126", "cu128", "cu130"]
    assert kfw.torch_variants("9.9") == []
    assert "sm_70" not in kfw.torch_arch_list("2.7.1", "cu128")  # 2.7's cu128 lacked Volta
    assert "sm_70" in kfw.torch_arch_list("2.8", "cu128")
    assert "sm_70" not in kfw.torch_arch_list("2.11", "cu130")
    assert kfw.torch_arch_list("2.9", "cu130")[-1] == "compute_120"
    assert kfw.torch_arch_list("2.11.0+cu130", "cu130") == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert kfw.torch_arch_list("2.11", "cu999") == []


def test_arch_coverage_follows_cuda_binary_compatibility():
    arch = ["sm_80", "sm_90"]
    assert kfw.arch_coverage(arch, "8.6") == "sass"  # sm_80 runs on 8.6
    assert kfw.arch_coverage(arch, "9.0") == "sass"
    assert kfw.arch_coverage(arch, "7.5") is None
    assert kfw.arch_coverage(arch, "10.0") is None  # machine code never crosses a major
    assert kfw.arch_coverage(["sm_90", "compute_90"], "10.0") == "ptx"
    assert kfw.arch_coverage(["sm_90a"], "9.0") == "sass"
    assert kfw.arch_coverage(["sm_80a"], "8.6") is None


def test_torch_wheel_for_t4_on_driver_470_is_cu118():
    choice = kfw.torch_wheel_for_host("470.82.01", "7.5")
    assert (choice.torch_version, choice.variant) == ("2.7", "cu118")
    assert choice.index_url == "https://download.pytorch.org/whl/cu118"
    assert "450.80.02" in choice.reason


def test_torch_wheel_for_h200_on_driver_580_is_cu130():
    choice = kfw.torch_wheel_for_host("580.159.04", "9.0", python="3.11")
    assert (choice.torch_version, choice.variant, choice.coverage) == ("2.14", "cu130", "sass")
    assert choice.pip_command == "pip install 'torch==2.14.*' --index-url https://download.pytorch.org/whl/cu130"


def test_torch_wheel_for_v100_avoids_cu130():
    choice = kfw.torch_wheel_for_host("580.95.05", "7.0")
    assert choice.variant == "cu126" and choice.torch_version == "2.12"  # 2.13/2.14: cu130 only, no Volta
    assert kfw.torch_wheel_for_host("580.95.05", "7.0", torch_version="2.11").variant == "cu128"


def test_torch_wheel_respects_python_and_torch_version():
    assert kfw.torch_wheel_for_host("580.95.05", "9.0", python="3.8").torch_version == "2.4"
    assert kfw.torch_wheel_for_host("580.95.05", "9.0", torch_version="2.8").variant == "cu129"
    assert kfw.torch_wheel_for_host("535.104.05", "9.0", torch_version="2.8").variant == "cu129"
    assert kfw.torch_wheel_for_host("470.82.01", "7.5", torch_version="2.8") is None


def test_torch_wheel_needs_full_driver_for_ptx_only_coverage():
    # A hypothetical 12.1-class GPU (same major as sm_120) runs sm_120 code; a capability above every
    # listed one in a new major (13.0) only gets PTX, which needs the full CUDA 13.0 driver.
    ptx = kfw.torch_wheel_for_host("580.95.05", "12.1")
    assert ptx.coverage == "sass"


def test_torch_wheel_none_when_driver_older_than_the_gpu():
    assert kfw.torch_wheel_for_host("535.104.05", "12.0") is None  # Blackwell needs 570+
    assert k.min_driver_for_gpu("12.0") == "570.26"


def test_torch_wheel_with_unknowns_says_so():
    choice = kfw.torch_wheel_for_host(None, None)
    assert choice.variant == "cu130"
    assert any("driver" in n for n in choice.notes) and any("capability" in n for n in choice.notes)


def test_tf_build_and_tf_for_host():
    b = kfw.tf_build("2.16.1")
    assert (b.cuda, b.cudnn, b.python_max) == ("12.3", "8.9", "3.12")
    assert b.min_driver == "525.60.13"
    assert kfw.tf_build("1.15") is None
    assert kfw.tf_for_host("580.95.05", "9.0", "3.11").tf_version == "2.21"
    assert kfw.tf_for_host("580.95.05", "9.0", "3.9").tf_version == "2.20"
    assert kfw.tf_for_host("470.82.01", "7.5", "3.10").tf_version == "2.14"  # 11.8 via minor compat
    assert kfw.tf_for_host("440.33") is None


def test_cudnn_queries():
    assert kfw.cudnn_supports_cuda("9.3.0", "12.5") is True
    assert kfw.cudnn_supports_cuda("8.9.7", "12.3") is False
    assert kfw.cudnn_supports_cuda("9.17", "13.0") is True
    assert kfw.cudnn_supports_cuda("8.5", "11.8") is None  # between rows: unknown
    assert kfw.cudnn_min_cc("9.17") == "7.5"


def test_arch_and_cards():
    assert k.arch_for_cc("9.0").name == "Hopper"
    assert k.arch_for_cc("8.9").name == "Ada"
    assert k.arch_for_cc("8.7").name == "Ampere"
    assert k.arch_for_cc("7.0").last_driver_branch == "R580"
    assert k.arch_for_cc("2.0") is None
    assert k.cc_for_card("NVIDIA H200") == "9.0"
    assert k.cc_for_card("NVIDIA A100-SXM4-80GB") == "8.0"
    assert k.cc_for_card("NVIDIA A10") == "8.6"  # not A100
    assert k.cc_for_card("NVIDIA L40S") == "8.9"
    assert k.cc_for_card("Tesla V100-SXM2-32GB") == "7.0"
    assert k.cc_for_card("Matrox G200") is None


def test_links():
    assert kls.nvlink_per_link_gbps("9.0") == 25.0
    assert kls.nvlink_generation("9.0").links_per_gpu == 18
    assert kls.nvlink_per_link_gbps(5) == 50.0
    assert kls.nvlink_per_link_gbps("NVLink 3") == 25.0
    assert kls.nvlink_per_link_gbps("8.9") is None  # Ada has no NVLink
    assert kls.pcie_gbps(4, 16) == pytest.approx(31.5, abs=0.1)
    assert kls.pcie_gbps(5, 16) == pytest.approx(63.0, abs=0.1)
    assert kls.pcie_gbps(4, 8) == pytest.approx(kls.pcie_gbps(4, 16) / 2)
    with pytest.raises(k.UnknownVersion):
        kls.pcie_gbps(9, 16)
    with pytest.raises(ValueError):
        kls.pcie_gbps(4, 0)
