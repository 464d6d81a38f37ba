"""The NVML reader's logic, driven by a fake NVML that behaves like the real binding.

The fake answers like nvidia-ml-py does (same function names, same return shapes, NVMLError with
a return code for anything unsupported), so the mapping from NVML to `GpuFacts`, the topology
codes and the NVLink counting are tested without a GPU. The same code runs against the real
library in `test_probe_gpu.py`.
"""

from __future__ import annotations

import pytest
from probe_fakes import MISMATCH, FakeNvml, h100, two_gpus_bridged

from gpurig.probe import nvml as nvml_reader


def test_gpu_fields_come_out_in_the_units_the_facts_promise():
    fake = two_gpus_bridged()
    res = nvml_reader.read_nvml(fake)
    assert res.ok and fake.shutdown_called
    d = res.driver
    assert (d.source, d.driver_version, d.cuda_driver_version, d.nvml_version) == ("nvml", "580.95.05", "13.0",
                                                                                  "13.580.95.05")
    g = res.gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3" and g.compute_capability == "9.0"
    assert g.pci_bus_id == "0000:18:00.0"
    assert g.memory_total_mib == pytest.approx(81559.0) and g.memory_used_mib == 4.0
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.ecc_enabled is True and g.ecc_volatile_uncorrected == 0 and g.ecc_aggregate_uncorrected == 3
    assert (g.ecc_volatile_corrected, g.ecc_aggregate_corrected) == (2, 41)
    assert g.retired_pages is None  # Hopper: NVML says "not supported", the GPU remaps rows instead
    assert (g.remapped_rows_uncorrectable, g.remapped_rows_pending, g.remapped_rows_failed) == (1, False, False)
    assert g.persistence_mode is True and g.compute_mode == "Default" and g.mig_enabled is False
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.memory_clock_mhz) == (1980, 1980, 2619)
    assert g.throttle_reasons == ["gpu_idle", "sw_thermal"]
    assert g.power_draw_w == pytest.approx(69.83) and g.power_limit_w == 700.0 and g.power_default_limit_w == 700.0
    assert g.temperature_c == 31.0 and g.utilization_pct == 0.0
    assert g.cpu_affinity == "0-15,32-47" and g.numa_node == 0
    assert res.gpus[1].numa_node == 1
    # Link health: PCIe replays and NVLink error counters (nvidia-smi -q -d PCIE, nvidia-smi nvlink -e).
    assert g.pcie_replay_count == 0 and res.gpus[1].pcie_replay_count == 12
    links1 = {nl.link: nl for nl in res.gpus[1].nvlinks}
    assert links1[1].replay_errors == 3 and links1[2].crc_data_errors == 1 and links1[0].recovery_errors == 0
    assert links1[4].replay_errors is None  # an inactive link has no counters
    assert [(p.pid, p.name, p.used_memory_mib) for p in g.processes] == [(4242, "python", 70112.0)]


def test_nvlinks_and_the_pair_they_make():
    res = nvml_reader.read_nvml(two_gpus_bridged(links_per_gpu=4, inactive=2))
    links = res.gpus[0].nvlinks
    assert [nl.active for nl in links] == [True] * 4 + [False] * 2
    assert links[0].remote_pci_bus_id == "0000:2a:00.0" and links[0].remote_device_type == "gpu"
    assert links[0].speed_gbps == 26.562 and links[5].speed_gbps is None
    (pair,) = res.pairs
    assert (pair.gpu_a, pair.gpu_b, pair.link, pair.nvlink_count, pair.p2p_read) == (0, 1, "NV4", 4, True)


def test_nvswitch_pairs_count_the_links_to_the_switch():
    buses = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"]
    links = {(g, link): (True, f"00000000:{0x80 + link % 4:02X}:00.0", 2) for g in range(3) for link in range(18)}
    fake = FakeNvml([h100(i, b) for i, b in enumerate(buses)], links=links, topology={(0, 1): 40, (0, 2): 40, (1, 2): 40})
    res = nvml_reader.read_nvml(fake)
    assert [p.link for p in res.pairs] == ["NV18"] * 3
    assert res.pairs[0].p2p_read is None  # NVML did not answer: unknown, not False


def test_pcie_pairs_get_the_topology_code():
    buses = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:9A:00.0"]
    fake = FakeNvml([h100(i, b) for i, b in enumerate(buses)], topology={(0, 1): 10, (0, 2): 20, (1, 2): 30},
                    p2p={(0, 1): 0, (0, 2): 0, (1, 2): 2})
    res = nvml_reader.read_nvml(fake)
    assert [(p.link, p.nvlink_count, p.p2p_read) for p in res.pairs] == [("PIX", 0, True), ("PXB", 0, True),
                                                                           ("PHB", 0, False)]
    assert res.gpus[0].nvlinks == []


def test_a_gpu_that_supports_almost_nothing_gives_none_not_an_exception():
    bare = {"name": "Old GPU", "bus": "00000000:01:00.0"}  # every other query: NOT_SUPPORTED
    res = nvml_reader.read_nvml(FakeNvml([bare]))
    g = res.gpus[0]
    assert g.name == "Old GPU"
    assert g.compute_capability is None and g.memory_total_mib is None and g.throttle_reasons is None
    assert g.ecc_enabled is None and g.ecc_volatile_uncorrected is None and g.persistence_mode is None
    assert g.nvlinks == [] and g.processes == []
    assert res.notes == []  # "not supported" is an answer, not a problem


