"""Logs -> explanations: match text against the error catalogue (`knowledge/errors.toml`).

`explain_text()` returns the catalogue entries a log matches, best first, each with the line that
matched. It also recognises pasted `python -m torch.utils.collect_env` and `nvidia-smi` output,
turns them into facts and runs the doctor's rules on them. `explain_run()` reads what
`gpurig launch` collected from a failed run (`launch.collect.RunRecord`) and decides which rank
caused it. Pure: no I/O apart from reading the catalogue shipped with the package.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

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


_LOWERED: dict[int, tuple[str, str]] = {}  # id(text) -> (text, text.lower()): one text at a time


def _lowered(text: str) -> str:
    hit = _LOWERED.get(id(text))
    if hit is not None and hit[0] is text:
        return hit[1]
    _LOWERED.clear()
    low = text.lower()
    _LOWERED[id(text)] = (text, low)
    return low


class _Prefiltered:
    """A compiled pattern that first looks for one of its required literals (see required_literals)."""

    __slots__ = ("regex", "literals", "pattern", "fold")

    def __init__(self, regex: re.Pattern) -> None:
        self.regex, self.pattern = regex, regex.pattern
        self.literals = required_literals(regex)
        self.fold = bool(regex.flags & re.IGNORECASE)

    def _may_match(self, text: str) -> bool:
        if self.literals is None:
            return True
        hay = _lowered(text) if self.fold else text
        return any(lit in hay for lit in self.literals)

    def search(self, text: str, *args: Any) -> re.Match | None:
        return self.regex.search(text, *args) if self._may_match(text) else None

    def finditer(self, text: str, *args: Any):
        return self.regex.finditer(text, *args) if self._may_match(text) else iter(())


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
USE_ENTRY_CALIBRATION = True  # off while the calibration itself is measured


def entry_confidence(entry: CatalogueEntry) -> float:
    """The entry's confidence, calibrated: its stated value blended with how often it was right when
    it gave the first answer on the development threads (`threads/catalogue.toml`). Only entries
    naming a rank's own fault are calibrated; secondary, timeout and benign readings keep theirs."""
    if not USE_ENTRY_CALIBRATION or entry.role != "primary":
        return entry.confidence  # a consequence or a notice names no thread's cause: nothing to calibrate against
    from gpurig.diagnose.threads import load_entry_record

    answered, right = load_entry_record().get(entry.id, (0, 0))
    if not answered:
        return entry.confidence
    return round((right + PRIOR_ANSWERS * entry.confidence) / (answered + PRIOR_ANSWERS), 3)


def match_entry(entry: CatalogueEntry, text: str) -> Match | None:
    """The entry's first match in `text` (earliest line), or None."""
    if not all(r.search(text) for r in entry.requires):
        return None
    best = None
    for pattern in entry.patterns:
        m = pattern.search(text)
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
         "host-oom-loading-weights": "host-out-of-memory-killed", "timeout-while-rank0-busy": "nccl-watchdog-timeout"}


