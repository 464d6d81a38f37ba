"""`gpurig env pip`: the install line for each rig is the one the version facts give."""

from __future__ import annotations

import pytest
from env_rigs import CRAFTED, make_facts, recorded_rigs

from gpurig.errors import BadInput
from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as L
from gpurig.recipes.base import HostSummary
from gpurig.recipes.pip import pip_recipe


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


# Expected lines worked out by hand from reference/compat.md:
# - H200 (9.0), driver 580.95 (CUDA 13.0): torch 2.14's cu130 (floor 580.65.06, has sm_90).
# - T4 (7.5), driver 470.82 (CUDA 11.4): the 12.x floor 525.60.13 is out of reach; cu118 runs through
#   11.x minor-version compatibility (>= 450.80.02); the newest release with cu118 is 2.7.
# - V100 (7.0), driver 535 (12.2): cu130 dropped Volta; 2.13 and 2.14 are known only as cu130, and
#   2.12 dropped cu128 but kept cu126 (sm_70, floor 525.60.13 through minor-version compatibility).
# - A100 (8.0), driver 570.124 (12.8): cu130 needs 580.65.06, so 2.12's cu126.
@pytest.mark.parametrize("rig, line", [
    ("h200x2_r580", "pip install 'torch==2.14.*' --index-url https://download.pytorch.org/whl/cu130"),
    ("t4_r470", "pip install 'torch==2.7.*' --index-url https://download.pytorch.org/whl/cu118"),
    ("v100x4_r535", "pip install 'torch==2.12.*' --index-url https://download.pytorch.org/whl/cu126"),
    ("a100x8_r570", "pip install 'torch==2.12.*' --index-url https://download.pytorch.org/whl/cu126"),
    ("laptop_cpu", "pip install 'torch==2.15.*' --index-url https://download.pytorch.org/whl/cpu"),
])
def test_torch_line_for_crafted_rigs(rig, line):
    recipe = pip_recipe(HostSummary.from_facts(CRAFTED[rig]), "torch")
    assert recipe.fits
    assert last_line(recipe.text) == line
    assert recipe.reasons  # says why


@pytest.mark.parametrize("rig, line", [
    # TF 2.18+ is built with CUDA 12.5 (12.x floor 525.60.13); 2.21 supports Python 3.10-3.13.
    ("h200x2_r580", "pip install 'tensorflow[and-cuda]==2.21.*'"),
    # Driver 470 is below every 12.x floor: TF 2.14 (CUDA 11.8) is the newest [and-cuda] release it runs.
    ("t4_r470", "pip install 'tensorflow[and-cuda]==2.14.*'"),
    ("laptop_cpu", "pip install 'tensorflow==2.21.*'"),
])
def test_tf_line_for_crafted_rigs(rig, line):
    recipe = pip_recipe(HostSummary.from_facts(CRAFTED[rig]), "tf")
    assert recipe.fits
    assert last_line(recipe.text) == line


def test_every_line_is_commented():
    text = pip_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), "torch").text
    commands = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert commands == [last_line(text)]
    assert "driver 580.95.05" in text and "compute capability 9.0" in text


def test_blackwell_on_an_old_driver_says_which_driver():
    recipe = pip_recipe(HostSummary.from_facts(CRAFTED["rtx5090_r550"]), "torch")
    assert not recipe.fits
    assert "pip install" not in recipe.text
    # Blackwell first appeared in CUDA 12.8, whose driver is 570.26.
    assert "upgrade the driver to 570.26 or later" in recipe.text


def test_python_outside_every_release_is_told():
    facts = CRAFTED["h200x2_r580"]
    host = HostSummary.from_facts(facts)
    recipe = pip_recipe(host, "torch", python="3.6")
    assert not recipe.fits
    assert "needs Python" in recipe.text


def test_pinned_release_without_a_fitting_build_names_the_newest_that_fits():
    # torch 2.9's variants are cu126/cu128/cu130: driver 470 runs none of them; 2.7 cu118 fits.
    recipe = pip_recipe(HostSummary.from_facts(CRAFTED["t4_r470"]), "torch", torch_version="2.9")
    assert not recipe.fits
    assert "torch 2.7 cu118" in recipe.text


def test_older_python_gets_an_older_release():
    recipe = pip_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), "torch", python="3.9")
    # 2.9 dropped Python 3.9; 2.8 is the last with it, and its newest variant is cu129.
    assert last_line(recipe.text) == "pip install 'torch==2.8.*' --index-url https://download.pytorch.org/whl/cu129"


@pytest.mark.parametrize("kwargs, flag", [
    ({"framework": "jax"}, "--framework"),
    ({"python": "three"}, "--python"),
    ({"torch_version": "9.99"}, "--torch-version"),
    ({"framework": "tf", "torch_version": "2.9"}, "--torch-version"),
])
def test_bad_options_name_the_flag(kwargs, flag):
    with pytest.raises(BadInput, match=flag):
        pip_recipe(HostSummary.from_facts(CRAFTED["h200x2_r580"]), **kwargs)


RECORDED = recorded_rigs()


@pytest.mark.skipif(not RECORDED, reason="no recorded rig fixtures yet")
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_rig_gets_the_knowledge_files_answer(name):
    facts = RECORDED[name]
    host = HostSummary.from_facts(facts)
    recipe = pip_recipe(host, "torch")
    if host.gpus_without_driver:
        assert not recipe.fits and "driver is not loaded" in recipe.text
        return
    if not host.has_gpu:
        assert recipe.text.strip().endswith(f"--index-url {L.PYTORCH_INDEX}cpu")
        return
    answers = [kfw.torch_wheel_for_host(host.driver_version, cc, host.python) for cc in host.compute_capabilities]
    if any(a is None for a in answers) or not answers:
        assert not recipe.fits or not answers
        return
    expected = min(answers, key=lambda a: (L.version_key(a.torch_version), L.version_key(a.cuda)))
    assert recipe.fits
    assert last_line(recipe.text) == expected.pip_command


def test_gpu_without_driver_is_not_treated_as_a_cpu_host():
    from gpurig.probe.facts import PciDeviceFacts

    facts = make_facts([], None)
    facts.pci_devices = [PciDeviceFacts(slot="0000:01:00.0", device_id="0x2230", kind="gpu", driver=None)]
    recipe = pip_recipe(HostSummary.from_facts(facts), "torch")
    assert not recipe.fits
    assert "driver is not loaded" in recipe.text and "whl/cpu" not in recipe.text
