"""What `pip install` reads: the licence, the extras, the declared dependencies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_licence_is_an_spdx_string_with_its_file():
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert any(c.startswith("Topic ::") for c in PROJECT["classifiers"])


def test_the_tf_extra_installs_what_the_tensorflow_path_uses():
    names = [re.split(r"[<>=;\[ ]", r, maxsplit=1)[0] for r in PROJECT["optional-dependencies"]["tf"]]
    assert "tensorboard" in names  # gpurig train --framework tf writes TensorBoard summaries


def test_every_declared_dependency_is_imported_somewhere():
    code = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    module = {"nvidia-ml-py": "pynvml", "rank-bm25": "rank_bm25"}
    for requirement in PROJECT["dependencies"]:
        name = re.split(r"[<>=;\[ ]", requirement, maxsplit=1)[0]
        mod = module.get(name, name.replace("-", "_"))
        assert re.search(rf"^\s*(?:import|from)\s+{mod}\b", code, re.M), f"{name} is declared but never imported"
