"""The NVML reader's logic, driven by a fake NVML that behaves like the real binding.

The fake answers like nvidia-ml-py does (same function names, same return shapes, NVMLError with
a return code for anything unsupported), so the mapping from NVML to `GpuFacts`, the topology
codes and the NVLink counting are tested without a GPU. The same code runs against the real
library in `test_probe_gpu.py`.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpurig.probe import nvml as nvml_reader

NOT_SUPPORTED, GPU_IS_LOST, MISMATCH = 3, 15, 18


class FakeNVMLError(Exception):
    def __init__(self, value: int, text: str = ""):
        self.value = value
        super().__init__(text or {3: "Not Supported", 15: "GPU is lost",
                                  18: "RM has detected an NVML/RM version mismatch."}.get(value, "Unknown Error"))


class FakeNvml:
    """A machine as NVML would describe it. `gpus` is a list of dicts of per-GPU answers."""

    NVMLError = FakeNVMLError
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus, links=None, topology=None, p2p=None, init_error=None, broken=(), lost=()):
        self.gpus = gpus
        self.links = links or {}  # (gpu, link) -> (active, remote bus id, remote type)
        self.topology = topology or {}  # (a, b) -> NVML topology level
        self.p2p = p2p or {}  # (a, b) -> status
        self.init_error = init_error
        self.broken = set(broken)  # function names that raise a non-NVML exception
        self.lost = set(lost)
        self.initialised = False
        self.shutdown_called = False

    def _g(self, h, key):
        value = self.gpus[h].get(key)
        if value is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return value

    def __getattribute__(self, name):
        if name in object.__getattribute__(self, "broken"):
            def boom(*a):
                raise TypeError("bad struct")
            return boom
        return object.__getattribute__(self, name)

    # -- system
    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlSystemGetNVMLVersion(self):
        return b"13.580.95.05"

    def nvmlSystemGetProcessName(self, pid):
        return {4242: "python"}.get(pid) or (_ for _ in ()).throw(FakeNVMLError(6))

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if i in self.lost:
            raise FakeNVMLError(GPU_IS_LOST)
        return i

    # -- per GPU
    def nvmlDeviceGetName(self, h):
        return self._g(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._g(h, "uuid")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._g(h, "bus").encode())

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._g(h, "cc")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self._g(h, "mem_total"), used=self._g(h, "mem_used"), free=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._g(h, "gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._g(h, "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._g(h, "width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._g(h, "width_max")

    def nvmlDeviceGetEccMode(self, h):
        return [self._g(h, "ecc"), self._g(h, "ecc")]

    def nvmlDeviceGetTotalEccErrors(self, h, etype, counter):
        return self._g(h, "ecc_errors")[counter]

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return self._g(h, "retired")[cause]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._g(h, "retired_pending")

    def nvmlDeviceGetRemappedRows(self, h):
        return self._g(h, "remapped")

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._g(h, "persistence")

    def nvmlDeviceGetComputeMode(self, h):
        return self._g(h, "compute_mode")

    def nvmlDeviceGetMigMode(self, h):
        return [self._g(h, "mig"), 0]

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._g(h, "clocks")[clock]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._g(h, "max_clocks")[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._g(h, "reasons")

    def nvmlDeviceGetPowerUsage(self, h):
        return self._g(h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._g(h, "limit_mw")

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._g(h, "temp")

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._g(h, "util"), memory=0)

    def nvmlDeviceGetCpuAffinity(self, h, words):
        mask = self._g(h, "cpu_mask")
        return (mask + [0] * words)[:words]

    def nvmlDeviceGetMemoryAffinity(self, h, words, scope):
        return [self._g(h, "node_mask")]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.gpus[h].get("procs", [])]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        raise FakeNVMLError(NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if (h, link) not in self.links:
            raise FakeNVMLError(NOT_SUPPORTED)
        return int(self.links[(h, link)][0])

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self.links[(h, link)][1].encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        kind = self.links[(h, link)][2]
        if kind is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return kind

    def nvmlDeviceGetFieldValues(self, h, ids):
        speed = self.gpus[h].get("nvlink_mbps")
        out = []
        for fid in ids:
            ok = speed is not None and fid == 90  # only the "common" speed field answers here
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=0 if ok else NOT_SUPPORTED, valueType=1,
                                       value=SimpleNamespace(uiVal=speed or 0)))
        return out

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.topology.get((a, b), self.topology.get((b, a), 50))

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == 0
        if (a, b) not in self.p2p:
            raise FakeNVMLError(NOT_SUPPORTED)
        return self.p2p[(a, b)]


def h100(i: int, bus: str, **over):
    gpu = dict(
        name="NVIDIA H100 80GB HBM3", uuid=f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", bus=bus, cc=(9, 0),
        mem_total=85520809984, mem_used=4 * 2**20, gen=5, gen_max=5, width=16, width_max=16, ecc=1,
        ecc_errors=(0, 3), remapped=(0, 1, 0, 0), persistence=1, compute_mode=0, mig=0,
        clocks={1: 1980, 2: 2619}, max_clocks={1: 1980}, reasons=0x21, power_mw=69830, limit_mw=700000,
        temp=31, util=0, cpu_mask=[0x0000FFFF0000FFFF], node_mask=0b1, nvlink_mbps=26562,
    )
    gpu.update(over)
    return gpu


def two_gpus_bridged(links_per_gpu=4, inactive=2):
    buses = ["00000000:18:00.0", "00000000:2A:00.0"]
    links = {}
    for g in (0, 1):
        peer = buses[1 - g]
        for link in range(links_per_gpu):
            links[(g, link)] = (True, peer, 0)
        for link in range(links_per_gpu, links_per_gpu + inactive):
            links[(g, link)] = (False, "", 0)
    gpus = [h100(0, buses[0], procs=[(4242, 70112 * 2**20)]), h100(1, buses[1], node_mask=0b10)]
    return FakeNvml(gpus, links=links, topology={(0, 1): 50}, p2p={(0, 1): 0, (1, 0): 0})


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
    assert g.retired_pages is None  # Hopper: NVML says "not supported", the GPU remaps rows instead
    assert (g.remapped_rows_uncorrectable, g.remapped_rows_pending, g.remapped_rows_failed) == (1, False, False)
    assert g.persistence_mode is True and g.compute_mode == "Default" and g.mig_enabled is False
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.memory_clock_mhz) == (1980, 1980, 2619)
    assert g.throttle_reasons == ["gpu_idle", "sw_thermal"]
    assert g.power_draw_w == pytest.approx(69.83) and g.power_limit_w == 700.0
    assert g.temperature_c == 31.0 and g.utilization_pct == 0.0
    assert g.cpu_affinity == "0-15,32-47" and g.numa_node == 0
    assert res.gpus[1].numa_node == 1
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
