"""Fixtures for the recipe tests (the rigs themselves are in env_rigs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from env_rigs import CRAFTED


@pytest.fixture
def facts_file(tmp_path):
    """Write a crafted rig to a JSON file for `--facts`."""

    def _write(name: str) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(CRAFTED[name].to_dict()))
        return path

    return _write