def match_catalogue(text: str, catalogue: tuple[CatalogueEntry, ...] | None = None, benign: bool = False) -> list[Match]:
    """The entries `text` matches, best first; harmless notices (role "benign") only when asked."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    found = [m for e in catalogue if (benign or e.role != "benign") and (m := match_entry(e, text)) is not None]
    # A specific explanation hides a generic one read from the same line (the first collective
    # timing out is a more useful reading than "a collective timed out").
    ids = {m.id for m in found}
    hidden = {HIDES[i] for i in ids if i in HIDES}
    return rank_matches([m for m in found if m.id not in hidden])


# --- pasted reports ---------------------------------------------------------------------------


def _findings_as_matches(findings: list, where: str) -> list[Match]:
    out = []
    for f in findings:
        # Only what is wrong: a pasted report's warnings (memory in use, a clock below its
        # maximum) describe a working machine as often as a broken one.
        if f.severity != "error":
            continue
        evidence = ", ".join(f"{k}={v}" for k, v in (f.evidence or {}).items()) or where
        out.append(
            Match(
                id=f"doctor:{f.id}",
                title=f.title,
                cause=f.detail,
                fix=f.fix,
                confidence=0.9 if f.severity == "error" else 0.6,
                evidence=f"{where}: {evidence}",
                role="primary",
                source="gpurig doctor rules, judged on the pasted report",
                kind="doctor",
            )
        )
    return out


def explain_pasted_report(text: str) -> tuple[list[Match], list[str], dict | None]:
    """Facts from pasted collect_env / nvidia-smi output, judged by the doctor's rules.

    Returns (matches, notes, facts as a dict or None when the text holds no such report).
    """
    from gpurig.probe.pasted import facts_from_pasted

    facts, kinds = facts_from_pasted(text)
    if facts is None:
        return [], [], None
    notes = [f"read a pasted {' and '.join(kinds)} report"]
    try:
        from gpurig.diagnose.rules import judge
    except ImportError:
        notes.append("the doctor's rules are not available in this build; facts read but not judged")
        return [], notes, facts.to_dict()
    findings = judge(facts)
    return _findings_as_matches(findings, "pasted " + " and ".join(kinds)), notes, facts.to_dict()


@dataclass
class Explanation:
    matches: list[Match] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict | None = None  # facts read from a pasted report
    next_steps: list[str] = field(default_factory=list)
    input: str = "text"  # "text", "empty" or "not text"
    world: str = "unknown"  # what the log comes from: pytorch, tensorflow, docker, ... (for the next steps)
    benign: list[Match] = field(default_factory=list)  # known harmless messages, when the log holds no failure

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"matches": [m.to_dict() for m in self.matches], "input": self.input,
                                "world": self.world}
        if self.benign:
            data["benign"] = [m.to_dict() for m in self.benign]
        if self.notes:
            data["notes"] = self.notes
        if self.facts is not None:
            data["facts"] = self.facts
        if not self.matches:
            data["next_steps"] = self.next_steps
        return data


_ROOT_BLOCK = re.compile(r"Root Cause \(first observed failure\):\s*\n(.*?)(?:\n=====|\Z)", re.S)


def _torchrun_root_cause(text: str) -> tuple[list[Match], list[str]]:
    """In pasted torchrun output, the root-cause entry of the ChildFailedError table comes first."""
    from gpurig.launch.collect import parse_failure_table

    block = _ROOT_BLOCK.search(text)
    if not block:
        return [], []
    failures = [f for f in parse_failure_table(text) if f.root_cause]
    notes = []
    if failures:
        f = failures[0]
        sig = f" ({f.signal})" if f.signal else ""
        notes.append(f"torchrun's root cause: rank {f.rank} on {f.host}, exit code {f.exitcode}{sig}")
    matches = [m for m in match_catalogue(block.group(1)) if m.role != "secondary"]
    if not matches:
        found = _EXCEPTION_LINE.findall(block.group(1))
        if found:
            rank = failures[0].rank if failures else "?"
            matches = [_generic_exception(str(rank), found[-1].strip())]
    for m in matches:
        m.confidence = min(1.0, m.confidence + 0.05)  # torchrun itself says this one came first
    return matches, notes


def input_kind(text: str) -> str:
    """'empty', 'not text' (a binary file: NUL bytes or mostly undecodable), or 'text'."""
    if not text.strip():
        return "empty"
    head = text[:8192]
    if "\x00" in head or head.count("\ufffd") > len(head) // 10:
        return "not text"
    return "text"


# What a log comes from, read from the words it uses: the next steps depend on it (a TensorFlow,
# Docker or WSL log gets no NCCL advice). First match wins; order from specific to general. The
# patterns are lowercase and run on the lowercased text (a case-insensitive regex is much slower).
_WORLDS = [
    ("wsl", re.compile(r"/usr/lib/wsl|\bwsl2?\b|microsoft-standard")),
    ("docker", re.compile(r"docker: error response|nvidia-container-cli|nvidia-container-runtime|"
                          r"could not select device driver|oci runtime|unknown or invalid runtime name")),
    ("kubernetes", re.compile(r"nvidia\.com/gpu|kubectl|device-plugin|failedscheduling|\bpod\b")),
    ("slurm", re.compile(r"\bslurmstepd\b|\bsrun\b|\bsbatch\b|slurm_")),
    ("tensorflow", re.compile(r"tensorflow|\btf\.distribute|\bkeras\b|mirroredstrategy|resourceexhaustederror")),
    ("deepspeed", re.compile(r"deepspeed")),
    ("accelerate", re.compile(r"\baccelerate\b")),
    ("lightning", re.compile(r"lightning")),
    ("driver", re.compile(r"nvidia-smi has failed|failed to initialize nvml|\bnvrm\b|\bxid\b")),
    ("pytorch", re.compile(r"torch|nccl|\bc10\b|torchrun|cuda")),
]

WORLD_STEPS = {
    "pytorch": NEXT_STEPS,
    "deepspeed": ["Read the first rank's traceback above the DeepSpeed launcher's lines: the launcher only reports that a rank exited.",
                  "Rerun with NCCL_DEBUG=INFO if the failure is inside a collective.", NEXT_STEPS[2]],
    "accelerate": ["Run `accelerate env` and check `num_processes` against the number of GPUs.",
                   "Rerun with NCCL_DEBUG=INFO if the failure is inside a collective.", NEXT_STEPS[2]],
    "lightning": ["Check the Trainer's `accelerator`, `devices` and `strategy` against the machine (`gpurig doctor`).",
                  "Rerun with NCCL_DEBUG=INFO if the failure is inside a collective."],
    "tensorflow": ["Run `python -c \"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\"`: an empty list means TensorFlow cannot load its CUDA libraries.",
                   "Rerun with TF_CPP_MIN_LOG_LEVEL=0 and read the first 'W'/'E' lines about libraries or devices.",
                   "Run `gpurig doctor` to check the driver and TensorFlow's build against it."],
    "docker": ["Run `docker run --rm --gpus all ubuntu nvidia-smi`: if it fails, the NVIDIA Container Toolkit is not set up on the host.",
               "Run `gpurig doctor` on the host, then `gpurig env docker` for a container that fits it."],
    "wsl": ["In WSL2 the driver comes from Windows: check that /usr/lib/wsl/lib/libcuda.so exists and is on the library path, and do not install a Linux driver inside WSL.",
            "Run `nvidia-smi` inside WSL; then `gpurig doctor`."],
    "kubernetes": ["Check that the node advertises GPUs: `kubectl describe node | grep nvidia.com/gpu` (the NVIDIA device plugin must run there).",
                   "Run `gpurig env k8s` for a job spec that asks for the GPUs correctly."],
    "slurm": ["Check that the job asked for GPUs (`--gres=gpu:N` or `--gpus-per-node=N`) and that CUDA_VISIBLE_DEVICES is set inside it.",
              "Run `gpurig env slurm` for a batch script that fits the machine."],
    "driver": ["Run `nvidia-smi` and `dmesg | grep -i -E 'nvrm|xid'` on the host: the driver's own words say what broke.",
               "Run `gpurig doctor`."],
    "unknown": ["Paste the full log, from the first error line to the end (the first error is usually the cause).",
                "Run `gpurig doctor` to check the driver, the GPUs and the framework builds."],
}


def world_of(text: str) -> str:
    low = text.lower()
    for name, pattern in _WORLDS:
        if pattern.search(low):
            return name
    return "unknown"


# A log longer than this is read through its focus: its beginning, its end, and every line that
# holds a word of failure, with the lines around it. Logs grow by repeating progress and chatter,
# which says nothing; the catalogue and the index then read a few hundred kilobytes, not 30 MB.
FOCUS_OVER = 1_000_000
_FOCUS_HEAD, _FOCUS_TAIL, _FOCUS_LINES, _FOCUS_AROUND = 50_000, 150_000, 2000, 2
# Fragments of the words of failure (case-sensitive, found by str.find, which is fast).
_FOCUS_KEYS = ("rror", "ERROR", "xception", "ail", "FAIL", "illed", "raceback", "atal", "FATAL", "bort", "egmentation",
               "efused", "enied", "imed out", "imeout", "annot", "ould not", "nable", "ot found", "o such", "nvalid",
               "ismatch", "NVRM", "Xid", "xitcode", "eturn code", "ut of memory", "NCCL WARN", "Init COMPLETE",
               "ignal", "MirroredStrategy", "OOM")


def focus(text: str) -> str:
    """The part of a long log worth reading (see FOCUS_OVER); a short log is returned whole."""
    if len(text) <= FOCUS_OVER:
        return text
    body_start, body_end = _FOCUS_HEAD, len(text) - _FOCUS_TAIL
    starts: set[int] = set()
    for key in _FOCUS_KEYS:
        i = text.find(key, body_start, body_end)
        while i >= 0 and len(starts) < 4 * _FOCUS_LINES:
            line_start = text.rfind("\n", 0, i) + 1
            starts.add(line_start)
            line_end = text.find("\n", i)
            if line_end < 0:
                break
            i = text.find(key, line_end, body_end)
    picked = sorted(starts)
    if len(picked) > _FOCUS_LINES:  # the first failures and the last ones
        picked = picked[: _FOCUS_LINES // 4] + picked[-(_FOCUS_LINES - _FOCUS_LINES // 4):]
    spans: list[tuple[int, int]] = []
    for start in picked:
        a = start
        for _ in range(_FOCUS_AROUND):
            a = text.rfind("\n", 0, max(a - 1, 0)) + 1 if a > 0 else 0
        b = start
        for _ in range(_FOCUS_AROUND + 1):
            nxt = text.find("\n", b)
            b = len(text) if nxt < 0 else nxt + 1
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b))
        else:
            spans.append((a, b))
    head_end = text.find("\n", body_start) + 1 or body_start
    tail_start = text.rfind("\n", 0, body_end) + 1
    parts = [text[:head_end]] + [text[a:b] for a, b in spans if b > head_end and a < tail_start] + [text[tail_start:]]
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def _relocate(matches: list[Match], text: str) -> None:
    """Line numbers of evidence read in a log's focus, as lines of the whole log."""
    for m in matches:
        if m.line is None or not m.evidence:
            continue
        pos = text.find(m.evidence.rstrip(" …"))
        m.line = text.count("\n", 0, pos) + 1 if pos >= 0 else None


