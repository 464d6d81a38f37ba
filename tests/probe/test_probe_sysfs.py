"""PCI, kernel-module and system facts read from a fake sysfs/procfs tree."""

from __future__ import annotations

import pytest
from probe_fakes import base_tree, hgx_tree, pci_device, write

from gpurig.probe import pci, system
from gpurig.probe.facts import PciDeviceFacts


def test_nvidia_devices_are_classified_and_their_driver_named(tmp_path):
    hgx_tree(tmp_path)
    devices = pci.read_pci_devices(tmp_path)
    assert [(d.slot, d.kind, d.driver, d.device_id) for d in devices] == [
        ("0000:05:00.0", "nvswitch", "nvidia", "0x22a3"),
        ("0000:18:00.0", "gpu", "nvidia", "0x2330"),
        ("0000:2a:00.0", "gpu", "nvidia", "0x2330"),
    ]


def test_a_gpu_with_no_driver_bound_is_still_seen(tmp_path):
    hgx_tree(tmp_path, driver=None)
    pci_device(tmp_path, "0000:65:00.0", "0x10de", "0x2684", "0x030000", "nouveau")
    pci_device(tmp_path, "0000:65:00.1", "0x10de", "0x22ba", "0x040300", "snd_hda_intel")
    kinds = {d.slot: (d.kind, d.driver) for d in pci.read_pci_devices(tmp_path)}
    assert kinds["0000:18:00.0"] == ("gpu", None)
    assert kinds["0000:65:00.0"] == ("gpu", "nouveau")
    assert kinds["0000:65:00.1"] == ("audio", "snd_hda_intel")


def test_no_nvidia_device_and_no_sysfs_are_different_answers(tmp_path):
    pci_device(tmp_path, "0000:00:00.0", "0x8086", "0x09a2", "0x060000")
    assert pci.read_pci_devices(tmp_path) == []
    assert pci.read_pci_devices(tmp_path / "nowhere") is None


def test_numa_node_and_cpu_list_of_a_gpu(tmp_path):
    hgx_tree(tmp_path)
    assert pci.pci_numa_node("00000000:18:00.0", tmp_path) == 0
    assert pci.pci_numa_node("0000:05:00.0", tmp_path) is None  # -1: the kernel does not know
    assert pci.pci_cpu_list("00000000:18:00.0", tmp_path) == "0-47,96-143"


@pytest.mark.parametrize("raw, norm", [("00000000:1B:00.0", "0000:1b:00.0"), ("0000:1b:00.0", "0000:1b:00.0"),
                                       ("1b:00.0", "0000:1b:00.0"), ("00000001:C1:00.0", "0001:c1:00.0"),
                                       ("", None), (None, None)])
def test_normalize_bus_id(raw, norm):
    assert pci.normalize_bus_id(raw) == norm


