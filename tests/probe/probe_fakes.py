"""Fakes shared by the probe tests: an NVML that answers like nvidia-ml-py, a stand-in nvidia-smi,
and a sysfs/procfs tree.

The fake NVML has the binding's function names and return shapes, and raises NVMLError with a
return code for anything "unsupported", so the reader's logic is tested without a GPU.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "smi"

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

    nvmlMemory_v2 = 0x02000028

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        # Version 1 counts the driver's reserved memory as used; version 2 does not.
        reserved = 0 if version == self.nvmlMemory_v2 else self.gpus[h].get("mem_reserved", 0)
        return SimpleNamespace(total=self._g(h, "mem_total"), used=self._g(h, "mem_used") + reserved, free=0)

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
        if etype == 0:  # corrected
            return self.gpus[h].get("ecc_corrected", (0, 0))[counter]
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

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        if not self.links[(h, link)][0]:
            raise FakeNVMLError(NOT_SUPPORTED)
        return self.gpus[h].get("nvlink_errors", {}).get((link, counter), 0)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._g(h, "default_limit_mw")

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._g(h, "pcie_replay")

    def nvmlDeviceGetFieldValues(self, h, ids):
        common = self.gpus[h].get("nvlink_mbps")  # old drivers: NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON (90)
        per_link = self.gpus[h].get("nvlink_get_speed", {})  # current drivers: (164, link)
        out = []
        for fid in ids:
            if isinstance(fid, tuple):
                fid, scope = fid
                value = per_link.get(scope) if fid == 164 else None
            else:
                scope, value = 0, common if fid == 90 else None
            out.append(SimpleNamespace(fieldId=fid, scopeId=scope, nvmlReturn=NOT_SUPPORTED if value is None else 0,
                                       valueType=1, value=SimpleNamespace(uiVal=value or 0)))
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
        temp=31, util=0, cpu_mask=[0x0000FFFF0000FFFF], node_mask=0b1, nvlink_mbps=26562, mem_reserved=615 * 2**20,
        pcie_replay=0, default_limit_mw=700000, ecc_corrected=(2, 41),
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
    gpus = [h100(0, buses[0], procs=[(4242, 70112 * 2**20)]),
            h100(1, buses[1], node_mask=0b10, pcie_replay=12, nvlink_errors={(1, 0): 3, (2, 3): 1})]
    return FakeNvml(gpus, links=links, topology={(0, 1): 50}, p2p={(0, 1): 0, (1, 0): 0})


def fake_smi(tmp_path: Path, failing: str | None = None, unknown_field: str | None = None) -> str:
    """A stand-in `nvidia-smi` that answers from the fixture files, like the real tool."""
    script = tmp_path / "nvidia-smi"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        from pathlib import Path
        smi = Path({str(SMI)!r})
        args = sys.argv[1:]
        failing = {failing!r}
        unknown = {unknown_field!r}
        if failing:
            print((smi / failing).read_text(), end="")
            sys.exit(9 if "mismatch" in failing else 1)
        if not args:
            print((smi / "smi_banner_2x_h100.txt").read_text(), end="")
        elif args[0].startswith("--query-gpu="):
            fields = args[0].split("=", 1)[1].split(",")
            if unknown and unknown in fields:
                print('Field "%s" is not a valid field to query.' % unknown)
                sys.exit(2)
            # answer with the recorded rows, keeping only the columns asked for
            full = {list(__import__("gpurig.probe.smi", fromlist=["x"]).QUERY_FIELDS)!r}
            for line in (smi / "query_gpu_2x_h100.csv").read_text().splitlines():
                cells = [c.strip() for c in line.split(",")]
                print(", ".join(cells[full.index(f)] for f in fields))
        elif args[0].startswith("--query-compute-apps="):
            print((smi / "compute_apps_2x_h100.csv").read_text(), end="")
        elif args[:2] == ["topo", "-m"]:
            print("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID")
            print("GPU0\\t X \\tNV18\\t0-47\\t0\\t\\tN/A")
            print("GPU1\\tNV18\\t X \\t0-47\\t0\\t\\tN/A")
        elif args[:3] == ["topo", "-p2p", "r"]:
            print(" \\tGPU0\\tGPU1\\t\\n GPU0\\tX\\tOK\\t\\n GPU1\\tOK\\tX\\t")
        elif args[:2] == ["nvlink", "-s"]:
            print((smi / "nvlink_s_2x_h100.txt").read_text(), end="")
        else:
            sys.exit(1)
        """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


# -- a fake sysfs/procfs tree

def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def pci_device(root: Path, slot: str, vendor: str, device: str, klass: str, driver: str | None = None,
               numa: int = -1, cpus: str = "0-7") -> None:
    base = f"sys/bus/pci/devices/{slot}"
    write(root, f"{base}/vendor", vendor + "\n")
    write(root, f"{base}/device", device + "\n")
    write(root, f"{base}/class", klass + "\n")
    write(root, f"{base}/numa_node", f"{numa}\n")
    write(root, f"{base}/local_cpulist", cpus + "\n")
    if driver:
        drv = root / "sys/bus/pci/drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(drv, root / base / "driver")


def hgx_tree(root: Path, driver: str | None = "nvidia") -> None:
    """Two H100 GPUs, an NVSwitch, an Intel NIC and a host bridge."""
    pci_device(root, "0000:00:00.0", "0x8086", "0x09a2", "0x060000")
    pci_device(root, "0000:18:00.0", "0x10de", "0x2330", "0x030200", driver, numa=0, cpus="0-47,96-143")
    pci_device(root, "0000:2a:00.0", "0x10de", "0x2330", "0x030200", driver, numa=1)
    pci_device(root, "0000:05:00.0", "0x10de", "0x22a3", "0x068000", driver)
    pci_device(root, "0000:31:00.0", "0x15b3", "0x1021", "0x020000", "mlx5_core")


def base_tree(root: Path) -> None:
    write(root, "etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    write(root, "proc/sys/kernel/osrelease", "5.15.0-105-generic\n")
    cpuinfo = "".join(f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\n" for i in range(4))
    write(root, "proc/cpuinfo", cpuinfo)
    write(root, "proc/meminfo", "MemTotal:       2113442196 kB\nMemFree:        100 kB\n")
    (root / "dev/shm").mkdir(parents=True)
    write(root, "proc/1/cgroup", "0::/init.scope\n")
    write(root, "proc/1/comm", "systemd\n")
    write(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n")
    for n in (0, 1):
        (root / f"sys/devices/system/node/node{n}").mkdir(parents=True)
    (root / "sys/devices/system/node/possible").parent.mkdir(parents=True, exist_ok=True)
    write(root, "sys/devices/system/node/possible", "0-1\n")