# How a process ended, without why: an exit code, a signal.
_EXIT_READING = re.compile(r"exit ?code|return code|exit status|[Ss]ignal \d|SIG[A-Z]{3,}")

# Catalogue entries that say only how a process ended (a signal, a peer gone, a generic exception):
# a resolved thread that names the cause in the same log comes before them.
GENERIC = {"worker-aborted", "worker-segfault", "worker-terminated-by-launcher", "peer-connection-lost",
           "uncaught-exception", "host-out-of-memory-killed", "abort-at-exit"}


def _benign_classes() -> set[str]:
    try:
        from gpurig.diagnose.threads import load_classes

        return {k for k, v in load_classes().items() if v.get("benign")}
    except (OSError, ValueError):
        return set()


def _thread_match(hit) -> Match:
    case = hit.case
    return Match(
        id=f"thread:{case.id}",
        title=f"Like a resolved thread: {case.title.strip()[:160]}",
        cause=case.cause,
        fix=case.fix,
        confidence=round(hit.confidence, 2),
        evidence=hit.evidence,
        role="primary",
        source=case.url,
        kind="thread",
        cls=case.cls,
    )


def explain_text(text: str, index: Any = "default", exclude: str | None = None) -> Explanation:
    """Everything `gpurig explain` says about one log or pasted report.

    `index` is a `threads.ThreadIndex` (default: every shipped thread; None: the catalogue alone);
    `exclude` a thread id the index must not answer with (for measuring on a thread it holds).
    """
    kind = input_kind(text)
    if kind != "text":
        what = "the input is empty" if kind == "empty" else "the input is not text (a binary file?)"
        steps = ["Pass the log as text: a file, or '-' to read it from stdin (e.g. `gpurig explain - < train.log`)."]
        return Explanation(notes=[what], next_steps=steps, input=kind, world="unknown")
    whole, text = text, focus(text)
    root_matches, notes = _torchrun_root_cause(text)
    seen = {m.id for m in root_matches}
    matches = root_matches + [m for m in match_catalogue(text, benign=True) if m.id not in seen]
    pasted, pasted_notes, facts = explain_pasted_report(text)
    benign_classes = _benign_classes()
    everything = rank_matches(pasted + matches)
    harmless = [m for m in everything if m.role == "benign" or m.cls in benign_classes]
    ranked = [m for m in everything if m not in harmless]
    if index == "default":
        from gpurig.diagnose.threads import default_index

        index = default_index()
        if index is None:
            notes.append("the index of resolved threads needs the rank_bm25 package (pip install rank-bm25); catalogue only")
    if index is not None:
        from gpurig.diagnose.threads import SURE, has_failure

        # A log that reports no failure (warnings, notices, progress) is answered by a thread only
        # when the thread is about that very warning: the score must say "sure".
        # The same for a pasted collect_env / nvidia-smi report: its lines ("Could not collect")
        # are not errors, and the doctor's rules have judged it.
        floor = None if has_failure(text) and facts is None else SURE
        merged = _with_threads(ranked, index.search(text, exclude=exclude), floor)
        harmless += [m for m in merged if m.cls in benign_classes and m not in ranked]
        ranked = [m for m in merged if m.cls not in benign_classes]
    for m in harmless:
        m.role = "benign"
    if ranked:  # a real failure: harmless notices beside it are noise
        harmless = []
    if text is not whole:
        _relocate(ranked + harmless, whole)
        notes.append(f"a long log ({len(whole) / 1e6:.1f} MB): read its first and last lines and every line that reports a failure")
    world = world_of(text)
    result = Explanation(matches=ranked, notes=notes + pasted_notes, facts=facts, world=world, benign=harmless[:3])
    if not result.matches:
        result.next_steps = list(WORLD_STEPS.get(world, NEXT_STEPS))
    return result


