"""Unknown facts (None) never raise an alarm: blanking any fact can only remove problems, not add them."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from gpurig.diagnose.rules import judge
from gpurig.probe.facts import DriverFacts, GpuFacts, GpuPairFacts, RigFacts, SystemFacts

RIGS = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"
RIG_FILES = sorted(RIGS.glob("*.json"))


def load(path: Path) -> RigFacts:
    return RigFacts.from_dict(json.loads(path.read_text()))


# Symptoms judged on known framework facts (torch.cuda.is_available() is False) that the doctor
# leaves unsaid while another finding explains them; blanking the explanation rightly brings them out.
SYMPTOMS = {"torch-cannot-use-gpu", "tf-sees-no-gpu"}


def problems(facts: RigFacts) -> set[str]:
    return {f.id for f in judge(facts) if f.severity in ("error", "warn")} - SYMPTOMS


def optional_fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.default is None]


def blanked(facts: RigFacts, where: str, name: str) -> RigFacts:
    out = copy.deepcopy(facts)
    if where == "gpu":
        for g in out.gpus:
            setattr(g, name, None)
    elif where == "pair":
        for p in out.pairs:
            setattr(p, name, None)
    elif where == "driver":
        setattr(out.driver, name, None)
    elif where == "system":
        setattr(out.system, name, None)
    return out


CASES = ([("gpu", n) for n in optional_fields(GpuFacts)] + [("pair", n) for n in optional_fields(GpuPairFacts)]
         + [("driver", n) for n in optional_fields(DriverFacts)] + [("system", n) for n in optional_fields(SystemFacts)])


@pytest.mark.parametrize("path", RIG_FILES, ids=lambda p: p.stem)
def test_blanking_one_fact_adds_no_problem(path):
    facts = load(path)
    base = problems(facts)
    for where, name in CASES:
        added = problems(blanked(facts, where, name)) - base
        assert not added, f"{path.stem}: unknown {where}.{name} raised {sorted(added)}"


@pytest.mark.parametrize("path", RIG_FILES, ids=lambda p: p.stem)
def test_a_snapshot_that_knows_nothing_but_the_gpu_count_raises_nothing(path):
    facts = load(path)
    bare = RigFacts(gpus=[GpuFacts(index=g.index) for g in facts.gpus],
                    pairs=[GpuPairFacts(gpu_a=p.gpu_a, gpu_b=p.gpu_b) for p in facts.pairs])
    findings = judge(bare)
    if facts.gpus:
        assert [f for f in findings if f.severity in ("error", "warn")] == []
    else:
        assert [f.id for f in findings] == ["no-nvidia-gpu"]


def test_frameworks_not_probed_are_not_judged():
    facts = load(RIGS / "t4_driver470_cu128.json")
    facts.frameworks.probed = False
    ids = {f.id for f in judge(facts)}
    assert not {i for i in ids if i.startswith(("torch-", "tf-"))}
