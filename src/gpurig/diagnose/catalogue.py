"""The error catalogue: its entries (`knowledge/errors*.toml`), how a log is matched against them,
and how sure a match is.

Each pattern first checks a plain string every match must contain (`required_literals`) before its
regex runs, so a long log costs little; `match_catalogue()` returns the entries a text matches,
best first (`rank_matches`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from gpurig.diagnose.loglines import bare, clean

ROLES = ("primary", "timeout", "secondary", "benign")
# A secondary match ("connection closed by peer") is a consequence of another rank's failure:
# it goes after anything that says what actually happened.
_ROLE_PENALTY = {"primary": 0.0, "timeout": 0.05, "secondary": 0.3, "benign": 0.5}

NEXT_STEPS = [
    "Rerun with NCCL_DEBUG=INFO to see what NCCL was doing (look for 'NCCL WARN' lines).",
    "Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL: torch then checks that every rank calls the same collectives.",
    "Run `gpurig doctor` to check the driver, the GPUs, the links and the framework builds.",
]


@dataclass
class CatalogueEntry:
    id: str
    title: str
    cause: str
    fix: str
    role: str
    confidence: float
    patterns: list[re.Pattern]
    requires: list[re.Pattern]
    examples: list[str]
    near_misses: list[str]
    source: str


@dataclass
class Match:
    """One explanation: what happened, why, the fix, and the line it was read from."""

    id: str
    title: str
    cause: str
    fix: str
    confidence: float
    evidence: str
    role: str = "primary"
    line: int | None = None  # 1-based line of the evidence in the text
    source: str = ""  # where the explanation comes from: the catalogue's sources, or a thread's URL
    kind: str = "catalogue"  # "catalogue", "thread" (a resolved public thread) or "doctor" (a pasted report)
    cls: str = ""  # the cause class: a catalogue id, or the class of a thread's cause
    see_also: list[str] = field(default_factory=list)  # resolved threads (URLs) of the same cause

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["class"] = data.pop("cls") or self.id
        return data


class CatalogueError(ValueError):
    pass


def _longest_run(items: list) -> str:
    """The longest run of consecutive plain characters in a parsed sequence."""
    from re import _parser as sre_parse

    best, run = "", []
    for op, arg in list(items) + [(None, None)]:
        if op is sre_parse.LITERAL:
            run.append(chr(arg))
            continue
        if len(run) > len(best):
            best = "".join(run)
        run = []
    return best


def required_literals(pattern: re.Pattern) -> tuple[str, ...] | None:
    """Plain strings one of which every match of `pattern` contains (lower-cased when the pattern
    ignores case), or None when there are none worth checking.

    Checking `literal in text` (a fast substring search) before the regex skips most patterns on
    a long log: a regex that starts with a class or an alternation is tried at every position.
    A sequence gives its longest run of plain characters; an alternation at the top, one per branch."""
    try:
        from re import _parser as sre_parse  # the parser re itself uses

        items = list(sre_parse.parse(pattern.pattern, pattern.flags & ~re.UNICODE))
        while len(items) == 1 and items[0][0] is sre_parse.SUBPATTERN:  # (?:a|b) around everything
            items = list(items[0][1][-1])
        if len(items) == 1 and items[0][0] is sre_parse.BRANCH:
            runs = [_longest_run(list(branch)) for branch in items[0][1][1]]
        else:
            runs = [_longest_run(items)]
    except Exception:  # another Python's internals: no prefilter, the regex alone decides
        return None
    if not runs or any(len(r) < 4 for r in runs):
        return None
    fold = bool(pattern.flags & re.IGNORECASE)
    return tuple(r.lower() if fold else r for r in runs)


class _Prefiltered:
    """A compiled pattern that first looks for one of its required literals (see required_literals)."""

    __slots__ = ("regex", "literals", "pattern", "fold")

    def __init__(self, regex: re.Pattern) -> None:
        self.regex, self.pattern = regex, regex.pattern
        self.literals = required_literals(regex)
        self.fold = bool(regex.flags & re.IGNORECASE)

    def _may_match(self, text: str, lowered: str | None) -> bool:
        if self.literals is None:
            return True
        hay = (lowered if lowered is not None else text.lower()) if self.fold else text
        return any(lit in hay for lit in self.literals)

    def search(self, text: str, lowered: str | None = None) -> re.Match | None:
        """`regex.search(text)`, skipped where no required literal is in `text` (`lowered`: the
        text lower-cased once by the caller, for the case-insensitive patterns)."""
        return self.regex.search(text) if self._may_match(text, lowered) else None


def _compile(entry_id: str, key: str, patterns: Any) -> list[re.Pattern]:
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise CatalogueError(f"entry {entry_id}: {key} must be a list of strings")
    out = []
    for p in patterns:
        try:
            out.append(_Prefiltered(re.compile(p, re.M)))
        except re.error as exc:
            raise CatalogueError(f"entry {entry_id}: {key} {p!r}: {exc}") from None
    return out


def parse_catalogue(data: dict) -> list[CatalogueEntry]:
    entries = []
    seen = set()
    for raw in data.get("entry", []):
        eid = raw.get("id")
        for key in ("id", "title", "cause", "fix", "role", "confidence", "patterns", "examples", "source"):
            if key not in raw:
                raise CatalogueError(f"entry {eid or '?'}: {key} is missing")
        if eid in seen:
            raise CatalogueError(f"entry {eid}: the id is used twice")
        seen.add(eid)
        if raw["role"] not in ROLES:
            raise CatalogueError(f"entry {eid}: role {raw['role']!r} is not one of {', '.join(ROLES)}")
        entries.append(
            CatalogueEntry(
                id=eid,
                title=raw["title"],
                cause=raw["cause"],
                fix=raw["fix"],
                role=raw["role"],
                confidence=float(raw["confidence"]),
                patterns=_compile(eid, "patterns", raw["patterns"]),
                requires=_compile(eid, "requires", raw.get("requires", [])),
                examples=list(raw["examples"]),
                near_misses=list(raw.get("near_misses", [])),
                source=raw["source"],
            )
        )
    return entries


@lru_cache(maxsize=1)
def load_catalogue() -> tuple[CatalogueEntry, ...]:
    from gpurig.knowledge.loaders import error_catalogue_data

    return tuple(parse_catalogue(error_catalogue_data()))


def _line_of(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    return text.count("\n", 0, pos) + 1, text[start:end].strip()


# How many dev answers an entry's stated confidence is worth when it is blended with how often the
# entry was right on the development threads (a Beta prior: few answers move it little).
PRIOR_ANSWERS = 4.0
UNPROVEN = 0.84  # the most an entry no development thread has matched may claim (sure is 0.85)
USE_ENTRY_CALIBRATION = True  # off while the calibration itself is measured


def entry_confidence(entry: CatalogueEntry) -> float:
    """The entry's confidence, calibrated: its stated value blended with how often it was right when
    it gave the first answer on the development threads (`threads/catalogue.toml`). Entries naming
    a rank's own fault are calibrated; a timeout reading too, but only down (it reads a consequence:
    the threads it matched often name a deeper cause, and it must not come to outrank a specific
    reading of the same stall); secondary and benign readings keep theirs."""
    if not USE_ENTRY_CALIBRATION or entry.role not in ("primary", "timeout"):
        return entry.confidence  # a consequence or a notice names no thread's cause: nothing to calibrate against
    from gpurig.diagnose.threads import load_entry_record

    answered, right = load_entry_record().get(entry.id, (0, 0))
    if not answered:
        # Never checked against a real development thread: no evidence for "sure".
        return min(entry.confidence, UNPROVEN)
    blended = round((right + PRIOR_ANSWERS * entry.confidence) / (answered + PRIOR_ANSWERS), 3)
    return min(blended, entry.confidence) if entry.role == "timeout" else blended


def match_entry(entry: CatalogueEntry, text: str, lowered: str | None = None) -> Match | None:
    """The entry's first match in `text` (earliest line), or None. `lowered` is `text.lower()`
    when the caller has it (one text matched against every entry)."""
    if not all(r.search(text, lowered) for r in entry.requires):
        return None
    best = None
    for pattern in entry.patterns:
        m = pattern.search(text, lowered)
        if m and (best is None or m.start() < best.start()):
            best = m
    if best is None:
        return None
    line_no, line = _line_of(text, best.start())
    evidence = line if len(line) <= 400 else line[:400] + " …"
    return Match(
        id=entry.id,
        title=entry.title,
        cause=entry.cause,
        fix=entry.fix,
        confidence=entry_confidence(entry),
        evidence=evidence or best.group(0),
        role=entry.role,
        line=line_no,
        source=entry.source,
        cls=entry.id,
    )


def rank_matches(matches: list[Match]) -> list[Match]:
    """Best first: the most certain explanation of this rank's own fault before consequences."""
    return sorted(matches, key=lambda m: (-(m.confidence - _ROLE_PENALTY.get(m.role, 0.0)), m.line or 0))


