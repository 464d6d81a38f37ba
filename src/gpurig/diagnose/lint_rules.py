"""The rules of `gpurig lint` (id, severity, whether cosmetic, why it matters) and the finding one
of them reports at a line of a script.
"""

from __future__ import annotations

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
    Rule("torch-load-without-map-location", "warn", False, "Every rank loads the checkpoint onto the GPU it was saved from, usually GPU 0: memory there runs out."),
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
