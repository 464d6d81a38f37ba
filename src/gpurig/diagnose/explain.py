"""Logs -> explanations: the error catalogue (`diagnose/catalogue.py`), then the closest resolved
public threads (`diagnose/threads.py`).

`explain_text()` returns the explanations of a log, best first, each with the line that matched.
It also recognises pasted `python -m torch.utils.collect_env` and `nvidia-smi` output, turns them
into facts and runs the doctor's rules on them; a long log is read through its focus. A failed
`gpurig launch` run is diagnosed by `diagnose/run_diagnosis.py`. Pure: no I/O apart from reading
the catalogue and the index shipped with the package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpurig.diagnose.catalogue import (
    EXCEPTION_LINE,
    NEXT_STEPS,
    Match,
    generic_exception,
    hidden_by,
    match_catalogue,
    rank_matches,
)
from gpurig.diagnose.loglines import clean, raised_in

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
    benign: list[Match] = field(default_factory=list)  # known harmless messages, when nothing else was recognised
    failed: bool = False  # beside the harmless notices, the log reports a failure they do not explain
    raised_in: dict | None = None  # the installed package whose own code raised the last traceback (nothing matched)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"matches": [m.to_dict() for m in self.matches], "input": self.input,
                                "world": self.world}
        if self.benign:
            data["benign"] = [m.to_dict() for m in self.benign]
            data["failed"] = self.failed  # whether the harmless messages are all there is
        if self.notes:
            data["notes"] = self.notes
        if self.facts is not None:
            data["facts"] = self.facts
        if not self.matches:
            data["next_steps"] = self.next_steps
            if self.raised_in is not None:
                data["raised_in"] = self.raised_in
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
        found = EXCEPTION_LINE.findall(block.group(1))
        if found:
            rank = failures[0].rank if failures else "?"
            matches = [generic_exception(str(rank), found[-1].strip())]
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
    if case.entry:  # closest to a catalogue entry's real example: the entry, read by resemblance
        from gpurig.diagnose.catalogue import load_catalogue

        entry = next(e for e in load_catalogue() if e.id == case.entry)
        return Match(id=entry.id, title=f"Like a known error: {entry.title}", cause=entry.cause, fix=entry.fix,
                     confidence=round(hit.confidence, 2), evidence=hit.evidence, role="primary",
                     source=entry.source, kind="similar", cls=case.cls)
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


def _fails_beside(text: str, harmless: list[Match]) -> bool:
    """Whether the log reports a failure on a line other than those of its harmless notices (a
    notice may itself say "can cause the process to hang" or "could not find the plugin")."""
    from gpurig.diagnose.loglines import has_failure

    notices = {m.evidence.strip() for m in harmless if m.evidence}
    return has_failure("\n".join(line for line in text.splitlines() if line.strip() not in notices))


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
    text = clean(text)  # colour codes, typographic quotes, non-breaking spaces, CRLF: as the program printed it
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
        from gpurig.diagnose.loglines import has_failure
        from gpurig.diagnose.threads import SURE

        # A log that reports no failure (warnings, notices, progress) is answered by a thread only
        # when the thread is about that very warning: the score must say "sure".
        # The same for a pasted collect_env / nvidia-smi report: its lines ("Could not collect")
        # are not errors, and the doctor's rules have judged it.
        # And a log whose only lines the catalogue knows are harmless notices (a missing optional
        # library, NCCL's plugin search): a thread must be sure to say those lines are the failure.
        floor = None if has_failure(text) and facts is None and (ranked or not harmless) else SURE
        from gpurig.diagnose.threads import ALTERNATIVE, canonical

        hits = index.search(text, exclude=exclude)
        merged = _with_threads(ranked, hits, floor)
        said = {m.cls or m.id for m in harmless}  # a notice the catalogue named is said once, with its thread
        for hit in hits:  # resolved threads about a notice the catalogue named go beside it
            holder = next((h for h in harmless if canonical(h.cls or h.id) == hit.case.cls), None)
            if holder is not None and hit.confidence >= ALTERNATIVE and hit.case.url and hit.case.url not in holder.see_also:
                holder.see_also.append(hit.case.url)
        for m in merged:
            if m.cls in benign_classes and m not in ranked:
                if m.cls in said:
                    holder = next((h for h in harmless if (h.cls or h.id) == m.cls), m)
                    if m.source not in holder.see_also:
                        holder.see_also.append(m.source)
                else:
                    harmless.append(m)
                    said.add(m.cls)
        ranked = [m for m in merged if m.cls not in benign_classes]
    for m in harmless:
        m.role = "benign"
    if ranked:  # a real failure: harmless notices beside it are noise
        harmless = []
    if text is not whole:
        _relocate(ranked + harmless, whole)
        notes.append(f"a long log ({len(whole) / 1e6:.1f} MB): read its first and last lines and every line that reports a failure")
    world = world_of(text)
    result = Explanation(matches=ranked, notes=notes + pasted_notes, facts=facts, world=world, benign=harmless[:3],
                         failed=bool(harmless) and facts is None and _fails_beside(text, harmless))
    if not result.matches:
        result.next_steps = list(WORLD_STEPS.get(world, NEXT_STEPS))
        result.raised_in = raised_in(text)
        if result.raised_in is not None:
            result.next_steps.insert(0, _library_step(result.raised_in))
    return result


def _library_step(where: dict) -> str:
    """What to do about an error no entry and no thread names, raised inside a library's own code."""
    pkg, message = where["package"], where["message"]
    look_for = f'"{message[:120]}"' if message else "the exception's message"
    version = f" Compare the installed version (`pip show {where['pip']}`) with its release notes." if where["pip"] else ""
    return (f"The error is raised inside {pkg} ({where['file']}, line {where['line']}, in {where['function']}): if the "
            f"call into it is right, search {pkg}'s issues for {look_for}. An error in a library's own code is often a "
            f"bug of one release, fixed in the next, or a release that does not match the framework under it.{version}")


def _threads_for(ranked: list[Match], text: str) -> list[Match]:
    """`ranked` with the closest resolved threads merged in (unchanged without the index)."""
    from gpurig.diagnose.loglines import has_failure
    from gpurig.diagnose.threads import SURE, default_index

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
    from gpurig.diagnose.threads import ALTERNATIVE, FLOOR, SURE, canonical

    lead_floor = FLOOR if floor is None else floor
    other_floor = ALTERNATIVE if floor is None else floor
    out = list(ranked)
    new: list[Match] = []
    for hit in hits:
        t = _thread_match(hit)
        holder = next((m for m in out if canonical(m.cls or m.id) == t.cls or t.cls in hidden_by(m.id)), None)
        if holder is not None:
            if hit.confidence >= ALTERNATIVE and t.kind == "thread":  # a thread of the answer's own cause changes no answer
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