def _threads_for(ranked: list[Match], text: str) -> list[Match]:
    """`ranked` with the closest resolved threads merged in (unchanged without the index)."""
    from gpurig.diagnose.threads import SURE, default_index, has_failure

    index = default_index()
    if index is None:
        return ranked
    benign = _benign_classes()
    merged = _with_threads(ranked, index.search(text), None if has_failure(text) else SURE)
    return [m for m in merged if m.cls not in benign]


def _with_threads(ranked: list[Match], hits: list, floor: float | None = None) -> list[Match]:
    """Merge the closest resolved threads into the catalogue's answer.

    A thread of a cause the catalogue already gave supports that answer (its URL goes to the
    answer's `see_also`). A thread of another cause leads when the catalogue has nothing, only a
    consequence or a generic reading (how the process ended), or something less sure; otherwise it
    is offered after, as another possible cause. `floor` overrides the least confidence of a
    thread that may lead (a log with no failure in it needs a sure one)."""
    from gpurig.diagnose.threads import ALTERNATIVE, FLOOR, SURE

    lead_floor = FLOOR if floor is None else floor
    other_floor = ALTERNATIVE if floor is None else floor
    out = list(ranked)
    new: list[Match] = []
    for hit in hits:
        t = _thread_match(hit)
        holder = next((m for m in out if (m.cls or m.id) == t.cls or HIDES.get(m.id) == t.cls), None)
        if holder is not None:
            if hit.confidence >= other_floor:
                holder.see_also.append(t.source)
            continue
        new.append(t)
    if not new:
        return out
    lead = out[0] if out else None
    first = new[0]
    generic = lead is not None and lead.id in GENERIC and (
        lead.id != "host-out-of-memory-killed" or _EXIT_READING.search(lead.evidence or "") is not None)
    thread_leads = first.confidence >= lead_floor and (
        lead is None or lead.role == "secondary" or (generic and first.confidence > lead.confidence)
        or (first.confidence >= SURE and first.confidence > lead.confidence))
    if thread_leads:
        return [first] + out + [t for t in new[1:] if t.confidence >= other_floor]
    if not out:
        return []  # nothing close enough to say
    return out + [t for t in new if t.confidence >= other_floor]


