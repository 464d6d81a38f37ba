"""Which files `--facts` takes as a snapshot: every recorded rig and a fresh probe; never a file with no facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpurig.errors import BadInput
from gpurig.probe.collect import collect_facts
from gpurig.probe.snapshot import load_facts_file, save_facts_file

RIGS = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"


@pytest.mark.parametrize("rig", sorted(p.name for p in RIGS.glob("*.json")))
def test_every_recorded_rig_loads(rig):
    facts = load_facts_file(RIGS / rig)
    assert facts.holds_facts()


def test_a_fresh_probe_of_this_machine_loads_back(tmp_path):
    path = save_facts_file(collect_facts(frameworks=False), tmp_path / "rig.json")
    assert load_facts_file(path).system.python


@pytest.mark.parametrize("content", [
    {},
    {"schema_version": 1},
    {"env": {"CUDA_VISIBLE_DEVICES": "0"}, "notes": []},
    {"gpus": [], "driver": {}, "system": {}},
    {"facts": {}, "findings": []},  # `gpurig doctor --json` of nothing
])
def test_a_snapshot_with_no_facts_is_refused(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(content))
    with pytest.raises(BadInput) as exc:
        load_facts_file(path)
    assert str(exc.value).startswith(f"--facts {path}: holds no facts")


@pytest.mark.parametrize("content, kind", [("[]", "a list"), ("3", "a number"), ("null", "null"), ('"x"', "a string")])
def test_a_json_value_that_is_not_an_object_is_named_in_json_words(tmp_path, content, kind):
    path = tmp_path / "rig.json"
    path.write_text(content)
    with pytest.raises(BadInput, match=f"expected a JSON object at the top level, got {kind}$"):
        load_facts_file(path)
