"""The doctor's judgement: a `RigFacts` snapshot in, `Finding`s out, with no I/O.

    >>> from gpurig.probe.facts import RigFacts
    >>> [f.id for f in judge(RigFacts())]
    ['no-nvidia-gpu']

Each rule lives in a `rules_<area>.py` module (driver, gpus, links, system/environment,
frameworks) and returns findings with a stable id, a severity, the facts it used as evidence and a
concrete fix. Unknown facts (`None`) never raise a finding. Rules run in a fixed order so that a
later rule can stay quiet about a symptom an earlier finding already explains (`Context.made`):
no fabric manager explains NVLinks that are down and a torch that cannot start CUDA.
"""

from __future__ import annotations

import traceback

from gpurig.diagnose import rules_driver, rules_frameworks, rules_gpus, rules_links, rules_system
from gpurig.diagnose.findings import Finding
from gpurig.diagnose.rules_context import Context, Rule
from gpurig.probe.facts import RigFacts

RULES: list[Rule] = [
    *rules_driver.RULES,
    *rules_gpus.RULES,
    *rules_links.RULES,
    *rules_system.RULES,
    *rules_frameworks.RULES,
    *rules_frameworks.LATE_RULES,  # symptoms (torch sees no GPU): only when nothing above explains them
]


def judge(facts: RigFacts) -> list[Finding]:
    """All findings for a snapshot, in rule order (callers sort with `sort_findings`)."""
    ctx = Context(facts)
    findings: list[Finding] = []
    for rule in RULES:
        try:
            made = rule(ctx)
        except Exception as exc:  # a rule bug must not hide every other finding; it is reported instead
            where = traceback.extract_tb(exc.__traceback__)[-1]
            made = [Finding(
                id="doctor-rule-failed", severity="warn", area="general",
                title=f"The doctor's rule {rule.__name__} failed on this snapshot",
                detail=f"{type(exc).__name__}: {exc} (at {where.name}:{where.lineno}). The other rules ran.",
                fix="Report it with the snapshot attached: `gpurig doctor --save-facts facts.json`",
                evidence={"rule": rule.__name__, "error": f"{type(exc).__name__}: {exc}"},
            )]
        findings.extend(made)
        ctx.made.update(f.id for f in made)
    return findings
