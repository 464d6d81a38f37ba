"""Odd but schema-valid snapshots (what a strange machine or an old tool may report) never break a rule."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import typing
from pathlib import Path

import pytest

from gpurig.diagnose.rules import judge
from gpurig.probe.facts import RigFacts

RIGS = Path(__file__).resolve().parents[1] / "fixtures" / "rigs"
ODD = {str: ["", "N/A", "[Not Supported]", "13.0", "99.9", "garbage", "2.12.0a0+git1234", "0,1"],
       int: [0, -1, 1, 3, 99], float: [0.0, -1.0, 1e9], bool: [True, False]}


def odd_value(tp):
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    base = args[0]
    if typing.get_origin(base) is list:
        return random.choice([[], None])
    return random.choice(ODD.get(base, [None]) + [None])


def mutate(obj, depth=0):
    """Set one random scalar field somewhere in the snapshot to an odd value."""
    fields = [f for f in dataclasses.fields(obj)]
    f = random.choice(fields)
    value = getattr(obj, f.name)
    hints = typing.get_type_hints(type(obj))
    if dataclasses.is_dataclass(value):
        return mutate(value, depth + 1)
    if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
        return mutate(random.choice(value), depth + 1)
    if isinstance(value, dict):
        key = random.choice(["CUDA_VISIBLE_DEVICES", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "CUDA_DEVICE_ORDER",
                             "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_ALGO"])
        value[key] = random.choice(["", "1", "0", "x", "0,1,1", "GPU-", "MIG-abc", "LOC", "PCI_BUS_ID"])
        return
    new = odd_value(hints[f.name])
    if new is None and type(None) not in typing.get_args(hints[f.name]):
        return
    setattr(obj, f.name, new)


@pytest.mark.parametrize("path", sorted(RIGS.glob("*.json")), ids=lambda p: p.stem)
def test_random_odd_values_never_break_a_rule(path):
    random.seed(path.stem)
    base = RigFacts.from_dict(json.loads(path.read_text()))
    for _ in range(150):
        facts = copy.deepcopy(base)
        for _ in range(random.randint(1, 6)):
            mutate(facts)
        failed = [f for f in judge(facts) if f.id == "doctor-rule-failed"]
        assert not failed, failed[0].detail
