"""Every recorded rig under tests/fixtures/rigs/ through the doctor's rules.

`EXPECTED` says, per rig, the findings (id and severity) it must produce and the ids it must not.
A rig added to the folder without an entry still goes through the checks every rig gets: it loads,
the rules run without a rule failing, and every finding is well formed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpurig.diagnose.findings import SEVERITIES
from gpurig.diagnose.rules import judge
from gpurig.probe.facts import RigFacts

RIGS = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"
AREAS = {"driver", "gpus", "links", "frameworks", "system", "environment"}

# rig -> (must produce {id: severity}, must not produce {ids})
EXPECTED: dict[str, tuple[dict[str, str], set[str]]] = {
    "a100x8_nvswitch_no_fm": (
        {"nvswitch-no-fabric-manager": "error", "gpus-found": "ok", "driver-ok": "ok", "driver-branch-eol": "info",
         "torch-cuda-driver-ok": "ok", "torch-arch-ok": "ok"},
        # the fabric manager explains the dead links and torch's missing CUDA: said once, not three times
        {"nvlink-links-down", "nvlink-ok", "torch-cannot-use-gpu", "mixed-gpu-models", "no-nvidia-gpu",
         "pcie-width-degraded", "fabric-manager-ok", "p2p-ok"},
    ),
    "rtx4090x4_pcie_iommu": (
        {"pcie-p2p-iommu": "warn", "persistence-mode-off": "info", "pcie-gen-idle-downclock": "info",
         "pcie-ok": "ok", "torch-arch-ok": "ok", "torch-cuda-driver-ok": "ok"},
        {"nvlink-ok", "nvlink-links-down", "nvlink-inactive", "mixed-gpu-models", "cuda-device-order",
         "pcie-gen-below-max", "gpu-memory-in-use", "p2p-ok", "pcie-p2p-unavailable", "nccl-p2p-disabled"},
    ),
    "t4_driver470_cu128": (
        {"torch-cuda-too-new-for-driver": "error", "driver-ok": "ok"},
        {"torch-cannot-use-gpu", "torch-cuda-driver-ok", "torch-cuda-minor-compat", "no-nvidia-gpu",
         "torch-arch-missing", "pcie-p2p-iommu"},
    ),
    "v100x4_cu130": (
        {"torch-arch-missing": "error", "nvlink-ok": "ok", "torch-cuda-driver-ok": "ok", "p2p-ok": "ok"},
        {"torch-cuda-too-new-for-driver", "nvlink-links-down", "torch-arch-ok", "driver-too-old-for-gpu"},
    ),
    "laptop_no_gpu": (
        {"no-nvidia-gpu": "warn", "shm-ok": "ok"},
        {"torch-cpu-only-build", "driver-not-loaded", "pcie-p2p-iommu", "torch-not-installed", "driver-ok"},
    ),
    "container_shm64": (
        {"shm-too-small": "error", "torch-arch-ok": "ok"},
        {"driver-not-loaded", "gpu-without-nvidia-driver", "pcie-p2p-iommu", "shm-ok", "pcie-gen-below-max"},
    ),
    "nccl_p2p_disabled_nvlink": (
        {"nccl-p2p-disabled": "warn", "nvlink-ok": "ok", "p2p-ok": "ok", "torch-arch-ok": "ok"},
        {"nvswitch-no-fabric-manager", "fabric-manager-unknown", "nvlink-links-down", "nccl-shm-disabled"},
    ),
    "pcie_downtrained_x8": (
        {"pcie-width-degraded": "warn", "pcie-gen-idle-downclock": "info"},
        # both GPUs are idle: their Gen1 reading is power saving, not a fault
        {"pcie-gen-below-max", "pcie-ok", "nvlink-ok", "nvlink-inactive"},
    ),
    "driver_not_loaded": (
        {"driver-not-loaded": "error"},
        {"no-nvidia-gpu", "nvml-driver-mismatch", "torch-cannot-use-gpu", "torch-cpu-only-build", "driver-ok"},
    ),
    "workstation_mixed": (
        {"mixed-gpu-models": "warn", "cuda-device-order": "warn", "cuda-visible-devices-missing-gpu": "error",
         "gpu-throttled": "warn", "gpu-memory-in-use": "warn", "pcie-p2p-unavailable": "info"},
        {"cuda-visible-devices-malformed", "pcie-gen-below-max", "pcie-p2p-iommu", "torch-device-count-mismatch"},
    ),
    # The real capture from a 2x H200 NVLink machine (`gpurig doctor --save-facts`): a VM with two GPUs
    # of an HGX board, whose NVLinks go to NVSwitches the VM does not see.
    "h200x2": (
        {"nvlink-ok": "ok", "gpus-found": "ok", "driver-ok": "ok", "pcie-ok": "ok", "p2p-ok": "ok",
         "shm-ok": "ok", "torch-cuda-driver-ok": "ok", "torch-arch-ok": "ok"},
        {"nvlink-links-down", "nvlink-slow-links", "mixed-gpu-models", "no-nvidia-gpu", "driver-not-loaded",
         "nvml-driver-mismatch", "pcie-width-degraded", "torch-arch-missing", "torch-cuda-too-new-for-driver",
         "torch-cpu-only-build", "cuda-device-order", "nvswitch-no-fabric-manager"},
    ),
}

RIG_FILES = sorted(RIGS.glob("*.json"))


def load(path: Path) -> RigFacts:
    return RigFacts.from_dict(json.loads(path.read_text()))


def test_the_folder_holds_the_crafted_rigs():
    names = {p.stem for p in RIG_FILES}
    missing = set(EXPECTED) - names
    assert not missing, f"fixtures missing: {sorted(missing)}"


@pytest.mark.parametrize("path", RIG_FILES, ids=lambda p: p.stem)
def test_every_rig_judges_cleanly(path):
    findings = judge(load(path))
    assert findings, "every rig says at least something"
    ids = [f.id for f in findings]
    assert "doctor-rule-failed" not in ids, [f.detail for f in findings if f.id == "doctor-rule-failed"]
    for f in findings:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", f.id), f.id
        assert f.severity in SEVERITIES
        assert f.area in AREAS, (f.id, f.area)
        assert f.title.strip() and f.fix.strip(), f"{f.id}: empty title or fix"
        assert isinstance(f.evidence, dict) and f.evidence, f"{f.id}: no evidence"
        json.dumps(f.to_dict())  # findings go into --json output
        assert "None" not in f.title, f"{f.id}: an unknown value leaked into the title: {f.title}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rig_produces_its_findings(name):
    path = RIGS / f"{name}.json"
    must, must_not = EXPECTED[name]
    got = {}
    for f in judge(load(path)):
        got.setdefault(f.id, set()).add(f.severity)
    for fid, severity in must.items():
        assert fid in got, f"{name}: expected {fid}, got {sorted(got)}"
        assert severity in got[fid], f"{name}: {fid} is {got[fid]}, expected {severity}"
    unexpected = must_not & set(got)
    assert not unexpected, f"{name}: must not report {sorted(unexpected)}"


def test_judging_is_pure_and_repeatable():
    facts = load(RIGS / "workstation_mixed.json")
    before = facts.to_dict()
    first = [f.to_dict() for f in judge(facts)]
    assert [f.to_dict() for f in judge(facts)] == first
    assert facts.to_dict() == before, "judge() must not change the snapshot"


def test_t4_fix_names_the_driver_and_the_wheel_that_fits():
    (f,) = [f for f in judge(load(RIGS / "t4_driver470_cu128.json")) if f.id == "torch-cuda-too-new-for-driver"]
    assert "570.26" in f.fix and "525.60.13" in f.fix  # full driver, and the minor-version floor
    assert "https://download.pytorch.org/whl/cu118" in f.fix and "torch==2.7.*" in f.fix
    assert f.evidence["driver.driver_version"] == "470.82.01"


def test_v100_fix_points_to_a_wheel_with_sm70():
    (f,) = [f for f in judge(load(RIGS / "v100x4_cu130.json")) if f.id == "torch-arch-missing"]
    assert "sm_70" in f.title
    assert "download.pytorch.org/whl/cu126" in f.fix  # cu130 dropped Volta; 2.12 cu126 has sm_70


def test_real_h200_pair_summary():
    (f,) = [f for f in judge(load(RIGS / "h200x2.json")) if f.id == "nvlink-ok"]
    assert f.title == "2 GPUs joined by 18 NVLinks (NV18, through NVSwitch)"
    assert "450 GB/s" in f.detail


def test_t4_cannot_use_gpu_is_explained_by_the_driver_not_repeated():
    facts = load(RIGS / "t4_driver470_cu128.json")
    assert "too old" in facts.frameworks.torch.cuda_warning
    facts.driver.driver_version = facts.driver.cuda_driver_version = None  # the tables can no longer tell
    (f,) = [f for f in judge(facts) if f.id == "torch-cannot-use-gpu"]
    assert "too old" in f.detail  # torch's own words carry the diagnosis


def test_nvlink_summary_states_the_link_count_and_rate():
    (f,) = [f for f in judge(load(RIGS / "nccl_p2p_disabled_nvlink.json")) if f.id == "nvlink-ok"]
    assert "NV4" in f.title and "12 each" in f.detail and "25 GB/s" in f.detail
