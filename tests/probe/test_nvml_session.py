"""The one NVML wrapper's light reads (gpu_count, basic_gpus): missing is an answer, never an exception."""

from __future__ import annotations

from gpurig.probe import nvml as N


class _Error(Exception):
    pass


class _FakeNvml:
    NVMLError = _Error

    def __init__(self, gpus, init_fails=False):
        self.gpus, self.init_fails, self.shut = gpus, init_fails, 0

    def nvmlInit(self):
        if self.init_fails:
            raise _Error("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shut += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.gpus[h]["name"].encode()

    def nvmlDeviceGetUUID(self, h):
        return self.gpus[h]["uuid"]

    def nvmlDeviceGetCudaComputeCapability(self, h):
        if "cc" not in self.gpus[h]:
            raise _Error("Not Supported")
        return self.gpus[h]["cc"]

    def nvmlDeviceGetMemoryInfo(self, h):
        class M:
            total = 141 * 2**30
        return M()


def test_basic_gpus_reads_each_gpu_and_tolerates_unsupported_queries():
    fake = _FakeNvml([{"name": "NVIDIA H200", "uuid": "GPU-a", "cc": (9, 0)}, {"name": "Old", "uuid": "GPU-b"}])
    gpus = N.basic_gpus(fake)
    assert [(g.index, g.name, g.uuid, g.compute_capability) for g in gpus] == [
        (0, "NVIDIA H200", "GPU-a", "9.0"), (1, "Old", "GPU-b", None)]
    assert gpus[0].memory_total_mib == 141 * 1024 and fake.shut == 1
    assert N.gpu_count(fake) == 2


def test_no_driver_is_no_gpu_not_an_exception():
    assert N.basic_gpus(_FakeNvml([], init_fails=True)) == [] and N.gpu_count(_FakeNvml([], init_fails=True)) == 0
