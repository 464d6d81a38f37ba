"""NvmlBackend against a stand-in `pynvml` module: unsupported queries become None, counters become
rates, slow-changing values are read less often. (The real NVML is exercised by the GPU tests.)"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from gpurig.monitor.sampler import MonitorUnavailable, NvmlBackend, Sampler


class NVMLError(Exception):
    pass


def fake_pynvml(gpus=2, nvlink_aggregate=True, pcie_fields=True, fail_init=None, nvlink_power=(1, 0, 0)):
    """nvlink_power: NVLink power states (1 = low power) the readings give in turn; None: not supported."""
    calls: dict[str, int] = {}
    clock = {"t": 0}
    states = {"i": 0}

    def counted(name, fn):
        def wrapper(*args):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args)
        wrapper.__name__ = name
        return wrapper

    def unsupported(*_args):
        raise NVMLError("Not Supported")

    def field_values(handle, fields):
        clock["t"] += 1
        out = []
        for fid, scope in fields:
            if fid in (167, 168, 224):  # NVLink power state; low-power threshold 500 x 100 us
                if fid == 167 and nvlink_power:
                    state = nvlink_power[states["i"] % len(nvlink_power)]
                    states["i"] += 1
                out.append(SimpleNamespace(nvmlReturn=0 if nvlink_power else 3,
                                           value=SimpleNamespace(uiVal={168: 500, 224: 0}.get(fid) if fid != 167
                                                                 else (state if nvlink_power else 0))))
                continue
            ok = (fid in (138, 139) and (nvlink_aggregate or scope != 0xFFFFFFFF)) or (fid in (197, 198) and pcie_fields)
            # NVLink counters in KiB: 1 GiB per reading; PCIe counters in bytes: 1 MB per reading
            value = clock["t"] * (2**20 if fid in (138, 139) else 10**6)
            out.append(SimpleNamespace(nvmlReturn=0 if ok else 3, value=SimpleNamespace(ullVal=value)))
        return out

    def init():
        if fail_init:
            raise NVMLError(fail_init)

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_SUCCESS, m.NVML_FEATURE_ENABLED, m.NVML_NVLINK_MAX_LINKS = 0, 1, 4
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU, m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 1, 0, 0, 1
    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: "Stand-in GPU"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    m.nvmlDeviceGetMaxClockInfo = lambda h, c: 1980
    m.nvmlDeviceGetNvLinkState = lambda h, link: 1 if link < 2 else 0
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=90, memory=40)
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=2**30, total=80 * 2**30)
    m.nvmlDeviceGetPowerUsage = lambda h: 500_000
    m.nvmlDeviceGetEnforcedPowerLimit = counted("nvmlDeviceGetEnforcedPowerLimit", lambda h: 700_000)
    m.nvmlDeviceGetTemperature = unsupported  # a GPU that does not report it
    m.nvmlDeviceGetClockInfo = lambda h, c: 1800
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    m.nvmlDeviceGetComputeRunningProcesses = counted(
        "nvmlDeviceGetComputeRunningProcesses", lambda h: [SimpleNamespace(pid=999_999_999, usedGpuMemory=None)])
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlDeviceGetPcieThroughput = counted("nvmlDeviceGetPcieThroughput", lambda h, c: 2000)  # KB/s
    return m, calls


@pytest.fixture
def use(monkeypatch):
    def _use(**kwargs):
        module, calls = fake_pynvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return calls
    return _use


def test_values_units_and_missing_metrics(use):
    use()
    with Sampler(NvmlBackend()) as sampler:
        sampler.sample()
        g = sampler.sample().gpus[0]
    assert g.name == "Stand-in GPU" and g.uuid == "GPU-0" and g.sm_clock_max_mhz == 1980
    assert g.power_w == 500.0 and g.power_limit_w == 700.0  # milliwatts to watts
    assert g.temperature_c is None  # unsupported: a value, not an error
    assert g.throttle_reasons == ["sw_power_cap"]
    assert g.processes[0].pid == 999_999_999 and g.processes[0].name is None  # pid of another namespace
    assert g.processes[0].used_memory_bytes is None


def test_counters_become_rates(use, monkeypatch):
    use()
    ticks = iter([0.0, 0.5, 1.0, 1.5])
    monkeypatch.setattr("gpurig.monitor.sampler.time.monotonic", lambda: next(ticks))
    backend = NvmlBackend()
    with Sampler(backend) as sampler:
        sampler.sample()
        g = sampler.sample().gpus[0]
    # the counters advance one step per read and GPU 0 is read at t=0.0 and t=1.0 (GPU 1 in between):
    # two steps, 2 GiB of NVLink and 2 MB of PCIe, in one second
    assert g.nvlink_tx_bytes_per_s == pytest.approx(2 * 2**30)
    assert g.pcie_tx_bytes_per_s == pytest.approx(2 * 10**6)
    assert "nvlink: aggregate counters (scope UINT_MAX)" in backend.notes


def test_per_link_counters_when_the_driver_has_no_aggregate(use):
    use(nvlink_aggregate=False)
    backend = NvmlBackend()
    with Sampler(backend) as sampler:
        sampler.sample()
        g = sampler.sample().gpus[0]
    assert "nvlink: per-link counters on 2 link(s)" in backend.notes
    assert g.nvlink_tx_bytes_per_s and g.nvlink_tx_bytes_per_s > 0


def test_pcie_falls_back_to_the_sampled_rate(use):
    calls = use(pcie_fields=False)
    with Sampler(NvmlBackend()) as sampler:
        g = sampler.sample().gpus[0]
    assert g.pcie_tx_bytes_per_s == 2000 * 1024.0  # KB/s from nvmlDeviceGetPcieThroughput
    assert calls["nvmlDeviceGetPcieThroughput"] >= 2


def test_slow_changing_values_are_read_less_often(use):
    calls = use(gpus=1)
    with Sampler(NvmlBackend()) as sampler:
        samples = [sampler.sample() for _ in range(12)]
    assert calls["nvmlDeviceGetComputeRunningProcesses"] == 3  # samples 0, 5, 10
    assert calls["nvmlDeviceGetEnforcedPowerLimit"] == 1
    assert all(s.gpus[0].processes and s.gpus[0].power_limit_w == 700.0 for s in samples)


def test_init_failure_is_one_line(use):
    use(fail_init="Driver Not Loaded")
    with pytest.raises(MonitorUnavailable, match="NVML could not start .Driver Not Loaded."):
        Sampler(NvmlBackend()).open()


def test_no_gpu(use):
    use(gpus=0)
    with pytest.raises(MonitorUnavailable, match="sees no GPU"):
        Sampler(NvmlBackend()).open()


def test_call_timing_for_the_bench(use):
    use()
    backend = NvmlBackend(time_calls=True)
    with Sampler(backend) as sampler:
        sampler.sample()
    assert "field_values" in backend.call_cpu_s and "nvmlDeviceGetEnforcedPowerLimit" in backend.call_cpu_s


def test_nvlink_power_state_and_its_idle_threshold(use):
    use(gpus=1, nvlink_power=(1, 0, 0))
    with Sampler(NvmlBackend()) as sampler:
        gpus = [sampler.sample().gpus[0] for _ in range(3)]
    assert [g.nvlink_low_power for g in gpus] == [True, False, False]  # asleep, then woken by traffic
    assert all(g.nvlink_low_power_threshold_ms == pytest.approx(50.0) for g in gpus)  # 500 x 100 us


def test_nvlink_power_state_unsupported_is_none_and_counters_still_work(use):
    use(gpus=1, nvlink_power=None)
    with Sampler(NvmlBackend()) as sampler:
        sampler.sample()
        g = sampler.sample().gpus[0]
    assert g.nvlink_low_power is None and g.nvlink_low_power_threshold_ms is None
    assert g.nvlink_tx_bytes_per_s and g.nvlink_tx_bytes_per_s > 0
