"""Measuring `gpurig lint` on real third-party training scripts.

The scripts are not part of gpurig: `tests/corpus/lint/manifest.toml` names each one (repository,
commit, path, sha256) with the real mistakes it holds, judged by hand independently of gpurig's
output. `python -m gpurig.diagnose.lint_corpus fetch` downloads them (and the modules of their
project they import) into `.lint-corpus/` at those commits; `measure` lints them and compares.

    python -m gpurig.diagnose.lint_corpus fetch      # needs network access to GitHub
    python -m gpurig.diagnose.lint_corpus measure    # precision and recall, per rule
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "tests" / "corpus" / "lint" / "manifest.toml"
CACHE = ROOT / ".lint-corpus"
NEAR = 1  # a finding within this many lines of a judged mistake is that mistake


def load_manifest(path: Path = MANIFEST) -> dict[str, dict[str, Any]]:
    return tomllib.loads(path.read_text(encoding="utf-8"))["script"]


def present(entry: dict[str, Any], cache: Path = CACHE) -> bool:
    """The script is in the cache, byte for byte what was judged."""
    f = cache / entry["file"]
    return f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == entry["sha256"]


@dataclass
class Score:
    scripts: int = 0
    findings: int = 0
    true_findings: int = 0
    mistakes: int = 0
    found: int = 0
    false: list[dict] = field(default_factory=list)
    missed: list[dict] = field(default_factory=list)
    tutorial_findings: list[dict] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.true_findings / self.findings if self.findings else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.mistakes if self.mistakes else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"scripts": self.scripts, "findings": self.findings, "precision": round(self.precision, 3),
                "mistakes": self.mistakes, "recall": round(self.recall, 3)}


def split_of(entry: dict[str, Any]) -> str:
    """'dev' or 'test', fixed by the script's URL (the same hash as the explain threads)."""
    from gpurig.diagnose.threads import split_of as by_url

    return by_url(entry["url"])


def _relative(helper: str, script: str) -> str:
    """A helper's path as a finding names it: relative to the script's folder ("../evp/models.py")."""
    import posixpath

    return posixpath.relpath(helper, posixpath.dirname(script))


@lru_cache(maxsize=64)
def _statements(path: Path) -> tuple[tuple[int, int], ...]:
    """The line spans of a file's statements: a simple statement whole (a call over several lines),
    a compound statement's header (`with open(...) as f:`); none for a file that does not parse."""
    import ast

    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return ()
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno or node.lineno
            spans.append((node.lineno, max(node.lineno, end)))
    return tuple(spans)


def _same_place(path: Path, judged: int, line: int) -> bool:
    """A finding's line is the judged place: within NEAR lines of it, or in the same statement
    (the judge named `parser.add_argument(` and the finding its `default=` three lines below)."""
    return abs(judged - line) <= NEAR or judged > 0 and any(a <= judged <= b and a <= line <= b for a, b in _statements(path))