# --- reading a traceback --------------------------------------------------------------------

_C10D_FRAME = re.compile(r'File "[^"]*distributed_c10d\.py", line \d+, in (\w+)')
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n(?:[^\n]*\]: )?\s+(\S[^\n]*)')
_NCCL_FRAME = re.compile(r"^#\d+ (\S+) from (\S+):(\d+)\s*$", re.M)
_NCCL_OP = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)")


def collective_in_text(text: str) -> tuple[str | None, int | None]:
    """The collective a rank was in when it failed: NCCL's watchdog line, else the traceback."""
    ops = list(_NCCL_OP.finditer(text))
    if ops:
        m = ops[-1]
        return m.group(2).lower(), int(m.group(1))
    names = _C10D_FRAME.findall(text)
    return (names[-1] if names else None), None


def user_frame(text: str) -> str | None:
    """The last traceback frame outside torch and the standard library: where the user's code was."""
    found = None
    for m in _NCCL_FRAME.finditer(text):
        path = m.group(2)
        if "/torch/" not in path and "site-packages" not in path:
            found = f"{path.rsplit('/', 1)[-1]}:{m.group(3)}"
            break  # innermost first in this format
    if found:
        return found
    for m in _FRAME.finditer(text):
        path = m.group(1)
        if "/torch/" in path or "site-packages" in path or path.startswith("<frozen") or "/launch/inject/" in path:
            continue
        found = f"{path.rsplit('/', 1)[-1]}:{m.group(2)} {m.group(4).strip()}"
    return found


# --- a failed `gpurig launch` run --------------------------------------------------------------

_EXIT_SIGNALS = {6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 2: "SIGINT"}


