"""`Finding` lives in `gpurig.findings` (the lowest layer, so workers can report findings too);
re-exported here for the rules, verdicts and explainers."""

from gpurig.findings import SEVERITIES, Finding, has_error, sort_findings, worst_severity

__all__ = ["SEVERITIES", "Finding", "has_error", "sort_findings", "worst_severity"]