# A specific entry -> the generic one it makes redundant when both match.
HIDES = {"hang-after-nccl-init": "nccl-watchdog-timeout", "nccl-shared-memory": "nccl-system-error",
         "nccl-bad-env-setting": "nccl-system-error", "docker-network-isolation": "nccl-system-error",
         "host-oom-loading-weights": "host-out-of-memory-killed", "timeout-while-rank0-busy": "nccl-watchdog-timeout",
         "torch-not-compiled-with-cuda": "extension-abi-mismatch",
         "stale-extension-build-lock": "hang-after-nccl-init",  # (the first collective waited on rank 0's build)
         "syncbn-error": "default-pg-not-initialized",  # (SyncBatchNorm asked a run with no group for its size)
         "container-engine-cdi-too-old": "cdi-spec-missing-or-stale",  # (the spec is listed; the engine cannot read it)
         "ray-node-ip-mismatch": "ray-no-gpu-resources",  # (the GPUs are there; the bundle is pinned to an unknown node IP)
         "per-process-gpu-masking-breaks-nccl-p2p": "p2p-not-supported",  # (the pair has P2P; each worker sees one GPU)
         "downloaded-library-incomplete": "shared-memory-bus-error",  # (the bus error of mapping a truncated library)
         "proprietary-kernel-module-unsupported-gpu": "faulty-gpu-hardware",  # (RmInitAdapter failed: the module, not the card)
         "extension-built-for-other-gpu-arch": "no-kernel-image",  # (torch's wheel has the arch; the extension does not)
         "nccl-watchdog-races-cuda-graph-capture": "graph-capture-hits-uncapturable-op",  # (the watchdog's query, not the step)
         "nccl-watchdog-timeout": "nccl-watchdog-teardown"}  # (the teardown only points back at the timeout read)


