"""A small script (and modules beside it) written to a folder and linted: what the round tests share."""

from __future__ import annotations

import textwrap

from gpurig.diagnose.lint import lint_file


def found(tmp_path, text: str, rule: str, files: dict[str, str] | None = None) -> list[tuple[str, int]]:
    """(rule, line) of each finding of `rule` on `text` saved as train.py, with `files` beside it."""
    for name, body in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(body))
    (tmp_path / "train.py").write_text(textwrap.dedent(text))
    return sorted((f.id, f.line) for f in lint_file(str(tmp_path / "train.py"), select={rule}))
