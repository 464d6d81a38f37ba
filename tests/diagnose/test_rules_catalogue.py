"""The catalogue of finding ids matches what the rules make, and every id is exercised by a test."""

from __future__ import annotations

import re
from pathlib import Path

from gpurig.diagnose.rules import FINDINGS

ROOT = Path(__file__).resolve().parents[2]
RULE_SOURCES = sorted((ROOT / "src" / "gpurig" / "diagnose").glob("rules*.py"))
TESTS = sorted(Path(__file__).parent.glob("test_rules_*.py"))


def made_ids() -> dict[str, str]:
    """id -> area, read from the Finding(...) calls in the rule modules."""
    out = {}
    for path in RULE_SOURCES:
        text = path.read_text()
        for m in re.finditer(r'id="([a-z0-9-]+)"[^)]*?area="([a-z]+)"', text, re.S):
            out[m.group(1)] = m.group(2)
    return out


def test_catalogue_lists_exactly_the_ids_the_rules_make_with_their_area():
    made = made_ids()
    assert set(made) == set(FINDINGS), (sorted(set(made) ^ set(FINDINGS)))
    for fid, area in made.items():
        assert FINDINGS[fid][0] == area, fid


def test_every_id_is_exercised_by_a_test():
    text = "\n".join(p.read_text() for p in TESTS if p.name != Path(__file__).name)
    missing = [fid for fid in FINDINGS if f'"{fid}"' not in text]
    assert not missing, missing