def measure(rules: set[str], manifest: dict[str, dict[str, Any]] | None = None, cache: Path = CACHE,
            split: str | None = None) -> Score:
    """Lint every cached script with `rules`; a finding is true when it is a judged mistake of the
    same rule (same file, within NEAR lines; any line for a judged 'something is missing')."""
    from gpurig.diagnose.lint import lint_file

    manifest = load_manifest() if manifest is None else manifest
    score = Score()
    for name, entry in sorted(manifest.items()):
        if not present(entry, cache) or (split and split_of(entry) != split):
            continue
        score.scripts += 1
        script = cache / entry["file"]
        judged = rules
        if entry.get("judged") == "default":  # only the rules on by default were judged for this script
            from gpurig.diagnose.lint import DEFAULT_RULES

            judged = rules & DEFAULT_RULES
        findings = lint_file(str(script), select=judged)
        mistakes = [m for m in entry.get("mistakes", []) if m["rule"] in judged]
        used: set[int] = set()

        def names(f, m: dict, script: str = entry["file"]) -> bool:
            """Whether the finding names the judged place (its file, the same line: `_same_place`) among its `related`."""
            where = _relative(m.get("file", script), script)
            return m["line"] > 0 and any(r.rpartition(":")[0] == where and _same_place(cache / m.get("file", script), m["line"],
                                                                                       int(r.rpartition(":")[2])) for r in f.related)

        for f in findings:
            # A mistake judged at this line first; then one judged as missing (line 0) or judged in
            # an imported module (`file`), which a finding in the script can only stand for; then one
            # at a line of the script the finding names.
            # (the nearest such mistake: a finding at the judged line of MASTER_PORT is that one, not MASTER_ADDR's above)
            hit = min((i for i, m in enumerate(mistakes) if i not in used and m["rule"] == f.id and "file" not in m
                       and m["line"] and _same_place(script, m["line"], f.line)),
                      key=lambda i: abs(mistakes[i]["line"] - f.line), default=None)
            if hit is None:  # (a finding that names the project places it stands for stands for those only)
                hit = next((i for i, m in enumerate(mistakes) if i not in used and m["rule"] == f.id
                            and (m["line"] == 0 or "file" in m and (not f.related or names(f, m)))), None)
            if hit is None:  # or a line of the script that the finding names (a save helper's torch.save)
                hit = next((i for i, m in enumerate(mistakes) if i not in used and m["rule"] == f.id and "file" not in m
                            and names(f, m)), None)
            score.findings += 1
            if hit is None:
                score.false.append({"script": name, "rule": f.id, "line": f.line, "code": f.code})
            else:
                used.add(hit)
                score.true_findings += 1
            if entry.get("official_tutorial") and f.id != "hard-coded-rendezvous":
                score.tutorial_findings.append({"script": name, "rule": f.id, "line": f.line})
        # Then every mistake judged in an imported module (or the script) whose file:line a finding of its
        # rule names (its `related` places: "... at utils.py:6, MNIST() at utils.py:7"): the user is shown each.
        for f in findings:
            used |= {i for i, m in enumerate(mistakes) if i not in used and m["rule"] == f.id and names(f, m)}
        score.mistakes += len(mistakes)
        score.found += len(used)
        score.missed += [{"script": name, **m} for i, m in enumerate(mistakes) if i not in used]
    return score


def fetch(manifest: dict[str, dict[str, Any]] | None = None, cache: Path = CACHE) -> int:
    """Download every script and helper of the manifest at its commit (raw.githubusercontent.com)."""
    import urllib.request

    manifest = load_manifest() if manifest is None else manifest
    failed = 0
    for name, entry in sorted(manifest.items()):
        prefix = entry["file"][: -len(entry["path"])] if entry["file"].endswith(entry["path"]) else f"{name}/"
        for rel in [entry["file"], *entry.get("helpers", [])]:
            repo_path = rel[len(prefix):]
            commit = entry.get("helpers_at", {}).get(rel, entry["commit"])  # (a helper judged at another commit)
            url = f"https://raw.githubusercontent.com/{entry['repo']}/{commit}/{repo_path}"
            dest = cache / rel
            try:
                with urllib.request.urlopen(url, timeout=60) as r:
                    data = r.read()
            except OSError as exc:
                print(f"{name}: {url}: {exc}")
                failed += 1
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        if not present(entry, cache):
            print(f"{name}: {entry['file']} does not match its sha256 (the repository changed?)")
            failed += 1
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    from gpurig.diagnose.lint import DEFAULT_RULES, RULES

    ap = argparse.ArgumentParser(prog="python -m gpurig.diagnose.lint_corpus", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the scripts of the manifest into .lint-corpus/")
    m = sub.add_parser("measure", help="precision and recall on the cached scripts")
    m.add_argument("--all", action="store_true", help="every rule, the cosmetic ones too")
    m.add_argument("--false", action="store_true", help="list the false findings and missed mistakes of the development part")
    m.add_argument("--test", action="store_true", help="also measure the held-out part (report it; never tune on it)")
    args = ap.parse_args(argv)
    if args.cmd == "fetch":
        return fetch()
    rules = set(RULES) if args.all else set(DEFAULT_RULES)
    score = measure(rules, split="dev")
    print("dev ", json.dumps(score.to_dict()))
    if args.test:
        print("test", json.dumps(measure(rules, split="test").to_dict()))
    if args.false:
        for f in score.false:
            print("false ", json.dumps(f))
        for f in score.missed:
            print("missed", json.dumps(f))
        for f in score.tutorial_findings:
            print("tutorial", json.dumps(f))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