@dataclass
class RunDiagnosis:
    """Why a run ended: the root-cause rank, its explanation, and for a hang who did not arrive."""

    status: str  # "ok", "failed", "hang", "interrupted"
    exit_code: int  # what `gpurig launch` exits with: the failing worker's (128+N for signal N)
    summary: str
    root_rank: int | None = None
    worker_exitcode: int | None = None  # as torchrun reports it: negative for a signal
    signal: str | None = None
    matches: list[Match] = field(default_factory=list)
    collective: str | None = None
    sequence: int | None = None
    arrived_ranks: list[int] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    hang_source: str | None = None  # "flight-recorder" or "logs"
    where: str | None = None  # the user's line the root rank was at
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    ranks: dict[str, str] = field(default_factory=dict)  # rank -> what its log says, one word
    next_steps: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["matches"] = [m.to_dict() for m in self.matches]
        return data


def exit_code_for(worker_exitcode: int | None, fallback: int = 1) -> int:
    """A worker's exit status as a shell sees it: 1 stays 1, killed by signal 9 (-9) becomes 137."""
    if worker_exitcode is None:
        return fallback
    if worker_exitcode < 0:
        return 128 + (-worker_exitcode)
    return worker_exitcode or fallback


def _exit_text(exitcode: int, pid: int | None = None) -> str:
    """The lines torchrun prints for an exit code, so the catalogue's exit-code entries apply."""
    text = f"  exitcode  : {exitcode} (pid: {pid or '?'})\n"
    if exitcode < 0 and -exitcode in _EXIT_SIGNALS:
        text += f"  traceback : Signal {-exitcode} ({_EXIT_SIGNALS[-exitcode]}) received by PID {pid or '?'}\n"
    return text


_EXCEPTION_LINE = re.compile(r"^\s*(?:\[\w+\]:\s*)*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*)$", re.M)


def _uncaught_exception(rank: int, log, text: str) -> Match | None:
    """The script's own exception (not one in the catalogue): still the reason this rank died."""
    message = log.error_message
    if not message:
        found = _EXCEPTION_LINE.findall(text)
        message = found[-1].strip() if found else None
    if not message or message.startswith(("KeyboardInterrupt", "SystemExit")):
        return None
    return _generic_exception(str(rank), message)


def _generic_exception(rank: str, message: str) -> Match:
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


def _role(matches: list[Match]) -> str | None:
    roles = {m.role for m in matches}
    for role in ROLES:
        if role in roles:
            return role
    return None


def analyze_traces(traces: dict[int, list], world_size: int | None) -> dict[str, Any] | None:
    """Merge flight recorder dumps: the collective some ranks entered and others never reached.

    `traces` maps rank -> TraceEntry list (launch.collect.read_trace_dump). Returns None when the
    dumps hold no collective.
    """
    by_pg: dict[str, dict[int, list]] = {}
    for rank, entries in traces.items():
        for e in entries:
            if not e.p2p:
                by_pg.setdefault(e.pg, {}).setdefault(rank, []).append(e)
    best = None
    for pg, ranks in by_pg.items():
        last = {r: max(es, key=lambda e: e.seq) for r, es in ranks.items()}
        top = max(e.seq for e in last.values())
        top_entry = next(e for e in last.values() if e.seq == top)
        unfinished = any(e.state != "completed" for e in last.values())
        if not unfinished and best is not None:
            continue
        expected = set(range(world_size)) if world_size else set(traces)
        arrived = sorted(r for r, e in last.items() if e.seq == top)
        missing = sorted(expected - set(arrived))
        behind = {r: last[r].seq for r in missing if r in last}
        last_seen = {r: f"{last[r].op.split(':')[-1]} #{last[r].seq}" + (f" at {last[r].where}" if last[r].where else "")
                     for r in missing if r in last}
        candidate = {
            "process_group": pg,
            "collective": top_entry.op.split(":")[-1],
            "sequence": top,
            "state": top_entry.state,
            "arrived_ranks": arrived,
            "missing_ranks": missing,
            "last_sequence_of_missing": behind,
            "last_collective_of_missing": last_seen,
            "where": next((last[r].where for r in arrived if last[r].where), None),
            "no_dump_ranks": sorted(expected - set(traces)),
        }
        if best is None or (unfinished and (missing or not best["missing_ranks"])):
            best = candidate
    return best


# How an interrupted run's line names the signal that stopped it.
_STOP_WORDS = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM (from a scheduler or kill)"}


