"""Imports point down the layers of docs/architecture.md: a module may import its own package and
the packages of the layers below it, never above it or beside it. Every import counts, the ones
inside functions too (they are how the layers would quietly tangle)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gpurig"
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

# Bottom to top; the packages of one layer may not import each other.
LAYERS = [  # the order of the shared design (DESIGN.md), bottom to top
    {"__init__", "errors", "findings", "knowledge"},
    {"probe"},
    {"monitor"},
    {"recipes"},
    {"launch"},
    {"diagnose"},
    {"train", "comm", "burn"},
    {"suite"},
    {"report"},
    {"commands", "api"},
    {"cli"},
    {"__main__"},
]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
# The one import allowed to point up: `import gpurig` offers the Python API (gpurig.api), loaded on
# first use by the package's __getattr__.
FACE = {("__init__", "api")}


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module == "gpurig" and node.level == 0:
            names = [f"gpurig.{a.name}" for a in node.names]  # `from gpurig import api` imports gpurig.api
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module.split(".")[0] == "gpurig" else []
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "gpurig"]
        for name in names:
            parts = name.split(".")
            out.append((node.lineno, parts[1] if len(parts) > 1 else "__init__"))
    return out


def test_every_package_has_a_layer():
    packages = {_package(p) for p in SRC.rglob("*.py")}
    assert packages <= set(LEVEL), sorted(packages - set(LEVEL))


def test_imports_point_down_the_layers():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        here = _package(path)
        for line, target in _imports(path):
            if target == here or (here, target) in FACE:
                continue
            if target not in LEVEL:  # `from gpurig import __version__`
                target = "__init__"
            if LEVEL[target] >= LEVEL[here]:
                wrong.append(f"{path.relative_to(SRC)}:{line} imports gpurig.{target} "
                             f"(layer {LEVEL[target]}) from layer {LEVEL[here]}")
    assert not wrong, "\n".join(wrong)


def test_the_architecture_page_has_a_paragraph_for_every_folder():
    text = DOC.read_text(encoding="utf-8")
    folders = sorted(p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__"))
    assert [f for f in folders if f"`{f}/`" not in text] == []


def test_no_module_is_over_600_lines():
    """A module a newcomer can read: anything longer is split by subject (docs/architecture.md)."""
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}
