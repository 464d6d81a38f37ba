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
    """Findings of a ONE_BRANCH_RULES rule on paths of which only one runs are reported once, at the
    first; the others are named there (`related`). Two findings are on such paths when some chain
    (`chains`: per if / elif / else, the line ranges of its branches) holds them in different
    branches, the innermost or one around them: a fetch in an inner `elif` and one in the outer
    `else`. A finding joins the first one reported only when it is on another path than every
    finding already joined there (two loads one after the other in the `else` are two mistakes).
    `findings` in line order; `script`: the file's name, as `related` names it."""
    lines = sorted({f.line for f in findings if f.id in ONE_BRANCH_RULES})
    if not lines or not chains:
        return findings
    holding: dict[int, dict[int, int]] = {}  # line -> {chain: branch} of every branch holding it
    inner: dict[int, tuple[int, int]] = {}  # line -> (size, chain) of the innermost branch holding it
    for k, ranges in enumerate(chains):  # (a big file has thousands of chains and few such findings)
        for i, (first, last) in enumerate(ranges):
            j = bisect_left(lines, first)
            while j < len(lines) and lines[j] <= last:
                holding.setdefault(lines[j], {})[k] = i
                if lines[j] not in inner or last - first < inner[lines[j]][0]:
                    inner[lines[j]] = (last - first, k)
                j += 1

    def apart(a: int, b: int) -> bool:  # (lines on paths of which one runs)
        return any(chain in holding[b] and holding[b][chain] != branch for chain, branch in holding[a].items())

    folded: set[int] = set()
    groups: list[tuple[LintFinding, list[int]]] = []  # (the finding reported, the lines of the group)
    others: dict[int, list[int]] = {}  # id of a finding reported -> the lines folded into it
    for f in findings:
        if f.id not in ONE_BRANCH_RULES or f.line not in holding:
            continue
        # (the group of a finding in the other branch of its own innermost if first: a tokenizer's alternative)
        fits = [head for head, members in groups if head.id == f.id and all(apart(f.line, m) for m in members)]
        into = next((h for h in fits if inner[h.line][1] == inner[f.line][1]), fits[0] if fits else None)
        if into is None:
            groups.append((f, [f.line]))
            continue
        next(members for head, members in groups if head is into).append(f.line)
        into.related += [r for r in [f"{script}:{f.line}", *f.related] if r not in into.related]  # (and what it stood for)
        others.setdefault(id(into), []).append(f.line)
        folded.add(id(f))
    for f in findings:
        if id(f) in others:
            places = ", ".join(f"{script}:{n}" for n in others[id(f)])
            f.title += (f" (and at {places}, in the other branch of the same if: one of the two runs)" if len(others[id(f)]) == 1
                        else f" (and at {places}, in the other branches of the same if: one of them runs)")
    return [f for f in findings if id(f) not in folded]