def _interrupted(record, stop_signal: str | None, again: str) -> RunDiagnosis:
    """The user (or their scheduler) stopped the run: one quiet line, no matches and no advice.

    The workers' last words are the signal we sent them, not a fault to explain."""
    import signal as signals

    name = stop_signal or "SIGINT"
    try:
        number = signals.Signals[name].value
    except KeyError:
        name, number = "SIGINT", signals.SIGINT.value
    where = f"; logs in {record.run_dir}" if getattr(record, "run_dir", None) else ""
    summary = f"stopped by {_STOP_WORDS.get(name, name)}; every worker was stopped{where}; {again}"
    return RunDiagnosis(status="interrupted", exit_code=128 + number, summary=summary, signal=name)


def explain_run(
    record,
    returncode: int,
    timed_out: bool = False,
    interrupted: bool = False,
    tail: int = 30,
    stop_signal: str | None = None,
    again: str = "run the same command again to start over",
) -> RunDiagnosis:
    """Decide which rank caused the run to end, and why. `record` is a launch.collect.RunRecord.

    An `interrupted` run was stopped on purpose by `stop_signal` ("SIGINT", the default, or
    "SIGTERM"): its diagnosis is that one fact and `again`, how to continue.
    """
    if interrupted:
        return _interrupted(record, stop_signal, again)
    failures = {f.rank: f for f in record.failures}
    per_rank: dict[int, list[Match]] = {}
    roles: dict[int, str | None] = {}
    for rank in sorted(set(record.ranks) | set(failures)):
        log = record.ranks.get(rank)
        text = ""
        if log is not None:
            text = log.text
            if log.error_traceback and log.error_traceback not in text:
                text += "\n" + log.error_traceback
        log_matches = match_catalogue(text) if text else []
        role = _role(log_matches)
        matches = log_matches
        if rank in failures:
            exit_matches = match_catalogue(_exit_text(failures[rank].exitcode, failures[rank].pid))
            exit_role = _role(exit_matches)
            if role in (None, "secondary"):
                # A death by signal (SIGKILL, SIGSEGV, ...) is this rank's own fault; SIGTERM from
                # torchrun is not.
                if exit_role == "primary" or (role is None and exit_role is not None):
                    role = exit_role
                matches = rank_matches(exit_matches + log_matches)
            else:
                matches = rank_matches(log_matches + [m for m in exit_matches if m.role != "secondary"])
        if role in (None, "secondary") and log is not None:
            raised = _uncaught_exception(rank, log, text)
            if raised is not None and (role is None or not any(m.role == "secondary" for m in log_matches)):
                matches = rank_matches([raised] + matches)
                role = "primary"
        per_rank[rank] = matches
        roles[rank] = role
    ranks_summary = {str(r): (roles[r] or "no error") for r in sorted(roles)}

    def first(candidates: list[int]) -> int:
        def key(r: int):
            log = record.ranks.get(r)
            when = log.error_time if log and log.error_time else float("inf")
            torchrun_root = 0 if r in failures and failures[r].root_cause else 1
            return (when, torchrun_root, r)

        return min(candidates, key=key)

    def finish(diag: RunDiagnosis, rank: int | None) -> RunDiagnosis:
        if rank is not None:
            log = record.ranks.get(rank)
            if log is not None:
                diag.log_path = str(Path(log.log_paths[0]).parent) if log.log_paths else None
                lines = log.text.splitlines()
                # NCCL_DEBUG=INFO buries the rank's own last words under set-up chatter.
                quiet = [line for line in lines if " NCCL INFO " not in line]
                if quiet and len(quiet) < len(lines):
                    diag.log_tail = ["(NCCL INFO lines left out)"] + quiet[-tail:]
                else:
                    diag.log_tail = lines[-tail:]
                diag.where = diag.where or user_frame(log.text + "\n" + (log.error_traceback or ""))
        diag.ranks = ranks_summary
        if rank is not None and diag.status == "failed" and (not diag.matches or diag.matches[0].id in GENERIC):
            # The catalogue says only how the rank ended (an exception, a signal): a resolved
            # thread may know why.
            log = record.ranks.get(rank)
            if log is not None:
                diag.matches = _threads_for(diag.matches, log.text + "\n" + (log.error_traceback or ""))
        if not diag.matches and diag.status != "ok":
            diag.next_steps = list(NEXT_STEPS)
        return diag

    primary = [r for r, role in roles.items() if role == "primary"]
    timeouts = [r for r, role in roles.items() if role == "timeout"]

    if primary:
        root = first(primary)
        f = failures.get(root)
        code = f.exitcode if f else None
        diag = RunDiagnosis(
            status="failed",
            exit_code=exit_code_for(code, returncode or 1),
            summary="",
            root_rank=root,
            worker_exitcode=code,
            signal=_EXIT_SIGNALS.get(-code) if code and code < 0 else None,
            matches=per_rank[root],
        )
        title = per_rank[root][0].title if per_rank[root] else "failed"
        how = f" (exit code {code}{', ' + diag.signal if diag.signal else ''})" if code is not None else ""
        diag.summary = f"rank {root} failed first{how}: {title}"
        return finish(diag, root)

    if timeouts:
        waiting = first(timeouts)
        world = record.world_size or (max(set(record.ranks) | set(failures), default=-1) + 1) or None
        merged = analyze_traces(record.traces, world) if record.traces else None
        diag = RunDiagnosis(status="hang", exit_code=1, summary="", matches=per_rank[waiting])
        missing_last: dict = {}
        if merged:
            missing_last = merged.get("last_collective_of_missing", {})
            diag.hang_source = "flight-recorder"
            diag.collective = merged["collective"]
            diag.sequence = merged["sequence"]
            diag.arrived_ranks = merged["arrived_ranks"]
            diag.missing_ranks = merged["missing_ranks"]
        else:
            diag.hang_source = "logs"
            log = record.ranks.get(waiting)
            op, seq = collective_in_text(log.text if log else "")
            diag.collective, diag.sequence = op, seq
            diag.arrived_ranks = sorted(timeouts)
            everyone = set(range(world)) if world else set(record.ranks)
            diag.missing_ranks = sorted(everyone - set(timeouts))
        f = failures.get(waiting)
        diag.worker_exitcode = f.exitcode if f else None
        diag.signal = f.signal if f else None
        diag.exit_code = exit_code_for(diag.worker_exitcode, returncode or 1)
        op = diag.collective or "a collective"
        seq = f" #{diag.sequence}" if diag.sequence else ""
        if diag.missing_ranks:
            who = ", ".join(str(r) for r in diag.missing_ranks)
            diag.summary = (
                f"rank(s) {', '.join(str(r) for r in diag.arrived_ranks)} waited in {op}{seq} until the "
                f"timeout; rank(s) {who} never arrived (read from the {diag.hang_source})"
            )
            if missing_last:
                diag.summary += "; last collective of " + ", ".join(
                    f"rank {r}: {what}" for r, what in sorted(missing_last.items()))
            root = diag.missing_ranks[0]
        else:
            diag.summary = (
                f"every rank entered {op}{seq} and none finished: not a missing rank but a stuck "
                f"collective (network or peer-to-peer), read from the {diag.hang_source}"
            )
            root = waiting
        diag.root_rank = root
        waited_at = user_frame(record.ranks[waiting].text) if waiting in record.ranks else None
        waited_at = waited_at or (merged or {}).get("where")
        diag.where = f"rank {waiting} waited at {waited_at}" if waited_at else None
        return finish(diag, root)

    if timed_out:
        diag = RunDiagnosis(
            status="hang",
            exit_code=124,
            summary="the run did not finish within --max-time and no rank reported an error; the last lines of each rank show where they were",
        )
        return finish(diag, min(record.ranks) if record.ranks else None)

    if failures:
        root_entry = next((f for f in record.failures if f.root_cause), record.failures[0])
        root = root_entry.rank
        diag = RunDiagnosis(
            status="failed",
            exit_code=exit_code_for(root_entry.exitcode, returncode or 1),
            summary=f"rank {root} failed first (exit code {root_entry.exitcode})",
            root_rank=root,
            worker_exitcode=root_entry.exitcode,
            signal=root_entry.signal,
            matches=per_rank.get(root, []),
        )
        return finish(diag, root)

    if returncode == 0:
        return finish(RunDiagnosis(status="ok", exit_code=0, summary="every worker finished"), None)

    # torchrun itself failed before any worker ran (bad script path, rendezvous error, ...).
    matches = match_catalogue(record.launcher_tail)
    diag = RunDiagnosis(
        status="failed",
        exit_code=returncode if returncode > 0 else exit_code_for(returncode),
        summary="torchrun failed before the workers ran" + (f": {matches[0].title}" if matches else ""),
        matches=matches,
        log_tail=record.launcher_tail.splitlines()[-tail:],
    )
    diag.ranks = ranks_summary
    if not matches:
        diag.next_steps = list(NEXT_STEPS)
    return diag
