"""The nvidia-smi parsers on recorded outputs, and the fallback reader against a fake nvidia-smi."""

from __future__ import annotations

from probe_fakes import SMI, fake_smi

from gpurig.probe import smi


def read(name: str) -> str:
    return (SMI / name).read_text()


def test_topo_matrix_8x_nvswitch_with_nics_and_numa_columns():
    topo = smi.parse_topo_matrix(read("topo_m_8x_h100_nvswitch.txt"))
    assert len(topo.pairs) == 28  # 8 choose 2; NIC columns are not GPU pairs
    assert {p.link for p in topo.pairs} == {"NV18"}
    assert all(p.nvlink_count == 18 for p in topo.pairs)
    assert topo.cpu_affinity[0] == "0-47,96-143"
    assert topo.cpu_affinity[7] == "48-95,144-191"
    assert topo.numa_affinity[3] == 0 and topo.numa_affinity[4] == 1


def test_topo_matrix_pcie_box_gives_each_pair_its_code():
    topo = smi.parse_topo_matrix(read("topo_m_4x_rtx4090_pcie.txt"))
    links = {(p.gpu_a, p.gpu_b): p.link for p in topo.pairs}
    assert links == {(0, 1): "PIX", (0, 2): "NODE", (0, 3): "NODE", (1, 2): "NODE", (1, 3): "NODE", (2, 3): "PXB"}
    assert all(p.nvlink_count == 0 for p in topo.pairs)
    assert topo.cpu_affinity == {0: "0-31", 1: "0-31", 2: "0-31", 3: "0-31"}


def test_topo_matrix_pasted_with_spaces_and_no_gpu_numa_column():
    topo = smi.parse_topo_matrix(read("topo_m_2x_sys_spaces.txt"))
    assert [(p.gpu_a, p.gpu_b, p.link) for p in topo.pairs] == [(0, 1, "SYS")]
    assert topo.cpu_affinity == {0: "0-15,32-47", 1: "16-31,48-63"}
    assert topo.numa_affinity == {0: 0, 1: 1}


def test_topo_matrix_strips_terminal_colours_and_reads_na_affinity():
    text = "\t\x1b[4mGPU0\t GPU1\x1b[0m\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\tN/A\tN/A\nGPU1\tNV4\t X \tN/A\tN/A\n"
    topo = smi.parse_topo_matrix(text)
    assert [(p.link, p.nvlink_count) for p in topo.pairs] == [("NV4", 4)]
    assert topo.cpu_affinity == {0: None, 1: None}
    assert topo.numa_affinity == {0: None, 1: None}


def test_topo_matrix_of_garbage_is_empty_not_an_error():
    assert smi.parse_topo_matrix("No devices were found\n").pairs == []


def test_topo_p2p_read_matrix():
    p2p = smi.parse_topo_p2p(read("topo_p2p_r_4x_pcie.txt"))
    assert p2p[(0, 1)] is True
    assert p2p[(2, 3)] is False and p2p[(3, 2)] is False
    assert (0, 0) not in p2p


def test_nvlink_status_speeds():
    links = smi.parse_nvlink_status(read("nvlink_s_2x_h100.txt"))
    assert sorted(links) == [0, 1]
    assert len(links[0]) == 18
    assert all(nl.active and nl.speed_gbps == 26.562 for nl in links[1])


def test_nvlink_status_inactive_links():
    links = smi.parse_nvlink_status(read("nvlink_s_v100_inactive.txt"))[0]
    assert [nl.link for nl in links if not nl.active] == [3, 5]
    assert [nl.speed_gbps for nl in links if nl.active] == [25.781] * 4


def test_query_gpu_h100_row_values_and_units():
    gpus = smi.parse_query_gpu(read("query_gpu_2x_h100.csv"), list(smi.QUERY_FIELDS))
    assert [g.index for g in gpus] == [0, 1]
    a, b = gpus
    assert a.name == "NVIDIA H100 80GB HBM3"
    assert a.pci_bus_id == "0000:18:00.0" and b.pci_bus_id == "0000:2a:00.0"
    assert a.compute_capability == "9.0"
    assert a.memory_total_mib == 81559.0 and a.memory_used_mib == 70116.0
    assert (b.pcie_gen_current, b.pcie_gen_max, b.pcie_width_current, b.pcie_width_max) == (1, 5, 8, 16)
    assert a.ecc_enabled is True and b.ecc_volatile_uncorrected == 2
    assert a.retired_pages is None and a.retired_pages_pending is None  # "[N/A]" on Hopper
    assert a.persistence_mode is True and b.persistence_mode is False
    assert b.compute_mode == "Exclusive_Process"
    assert a.mig_enabled is False
    assert a.throttle_reasons == [] and b.throttle_reasons == ["sw_power_cap", "sw_thermal"]
    assert b.power_draw_w == 699.10 and b.power_limit_w == 700.0
    assert b.temperature_c == 87.0 and b.utilization_pct == 100.0
    assert b.sm_clock_mhz == 1755 and b.sm_clock_max_mhz == 1980 and b.memory_clock_mhz == 2619