def test_kernel_module_loaded_with_version(tmp_path):
    write(tmp_path, "proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22)  "
          "Tue Sep 23 09:49:15 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    assert pci.read_kernel_module(tmp_path) == (True, "580.95.05")


def test_kernel_module_proprietary_banner(tmp_path):
    write(tmp_path, "proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n")
    assert pci.read_kernel_module(tmp_path) == (True, "535.183.01")


def test_kernel_module_not_loaded_vs_unknown(tmp_path):
    (tmp_path / "sys/module/i915").mkdir(parents=True)
    assert pci.read_kernel_module(tmp_path) == (False, None)
    assert pci.read_kernel_module(tmp_path / "empty") == (None, None)


def test_system_facts_of_a_bare_metal_host(tmp_path):
    base_tree(tmp_path)
    (tmp_path / "sys/class/iommu").mkdir(parents=True)
    s = system.collect_system(tmp_path, pci_devices=[], environ={})
    assert s.os == "Ubuntu 22.04.4 LTS"
    assert s.kernel == "5.15.0-105-generic"
    assert s.cpu_model == "Intel(R) Xeon(R) Platinum 8480+" and s.cpu_count == 4
    assert s.ram_total_gib == pytest.approx(2015.53, abs=0.01)
    assert s.shm_total_bytes and s.shm_total_bytes > 0 and s.shm_free_bytes is not None
    assert s.container is None
    assert s.iommu == "off"
    assert s.numa_nodes == 2
    assert s.nvswitch_count == 0
    assert s.fabric_manager_running is False  # bare metal, /proc readable, no nv-fabricmanager
    assert s.memlock_limit_bytes is None  # a fake tree is not this process


def test_fabric_manager_seen_in_proc(tmp_path):
    base_tree(tmp_path)
    write(tmp_path, "proc/2211/comm", "nv-fabricmanager\n")
    switch = [PciDeviceFacts(slot="0000:05:00.0", kind="nvswitch")]
    s = system.collect_system(tmp_path, pci_devices=switch, environ={})
    assert s.nvswitch_count == 1 and s.fabric_manager_running is True


def test_fabric_manager_unknowable_inside_a_container(tmp_path):
    base_tree(tmp_path)
    write(tmp_path, ".dockerenv", "")
    s = system.collect_system(tmp_path, pci_devices=[PciDeviceFacts(slot="0000:05:00.0", kind="nvswitch")],
                              environ={})
    assert s.container == "docker"
    assert s.fabric_manager_running is None


@pytest.mark.parametrize("files, env, expected", [
    ({".dockerenv": ""}, {}, "docker"),
    ({"run/.containerenv": ""}, {}, "podman"),
    ({"proc/1/cgroup": "12:pids:/kubepods/besteffort/pod1/abc\n"}, {}, "kubernetes"),
    ({}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes"),
    ({"proc/1/cgroup": "1:name=systemd:/docker/4f1c2d\n"}, {}, "docker"),
    ({"proc/1/cgroup": "0::/system.slice/containerd.service\n"}, {}, "container"),
    ({"proc/1/cgroup": "0::/\n"}, {}, None),
])
def test_container_detection(tmp_path, files, env, expected):
    for rel, text in files.items():
        write(tmp_path, rel, text)
    assert system.detect_container(tmp_path, env) == expected


@pytest.mark.parametrize("cmdline, units, expected", [
    ("quiet", ["dmar0"], "on"),
    ("intel_iommu=on iommu=pt", ["dmar0"], "passthrough"),
    ("amd_iommu=on", [], "off"),  # asked for, but no IOMMU unit came up
    ("intel_iommu=off", ["dmar0"], "off"),
    ("quiet", [], "off"),
    ("quiet", None, None),  # no /sys/class/iommu at all: cannot tell
    ("intel_iommu=on", None, "on"),
])
def test_iommu_state(tmp_path, cmdline, units, expected):
    write(tmp_path, "proc/cmdline", cmdline + "\n")
    if units is not None:
        (tmp_path / "sys/class/iommu").mkdir(parents=True)
        for u in units:
            (tmp_path / "sys/class/iommu" / u).mkdir()
    assert system.detect_iommu(tmp_path) == expected


def test_shm_of_this_machine_reads_as_numbers():
    # statvfs of a real mount: /dev/shm of this machine (whatever its size) reads as numbers.
    total, free = system.read_shm("/")
    assert total is None or (total >= free >= 0)


def test_memlock_limit_is_an_int_or_unlimited():
    value = system.read_memlock_limit()
    assert value is None or value == -1 or value >= 0


def test_cgroup_v2_limits_of_a_container(tmp_path):
    write(tmp_path, "proc/self/cgroup", "0::/\n")
    write(tmp_path, "sys/fs/cgroup/cpu.max", "400000 100000\n")  # docker run --cpus 4
    write(tmp_path, "sys/fs/cgroup/memory.max", str(16 * 2**30) + "\n")  # --memory 16g
    assert system.read_cgroup_limits(tmp_path) == (4.0, 16 * 2**30)
    assert system.usable_cpus(tmp_path, cpu_count=64) == 4


def test_cgroup_v1_limits_in_the_process_own_cgroup(tmp_path):
    write(tmp_path, "proc/self/cgroup", "4:memory:/job/7\n3:cpu,cpuacct:/job/7\n")
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/job/7/cpu.cfs_quota_us", "250000\n")
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/job/7/cpu.cfs_period_us", "100000\n")
    write(tmp_path, "sys/fs/cgroup/memory/job/7/memory.limit_in_bytes", "9223372036854771712\n")
    assert system.read_cgroup_limits(tmp_path) == (2.5, None)  # the huge number means unlimited
    assert system.usable_cpus(tmp_path, cpu_count=64) == 3


def test_no_cgroup_limits(tmp_path):
    write(tmp_path, "proc/self/cgroup", "0::/\n")
    write(tmp_path, "sys/fs/cgroup/cpu.max", "max 100000\n")
    write(tmp_path, "sys/fs/cgroup/memory.max", "max\n")
    assert system.read_cgroup_limits(tmp_path) == (None, None)
    assert system.usable_cpus(tmp_path, cpu_count=8) == 8