def test_a_binding_bug_becomes_a_note_and_a_none():
    res = nvml_reader.read_nvml(FakeNvml([h100(0, "00000000:18:00.0")], broken={"nvmlDeviceGetTemperature"}))
    assert res.gpus[0].temperature_c is None
    assert res.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert any("nvmlDeviceGetTemperature" in n and "bad struct" in n for n in res.notes)


def test_pre_ampere_retired_pages_are_counted():
    v100 = h100(0, "00000000:18:00.0", name="Tesla V100-SXM2-32GB", cc=(7, 0), retired=([0x1000], [0x2000, 0x3000]),
                retired_pending=1, remapped=None)
    g = nvml_reader.read_nvml(FakeNvml([v100])).gpus[0]
    assert g.retired_pages == 3 and g.retired_pages_pending is True
    assert g.remapped_rows_uncorrectable is None
    assert g.compute_capability == "7.0"


def test_init_failure_is_a_fact_in_the_users_words():
    res = nvml_reader.read_nvml(FakeNvml([], init_error=MISMATCH))
    assert not res.ok and res.gpus == [] and res.driver.source is None
    assert res.driver.error.startswith("NVML: Driver/library version mismatch")
    assert "RM has detected an NVML/RM version mismatch" in res.driver.error


def test_a_lost_gpu_is_kept_with_a_note():
    fake = FakeNvml([h100(0, "00000000:18:00.0"), h100(1, "00000000:2A:00.0")], lost={1})
    res = nvml_reader.read_nvml(fake)
    assert [g.index for g in res.gpus] == [0, 1]
    assert res.gpus[1].name is None
    assert any("GPU 1" in n and "GPU is lost" in n for n in res.notes)
    assert res.pairs == []  # no pair can be judged with a GPU NVML cannot open


@pytest.mark.parametrize("value, text", [(13000, "13.0"), (12080, "12.8"), (11040, "11.4"), (0, None), (None, None)])
def test_cuda_version_string(value, text):
    assert nvml_reader.cuda_version_string(value) == text


def test_cpu_list_from_mask_spans_words():
    assert nvml_reader.cpu_list_from_mask([0, 0b1011]) == "64-65,67"
    assert nvml_reader.cpu_list_from_mask([0]) is None


def test_the_real_binding_without_a_driver_gives_an_error_not_an_exception():
    pynvml = pytest.importorskip("pynvml")
    res = nvml_reader.read_nvml(pynvml)
    assert res.ok or res.driver.error.startswith("NVML: ")


def test_links_to_a_gpu_hidden_from_this_container_are_not_switch_links():
    # 4 bridged GPUs in pairs (0-1, 2-3) but the container only got GPUs 0 and 2.
    buses = ["00000000:18:00.0", "00000000:9A:00.0"]
    hidden = ["00000000:2A:00.0", "00000000:AB:00.0"]
    links = {(g, link): (True, hidden[g], 0) for g in range(2) for link in range(4)}
    fake = FakeNvml([h100(i, b) for i, b in enumerate(buses)], links=links, topology={(0, 1): 50})
    (pair,) = nvml_reader.read_nvml(fake).pairs
    assert (pair.link, pair.nvlink_count) == ("SYS", 0)


def test_switch_links_recognised_by_bus_when_nvml_does_not_name_the_far_end():
    buses = ["00000000:18:00.0", "00000000:2A:00.0"]
    links = {(g, link): (True, "00000000:05:00.0", None) for g in range(2) for link in range(12)}
    (pair,) = nvml_reader.read_nvml(FakeNvml([h100(i, b) for i, b in enumerate(buses)], links=links)).pairs
    assert (pair.link, pair.nvlink_count) == ("NV12", 12)


def test_per_link_speeds_from_the_scoped_field_as_current_drivers_give_them():
    fake = two_gpus_bridged(links_per_gpu=4, inactive=0)
    fake.gpus[0]["nvlink_get_speed"] = {0: 26562, 1: 26562, 2: 26562, 3: 13281}  # one link trained down
    fake.gpus[0]["nvlink_mbps"] = None
    links = nvml_reader.read_nvml(fake).gpus[0].nvlinks
    assert [nl.speed_gbps for nl in links] == [26.562, 26.562, 26.562, 13.281]


def test_a_switch_hidden_from_a_vm_has_no_bus_id_but_still_makes_nv18():
    # As on a 2xH200 VM: every link active, the far end FFFFFFFF:FF:FF.0 of type "switch".
    buses = ["00000000:00:06.0", "00000000:00:07.0"]
    links = {(g, link): (True, "FFFFFFFF:FF:FF.0", 2) for g in range(2) for link in range(18)}
    res = nvml_reader.read_nvml(FakeNvml([h100(i, b) for i, b in enumerate(buses)], links=links, p2p={(0, 1): 0}))
    assert {nl.remote_pci_bus_id for nl in res.gpus[0].nvlinks} == {None}
    (pair,) = res.pairs
    assert (pair.link, pair.nvlink_count, pair.p2p_read) == ("NV18", 18, True)


def test_memory_used_leaves_out_what_the_driver_reserves():
    g = nvml_reader.read_nvml(FakeNvml([h100(0, "00000000:18:00.0", mem_used=0)])).gpus[0]
    assert g.memory_used_mib == 0.0  # nvidia-smi shows 0 MiB on an idle GPU; NVML v1 would say 615