def test_query_gpu_t4_retired_pages_and_na_mig():
    (g,) = smi.parse_query_gpu(read("query_gpu_t4.csv"), list(smi.QUERY_FIELDS))
    assert g.retired_pages == 1  # single-bit + double-bit retirements
    assert g.retired_pages_pending is False
    assert g.mig_enabled is None  # "[N/A]": the T4 has no MIG
    assert g.throttle_reasons == ["gpu_idle"]


def test_compute_apps_keyed_by_normalised_bus_id():
    apps = smi.parse_compute_apps(read("compute_apps_2x_h100.csv"))
    assert apps[0][0] == "0000:18:00.0"
    assert apps[0][1].pid == 48211 and apps[0][1].used_memory_mib == 70112.0
    assert apps[1][1].used_memory_mib is None


def test_banner_and_failures():
    assert smi.parse_smi_header(read("smi_banner_2x_h100.txt")) == ("580.95.05", "13.0")
    assert smi.smi_failure(read("smi_version_mismatch.txt")) == "Failed to initialize NVML: Driver/library version mismatch"
    assert "couldn't communicate with the NVIDIA driver" in smi.smi_failure(read("smi_driver_not_loaded.txt"))
    assert smi.smi_failure(read("smi_banner_2x_h100.txt")) is None


def test_read_smi_end_to_end_with_a_fake_tool(tmp_path):
    res = smi.read_smi(fake_smi(tmp_path))
    assert res.error is None
    assert (res.driver_version, res.cuda_driver_version) == ("580.95.05", "13.0")
    assert [g.name for g in res.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert res.gpus[0].processes[0].pid == 48211
    assert res.gpus[0].cpu_affinity == "0-47" and res.gpus[1].numa_node == 0
    assert len(res.gpus[1].nvlinks) == 18
    (pair,) = res.pairs
    assert (pair.link, pair.nvlink_count, pair.p2p_read) == ("NV18", 18, True)


def test_read_smi_drops_a_field_the_driver_does_not_know(tmp_path):
    res = smi.read_smi(fake_smi(tmp_path, unknown_field="compute_cap"))
    assert res.error is None
    assert [g.compute_capability for g in res.gpus] == [None, None]
    assert [g.memory_total_mib for g in res.gpus] == [81559.0, 81559.0]
    assert any("compute_cap" in n for n in res.notes)


def test_read_smi_reports_the_driver_mismatch_as_said(tmp_path):
    res = smi.read_smi(fake_smi(tmp_path, failing="smi_version_mismatch.txt"))
    assert res.error == "Failed to initialize NVML: Driver/library version mismatch"
    assert res.gpus == []


def test_read_smi_without_the_tool(tmp_path):
    res = smi.read_smi(str(tmp_path / "no-such-nvidia-smi"))
    assert res.error and res.gpus == []


def test_real_2x_h200_captures():
    topo = smi.parse_topo_matrix(read("topo_m_2x_h200.txt"))  # header wrapped in underline codes
    (pair,) = topo.pairs
    assert (pair.gpu_a, pair.gpu_b, pair.link, pair.nvlink_count) == (0, 1, "NV18", 18)
    assert topo.cpu_affinity == {0: "0-31", 1: "0-31"} and topo.numa_affinity == {0: 0, 1: 0}
    assert smi.parse_topo_p2p(read("topo_p2p_r_2x_h200.txt")) == {(0, 1): True, (1, 0): True}
    links = smi.parse_nvlink_status(read("nvlink_s_2x_h200.txt"))
    assert {g: len(ls) for g, ls in links.items()} == {0: 18, 1: 18}
    assert {nl.speed_gbps for ls in links.values() for nl in ls} == {26.562}
    assert smi.parse_smi_header(read("smi_banner_2x_h200.txt")) == ("580.159.04", "13.0")


def test_topo_matrix_old_soc_code_reads_as_sys():
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n"
    assert [p.link for p in smi.parse_topo_matrix(text).pairs] == ["SYS"]


def test_real_2x_h200_query_gpu():
    gpus = smi.parse_query_gpu(read("query_gpu_2x_h200.csv"), list(smi.QUERY_FIELDS))
    assert [(g.index, g.name, g.compute_capability, g.pci_bus_id) for g in gpus] == [
        (0, "NVIDIA H200", "9.0", "0000:00:06.0"), (1, "NVIDIA H200", "9.0", "0000:00:07.0")]
    g = gpus[0]
    assert (g.memory_total_mib, g.memory_used_mib) == (143771.0, 0.0)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.ecc_enabled is True and g.ecc_volatile_uncorrected == 0 and g.retired_pages is None
    assert g.persistence_mode is True and g.compute_mode == "Default" and g.mig_enabled is False
    assert g.throttle_reasons == ["gpu_idle"] and g.power_limit_w == 700.0