# An entry -> one whose pattern misreads the same lines when both match: a refused bind (errno 13) is
# printed with the generic "failed to listen" line of a port in use. Unlike HIDES, the two are
# different causes: threads of the misread one do not support the other's answer.
MISREADS = {"rendezvous-port-privileged": "rendezvous-port-in-use"}


def hidden_by(entry_id: str) -> set[str]:
    """The generic entries `entry_id` makes redundant: those it hides, and those they hide in turn (a
    stale build lock hides the first collective's timeout, which hides "a collective timed out",
    whether or not the middle reading matched)."""
    hidden: set[str] = set()
    while entry_id in HIDES and HIDES[entry_id] not in hidden:
        entry_id = HIDES[entry_id]
        hidden.add(entry_id)
    return hidden


# A long message an issue editor or a mail client wrapped at a space: a long line whose next line goes
# on in lower case ("... log entry 'Error" / "while creating shared memory segment ...") is one line.
# (A terminal's own wrapping is undone when its text is copied; a cut, "(see abov", loses the rest.)
WRAP_WIDTH = 60


def unwrap(text: str) -> list[tuple[int, str]]:
    """The wrapped messages of `text`, each joined into one line, with the number of its first line."""
    joined: list[tuple[int, str]] = []
    current, first, parts = "", 0, 0
    for n, line in enumerate(text.split("\n"), 1):
        if parts and len(current.rstrip()) >= WRAP_WIDTH and line[:1].islower():
            current, parts = current.rstrip() + " " + line, parts + 1
            continue
        if parts > 1:
            joined.append((first, current))
        current, first, parts = line, n, 1
    if parts > 1:
        joined.append((first, current))
    return joined


def _matches(catalogue: tuple[CatalogueEntry, ...], text: str, done: set[str]) -> list[Match]:
    """The first match in `text` of every entry not in `done`."""
    lowered = text.lower()
    return [m for e in catalogue if e.id not in done and (m := match_entry(e, text, lowered)) is not None]


def match_catalogue(text: str, catalogue: tuple[CatalogueEntry, ...] | None = None, benign: bool = False) -> list[Match]:
    """The entries `text` matches, best first; harmless notices (role "benign") only when asked.
    A message the paste wrapped over two lines is read whole (`unwrap`), its line the first of them."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    catalogue = tuple(e for e in catalogue if benign or e.role != "benign")
    text = clean(text)
    found = _matches(catalogue, text, set())
    if joined := unwrap(text):  # only the joined lines are read again: every other line was read above
        for m in (again := _matches(catalogue, "\n".join(line for _, line in joined), {m.id for m in found})):
            m.line = joined[m.line - 1][0] if m.line else None
        found += again
    # Prefixes on every line ("[rank3]: ", "> ", a logger's time and level) split a message of several
    # lines and hide a line's start: the entries not found are read again without them, line for line.
    if (plain := bare(text)) is not None:
        found += _matches(catalogue, plain, {m.id for m in found})
    # A specific explanation hides a generic one read from the same line (the first collective
    # timing out is a more useful reading than "a collective timed out").
    hidden = set().union(*(hidden_by(m.id) for m in found), {MISREADS[m.id] for m in found if m.id in MISREADS})
    ranked = rank_matches([m for m in found if m.id not in hidden])
    # A line that only points back at the failure it reports goes after any cause the log itself shows.
    if any(m.role == "primary" for m in ranked):
        ranked = [m for m in ranked if m.id not in POINTERS] + [m for m in ranked if m.id in POINTERS]
    return ranked


# Entries whose line only points back at the failure it reports ("Original reason for failure was: ...").
POINTERS = frozenset({"nccl-watchdog-teardown"})


# A line that names an exception (`RuntimeError: ...`), for a rank whose error the catalogue does not know.
EXCEPTION_LINE = re.compile(r"^\s*(?:\[\w+\]:\s*)*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*)$", re.M)


def generic_exception(rank: str, message: str) -> Match:
    """An uncaught exception in the script itself, when nothing in the catalogue explains it."""
    return Match(
        id="uncaught-exception",
        title=f"The script raised {message.split(':', 1)[0]} in rank {rank}",
        cause="An exception in the training script itself ended this rank; torchrun then stopped the others.",
        fix="Fix the error at the line shown (the traceback below is this rank's own); it is not a problem of the distributed setup.",
        confidence=0.7,
        evidence=message if len(message) <= 400 else message[:400] + " …",
        role="primary",
        source="the rank's traceback",
    )
