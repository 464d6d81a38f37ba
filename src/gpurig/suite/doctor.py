"""The doctor as a library: gather a snapshot, judge it, and the `--json` document.

`gpurig doctor` and the doctor step of `gpurig check` both call these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpurig.diagnose.findings import Finding, sort_findings
from gpurig.probe.facts import RigFacts


def gather(facts_file: Path | None = None, frameworks: bool = True, *, use_cache: bool = False,
           refresh: bool = False) -> RigFacts:
    """The snapshot to judge: a saved one, or this machine's (see collect_facts for the cache)."""
    if facts_file is not None:
        from gpurig.probe.snapshot import load_facts_file

        return load_facts_file(facts_file)
    from gpurig.probe.collect import collect_facts

    return collect_facts(frameworks=frameworks, use_cache=use_cache, refresh=refresh)


def doctor_data(facts: RigFacts) -> tuple[RigFacts, list[Finding]]:
    """Judge a snapshot; returns the facts and the findings, worst first."""
    from gpurig.diagnose.rules import judge

    return facts, sort_findings(judge(facts))


def doctor_document(facts: RigFacts, findings: list[Finding]) -> dict[str, Any]:
    """The `--json` document: {"facts": ..., "findings": [...]}."""
    return {
        "facts": facts.to_dict(),
        "findings": [
            {k: v for k, v in f.to_dict().items() if k in ("id", "severity", "title", "detail", "fix", "evidence", "area")}
            for f in findings
        ],
    }
