"""The rules of `gpurig lint` (id, severity, whether cosmetic, why it matters) and the finding one
of them reports at a line of a script.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # "error" (the run is wrong or breaks), "warn" (lost results or time), "info"
    cosmetic: bool  # off unless selected: duplicated output, a missed speed-up
    why: str  # why it matters, one sentence


RULES = {r.id: r for r in (
    Rule("data-parallel", "warn", False, "One process drives every GPU through the GIL and gathers on GPU 0: several times slower than DDP."),
    Rule("ddp-without-device", "error", False, "Without a device every rank builds its replica on GPU 0 (or DDP spans all visible GPUs): out of memory or wrong results."),
    Rule("sampler-without-set-epoch", "warn", False, "The sampler shuffles with the same seed every epoch, so every epoch sees the same order."),
    Rule("torch-load-without-map-location", "warn", False, "Every rank loads the checkpoint onto the GPU it was saved from (usually GPU 0) or onto the one GPU map_location names: memory there runs out."),
    Rule("save-on-every-rank", "warn", False, "Every rank writes the same file at once: a corrupt or truncated checkpoint, and N times the I/O."),
    Rule("download-on-every-rank", "warn", False, "Every rank downloads into the same place at once: they race and corrupt the files."),
    Rule("hard-coded-rendezvous", "warn", False, "A fixed port or address makes a second job on the machine fail with 'Address already in use'."),
    Rule("no-destroy-process-group", "warn", False, "Without destroy_process_group the process group is torn down during interpreter exit, which can hang or abort a finished run."),
    Rule("global-rank-as-device", "error", False, "The global rank is not a GPU index on a second node: ranks 8..15 ask for cuda:8..15 and fail."),
    Rule("print-on-every-rank", "info", True, "Every rank prints the same lines: N copies of the output."),
    Rule("tqdm-on-every-rank", "info", True, "Every rank draws its own progress bar: N bars fighting over one terminal."),
    Rule("find-unused-parameters", "info", True, "find_unused_parameters=True walks the autograd graph every step: slower when nothing is unused."),
    Rule("dataloader-starves-gpu", "info", True, "Loading in the training process without pinned memory leaves the GPU waiting for data."),
)}
DEFAULT_RULES = frozenset(r.id for r in RULES.values() if not r.cosmetic)


@dataclass
class LintFinding:
    id: str
    severity: str  # the rule's: "error", "warn" or "info"
    line: int
    title: str
    fix: str
    code: str = ""  # the source line
    why: str = ""  # why it matters (the rule's)
    related: list[str] = field(default_factory=list)  # "path:line" of each place in the project it stands for

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Rules whose findings in different branches of one if / elif / else are one mistake: only one
# branch runs (`if args.config_name: AutoConfig.from_pretrained(args.config_name) elif ...:
# AutoConfig.from_pretrained(args.model_name_or_path)` fetches one config, in every rank).
ONE_BRANCH_RULES = frozenset({"download-on-every-rank", "save-on-every-rank", "torch-load-without-map-location", "data-parallel"})


def fold_alternatives(findings: list[LintFinding], chains, script: str) -> list[LintFinding]:
    """Findings of a ONE_BRANCH_RULES rule in different branches of one chain (`chains`: per
    if / elif / else, the line ranges of its branches) are reported once, at the first branch that
    has one; the others are named there (`related`). A finding is in the innermost branch holding
    its line. `findings` in line order; `script`: the file's name, as `related` names it."""
    lines = sorted({f.line for f in findings if f.id in ONE_BRANCH_RULES})
    if not lines or not chains:
        return findings
    inner: dict[int, tuple[int, int, int]] = {}  # line -> (size, chain, branch) of the innermost branch holding it
    for k, ranges in enumerate(chains):  # (a big file has thousands of chains and few such findings)
        for i, (first, last) in enumerate(ranges):
            j = bisect_left(lines, first)
            while j < len(lines) and lines[j] <= last:
                if lines[j] not in inner or last - first < inner[lines[j]][0]:
                    inner[lines[j]] = (last - first, k, i)
                j += 1
    folded: set[int] = set()
    kept: dict[tuple[str, int], tuple[int, LintFinding, list[int]]] = {}  # (rule, chain) -> (branch, first finding, lines folded)
    for f in findings:
        if f.id not in ONE_BRANCH_RULES or f.line not in inner:
            continue
        _, chain, branch = inner[f.line]
        first = kept.setdefault((f.id, chain), (branch, f, []))
        if first[0] != branch:
            first[1].related += [r for r in [f"{script}:{f.line}", *f.related] if r not in first[1].related]  # (and what it stood for)
            first[2].append(f.line)
            folded.add(id(f))
    for _, f, others in kept.values():
        places = ", ".join(f"{script}:{n}" for n in others)
        if len(others) == 1:
            f.title += f" (and at {places}, in the other branch of the same if: one of the two runs)"
        elif others:
            f.title += f" (and at {places}, in the other branches of the same if: one of them runs)"
    return [f for f in findings if id(f) not in folded]
