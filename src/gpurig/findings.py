"""The `Finding`: one judgement the doctor (or verify, bench, or a verdict) makes, with its fix.

A shared contract (DESIGN.md), kept at the bottom of the layers so that every layer may produce one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("error", "warn", "info", "ok")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Finding:
    """A stable-id judgement: what is wrong (or right), why, and exactly what to type to fix it.

    `area` groups findings in the terminal report ("driver", "gpus", "links", "frameworks",
    "system", "environment").
    """

    id: str
    severity: str
    title: str
    detail: str = ""
    fix: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    area: str = "general"

    def __post_init__(self) -> None:
        if self.severity not in _RANK:
            raise ValueError(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Worst first; stable within a severity."""
    return sorted(findings, key=lambda f: _RANK[f.severity])


def worst_severity(findings: list[Finding]) -> str:
    return min((f.severity for f in findings), key=lambda s: _RANK[s], default="ok")


def has_error(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
