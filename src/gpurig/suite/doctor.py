"""The doctor as a library: gather a snapshot, judge it, and the `--json` document.

`gpurig doctor` and the doctor step of `gpurig check` both call these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpurig.diagnose.findings import Finding, sort_findings
from gpurig.probe.facts import RigFacts
from gpurig.probe.network import RendezvousFacts


def gather(facts_file: Path | None = None, frameworks: bool = True, *, use_cache: bool = False,
           refresh: bool = False) -> RigFacts:
    """The snapshot to judge: a saved one, or this machine's (see collect_facts for the cache)."""
    if facts_file is not None:
        from gpurig.probe.snapshot import load_facts_file

        return load_facts_file(facts_file)
    from gpurig.probe.collect import collect_facts

    return collect_facts(frameworks=frameworks, use_cache=use_cache, refresh=refresh)


def gather_network(master_addr: str, master_port: int, timeout: float = 3.0) -> RendezvousFacts:
    """This machine's way to the rendezvous master_addr:master_port (`--master-addr`): its
    interfaces, the route, one connection attempt to the port; a few seconds at most."""
    from gpurig.probe.network import collect_rendezvous

    return collect_rendezvous(master_addr, master_port, timeout)


def doctor_data(facts: RigFacts, network: RendezvousFacts | None = None) -> tuple[RigFacts, list[Finding]]:
    """Judge a snapshot (and the rendezvous facts, if any); returns the facts and the findings, worst first."""
    from gpurig.diagnose.rules import judge

    return facts, sort_findings(judge(facts, network))


def doctor_document(facts: RigFacts, findings: list[Finding],
                    network: RendezvousFacts | None = None) -> dict[str, Any]:
    """The `--json` document: {"facts": ..., "findings": [...]}, and "network": {...} with `--master-addr`."""
    doc = {
        "facts": facts.to_dict(),
        "findings": [
            {k: v for k, v in f.to_dict().items() if k in ("id", "severity", "title", "detail", "fix", "evidence", "area")}
            for f in findings
        ],
    }
    if network is not None:
        doc["network"] = network.to_dict()
    return doc
