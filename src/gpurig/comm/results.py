"""Result types of `gpurig verify`: one `CheckResult` per check, gathered in a `VerifyResult`.

Plain dataclasses, JSON-serialisable, built by the parent from the per-rank files the workers write.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# The checks in the order the workers run them; the names are stable (they appear in --json).
CHECK_NAMES = ("collectives", "p2p", "ddp", "transport")

STATUSES = ("pass", "fail", "n/a", "not run")


@dataclass
class CheckResult:
    """One check: `passed` is False only for a real failure; "n/a" and "not run" say why in `detail`."""

    name: str
    passed: bool
    detail: str = ""
    seconds: float | None = None
    status: str = "pass"  # "pass" | "fail" | "n/a" | "not run"
    per_rank: dict[str, str] = field(default_factory=dict)  # rank -> what that rank found

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VerifyResult:
    """The outcome of one `gpurig verify` run."""

    passed: bool
    device: str
    nproc: int
    backend: str
    checks: list[CheckResult] = field(default_factory=list)
    transport: dict[str, Any] = field(default_factory=dict)
    hang: dict[str, Any] | None = None  # the collective that never completed, and who was missing
    run_dir: str | None = None
    seconds: float = 0.0
    reason: str = ""  # why this device was chosen
    findings: list[dict[str, Any]] = field(default_factory=list)
    node: dict[str, Any] | None = None  # across machines: {"node", "nnodes", "world_size", "ranks", "hosts"}

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "device": self.device,
            "nproc": self.nproc,
            **({"node": self.node} if self.node else {}),
            "backend": self.backend,
            "seconds": round(self.seconds, 2),
            "checks": [c.to_dict() for c in self.checks],
            "transport": self.transport,
            "hang": self.hang,
            "findings": self.findings,
            "run_dir": self.run_dir,
            "reason": self.reason,
        }
