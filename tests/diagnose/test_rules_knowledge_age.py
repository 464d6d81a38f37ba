"""A torch newer than the knowledge table is said plainly, instead of wheel advice that silently downgrades."""

from gpurig.diagnose.rules import judge
from gpurig.knowledge import frameworks as kfw
from gpurig.knowledge import loaders as kb
from gpurig.probe.facts import RigFacts


def _facts(version: str) -> RigFacts:
    f = RigFacts()
    f.frameworks.probed = True
    f.frameworks.torch.installed = True
    f.frameworks.torch.version = version
    f.frameworks.torch.cuda_build = "13.0"
    return f


def _newest() -> str:
    return max((r.torch for r in kfw.torch_releases()), key=kb.version_key)


def test_newer_torch_is_an_info_finding_naming_both_versions():
    major, minor = kb.version_key(_newest())[:2]
    version = f"{major}.{minor + 3}.1+cu130"
    found = {f.id: f for f in judge(_facts(version))}
    f = found["torch-newer-than-knowledge"]
    assert f.severity == "info" and version in f.title and _newest() in f.title and f.fix


def test_a_known_release_says_nothing():
    ids = [f.id for f in judge(_facts(_newest() + ".0+cu130"))]
    assert "torch-newer-than-knowledge" not in ids


def test_an_unparseable_version_says_nothing():
    ids = [f.id for f in judge(_facts("nightly"))]
    assert "torch-newer-than-knowledge" not in ids
