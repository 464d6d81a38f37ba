"""Resolved public threads: when the catalogue is not sure, the closest real case.

`knowledge/threads/*.jsonl` holds public issues and forum threads on multi-GPU training errors,
each reduced to the error text as it was pasted, the cause the thread established, the fix and the
URL. A log is compared with them over its *distinctive lines* (the lines that say something went
wrong), normalised so that numbers, paths, addresses, hosts and rank prefixes do not count, and
ranked with BM25 (the `rank_bm25` package). The closest cases vote for a cause class; the answer
is the best case of the winning class, with a confidence read from a calibration measured on the
development threads (`calibration.toml`: a logistic curve from score to the share of answers
right), on the logs a thread may answer first: those the catalogue does not explain itself.

The threads are split once, by a hash of their URL, into a development part (tuned on) and a
test part (only measured on); see `split_of`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from gpurig.diagnose.loglines import TOKEN, clean, distinctive, line_tokens, tokens_of, tokens_of_title

FIELDS = ("id", "url", "title", "framework", "class", "log", "cause", "fix", "established_by", "found_by")
ESTABLISHED_BY = ("maintainer", "reporter-confirmed", "accepted-answer", "several-users")
TEST_EVERY = 5  # one thread in five is held out for measuring

# How many of the closest cases vote, and the least calibrated confidence at which a thread is
# offered as the explanation (below it, explain says plainly that nothing is close).
VOTERS = 7
# A voter counts by its score, a class's second voter half as much, its third a quarter, ...: a class is
# as close as its closest cases, and many threads pasting one common line do not outvote the nearest.
REPEAT_WEIGHT = 0.5
FLOOR = 0.25
ALTERNATIVE = 0.15  # the least confidence of a thread offered as another possible cause, after a first answer
EPS = 0.01  # calibration: a score enters the logistic curve as log(score + EPS)
TOP_PART = 6  # calibration: no answer surer than the highest-scoring sixth of the answers were right



class ThreadsError(ValueError):
    pass


@dataclass
class Case:
    id: str
    url: str
    title: str
    framework: str
    cls: str
    log: str
    cause: str
    fix: str
    established_by: str
    found_by: str
    split: str = "dev"
    tokens: list[str] = field(default_factory=list, repr=False)
    entry: str = ""  # the catalogue entry whose real example this is (not a thread), see `example_cases`

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str) -> Case:
        missing = [k for k in FIELDS if not isinstance(raw.get(k), str) or not raw.get(k).strip()]
        if missing:
            raise ThreadsError(f"{where}: {', '.join(missing)} missing or empty")
        case = cls(id=raw["id"], url=raw["url"], title=raw["title"], framework=raw["framework"], cls=raw["class"],
                   log=raw["log"], cause=raw["cause"], fix=raw["fix"], established_by=raw["established_by"],
                   found_by=raw["found_by"])
        case.split = split_of(case.url)
        return case

    def compute_tokens(self) -> list[str]:
        return tokens_of(clean(self.log), fallback=True) + tokens_of_title(clean(self.title))  # every thread is of a failure


def split_of(url: str) -> str:
    """'test' for one URL in TEST_EVERY, fixed for ever by the URL alone; 'dev' for the rest."""
    key = url.strip().rstrip("/").lower()
    return "test" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % TEST_EVERY == 0 else "dev"


# --- the shipped threads ------------------------------------------------------------------------


def threads_dir():
    return resources.files("gpurig.knowledge").joinpath("threads")


def parse_cases(lines: Iterable[tuple[str, str]], problems: list[str] | None = None) -> list[Case]:
    """Cases from (where, json line) pairs; a URL may appear once.

    With `problems` given, a bad line or a repeated URL is skipped and described there (what a
    user's `explain` does: one bad line of shipped data must not cost every answer); without it,
    the first one raises ThreadsError (what the tests do)."""
    cases: list[Case] = []
    urls: dict[str, str] = {}
    ids: set[str] = set()
    for where, line in lines:
        if not line.strip():
            continue
        try:
            try:
                raw = json.loads(line)
            except ValueError as exc:
                raise ThreadsError(f"{where}: not JSON ({exc})") from None
            if not isinstance(raw, dict):
                raise ThreadsError(f"{where}: not a JSON object")
            case = Case.from_dict(raw, where)
            key = case.url.rstrip("/").lower()
            if key in urls:
                raise ThreadsError(f"{where}: {case.url} is already {urls[key]}")
            if case.id in ids:
                raise ThreadsError(f"{where}: the id {case.id} is used twice")
        except ThreadsError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
            continue
        urls[key] = case.id
        ids.add(case.id)
        cases.append(case)
    return cases


def _thread_files() -> list:
    """The shipped thread files (`*.jsonl`), in name order."""
    return [item for item in sorted(threads_dir().iterdir(), key=lambda p: p.name) if item.name.endswith(".jsonl")]


def read_case_lines() -> list[tuple[str, str]]:
    return [(f"{item.name}:{n}", line) for item in _thread_files()
            for n, line in enumerate(item.read_text(encoding="utf-8").splitlines(), 1)]


@lru_cache(maxsize=1)
def _case_lines() -> tuple[tuple[str, str], ...]:
    """The shipped thread lines, read once per process (the threads and the examples both need them)."""
    return tuple(read_case_lines())


TOKENS_FILE = "tokens.json"
CLASSES_FILE = "classes.toml"


def tokens_key() -> str:
    """What the shipped tokens (and the classes and case fields beside them) were computed from, as
    bytes: every thread file, the catalogue's TOML files (its examples), classes.toml, and the code
    that makes tokens of a log (this module and `loglines.py`). Hashing the bytes is what lets an
    index load without parsing a thread."""
    from gpurig.knowledge.loaders import catalogue_files

    here = Path(__file__)
    digest = hashlib.sha256(here.read_bytes() + here.with_name("loglines.py").read_bytes()
                            + threads_dir().joinpath(CLASSES_FILE).read_bytes())
    for item in _thread_files():
        digest.update(item.name.encode() + b"\0" + item.read_bytes() + b"\0")
    for name, text in catalogue_files():
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


def shipped_record(cases: Sequence[Case], examples: Sequence[Case]) -> dict[str, Any]:
    """What tokens.json holds besides the key: every case's tokens, and the fields an answer shows
    (the threads' in order, the examples by their entry), so that `default_index` reads this file
    alone."""
    entries: dict[str, list[str]] = {}
    for e in examples:
        entries.setdefault(e.entry, [e.title, e.cause, e.fix])
    return {"tokens": {c.id: c.compute_tokens() for c in [*cases, *examples]},
            "cases": [[c.id, c.url, c.title, c.framework, c.cls, c.cause, c.fix, c.split] for c in cases],
            "examples": [[e.id, e.entry] for e in examples], "entries": entries}


def _light_cases(shipped: dict[str, Any] | None) -> list[Case] | None:
    """The index's cases (threads, then the catalogue's examples) from a current tokens.json, without
    their logs; None where it lacks them."""
    try:
        tokens, classes, entries = shipped["tokens"], load_classes(), shipped["entries"]
        cases = [Case(id=i, url=url, title=title, framework=fw, cls=canonical(cls, classes), log="", cause=cause, fix=fix,
                      established_by="", found_by="", split=split, tokens=tokens[i])
                 for i, url, title, fw, cls, cause, fix, split in shipped["cases"]]
        return cases + [Case(id=i, url="", title=entries[e][0], framework="", cls=canonical(e, classes), log="",
                             cause=entries[e][1], fix=entries[e][2], established_by="", found_by="", tokens=tokens[i],
                             entry=e) for i, e in shipped["examples"]]
    except (TypeError, KeyError, ValueError):
        return None


@lru_cache(maxsize=2)
def _shipped(key: str) -> dict[str, Any] | None:
    """tokens.json as `calibrate` wrote it, when it still fits `key`."""
    try:
        data = json.loads(threads_dir().joinpath(TOKENS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("key") == key else None


def _shipped_tokens(key: str) -> dict[str, list[str]] | None:
    """The tokens of every thread as `calibrate` wrote them, when they still fit `key`."""
    tokens = (_shipped(key) or {}).get("tokens")
    return tokens if isinstance(tokens, dict) else None


def parse_classes(text: str) -> dict[str, dict[str, str]]:
    """classes.toml's classes, by id."""
    return dict(tomllib.loads(text).get("class", {}))


@lru_cache(maxsize=1)
def load_classes() -> dict[str, dict[str, str]]:
    """class id -> {"definition", "same_as"} from classes.toml (catalogue ids need no entry); read
    from the copy in tokens.json while it is current (parsing the TOML costs an index load 0.02 s)."""
    classes = (_shipped(_shipped_key()) or {}).get("classes")
    if isinstance(classes, dict):
        return classes
    return parse_classes(threads_dir().joinpath(CLASSES_FILE).read_text(encoding="utf-8"))


def canonical(cls: str, classes: dict[str, dict[str, str]] | None = None) -> str:
    """The class `cls` is folded into (itself when it names a cause of its own)."""
    classes = load_classes() if classes is None else classes
    seen = set()
    while cls in classes and classes[cls].get("same_as") and cls not in seen:
        seen.add(cls)
        cls = classes[cls]["same_as"]
    return cls


PROBLEMS: list[str] = []  # shipped lines skipped by load_cases (the tests require none)


@lru_cache(maxsize=1)
def raw_example_cases() -> tuple[Case, ...]:
    """The catalogue's real examples as cases of the index, without tokens (see `example_cases`).
    Read from the raw catalogue: compiling its patterns is not needed here, and would double the
    time the index takes to load."""
    from gpurig.knowledge.loaders import error_catalogue_data

    return tuple(Case(id=f"catalogue:{e['id']}:{i}", url="", title=e["title"], framework="", cls=e["id"], log=text,
                      cause=e["cause"], fix=e["fix"], established_by="", found_by="", entry=e["id"])
                 for e in error_catalogue_data().get("entry", []) if e.get("role") != "benign"
                 for i, text in enumerate(e.get("examples", [])))


@lru_cache(maxsize=1)
def example_cases() -> tuple[Case, ...]:
    """Every real example of the catalogue (harmless notices aside) as a case of its entry's cause.

    The index holds them beside the threads: a log whose message the catalogue knows in a wording
    its patterns miss (another version's, cut or retyped) is still close to the entry's examples,
    and the vote then names the entry. They are knowledge written on the development part and from
    the sources, so they are in every index: the development part's leave-one-out and the index
    that answers the test part."""
    return _ready(raw_example_cases(), _shipped_key())


@lru_cache(maxsize=1)
def load_cases() -> tuple[Case, ...]:
    """Every shipped thread, with its tokens (from tokens.json when it is current: normalising
    six hundred logs costs more than a user should wait for)."""
    return _ready(parse_cases(_case_lines(), PROBLEMS), _shipped_key())


@lru_cache(maxsize=1)
def _shipped_key() -> str:
    """`tokens_key` of the shipped threads and examples, computed once per process."""
    return tokens_key()


def _ready(cases: Iterable[Case], key: str) -> tuple[Case, ...]:
    """Copies of `cases` with their canonical class and their tokens (shipped ones where they fit `key`)."""
    shipped = _shipped_tokens(key) or {}
    classes = load_classes()
    return tuple(replace(c, cls=canonical(c.cls, classes), tokens=shipped.get(c.id) or c.compute_tokens())
                 for c in cases)


class Calibration(NamedTuple):
    """Score -> share of answers right: a logistic curve in log(score + EPS) (Platt scaling), read
    only within the scores the development answers had (`low`..`high`) and never above `cap`."""

    a: float
    b: float
    low: float
    high: float
    cap: float

    def __call__(self, score: float) -> float:
        return min(_sigmoid(self.a * math.log(min(max(score, self.low), self.high) + EPS) + self.b), self.cap)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


@lru_cache(maxsize=1)
def load_calibration() -> Calibration | None:
    """The calibration `calibrate` wrote (None when calibration.toml is missing)."""
    path = threads_dir().joinpath("calibration.toml")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    fit = data.get("logistic")
    return Calibration(*(float(fit[k]) for k in Calibration._fields)) if fit else None


@lru_cache(maxsize=1)
def load_entry_record() -> dict[str, tuple[int, int]]:
    """Per catalogue entry: (times it matched a development thread, of them naming its cause)."""
    path = threads_dir().joinpath(ENTRY_RECORD_FILE)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {e["id"]: (int(e["answered"]), int(e["right"])) for e in data.get("entry", [])}


@lru_cache(maxsize=1024)
def source_urls(source: str) -> frozenset[str]:
    """The URLs a catalogue entry's `source` cites, without a trailing slash and lower-cased."""
    return frozenset(u.rstrip("/.").lower() for u in re.findall(r"https?://[^\s;,()<>'\"]+", source))


def write_entry_record(path, cases: Sequence[Case]) -> dict[str, tuple[int, int]]:
    """How often each catalogue entry named the cause of the development threads it matched (each
    thread left out of the index while answered; the entries' own calibration switched off).

    The threads an entry cites as its source are not counted for it: the entry was written from
    them, so its matching them says nothing of how it does on logs it was not written from. An entry
    matched only by those keeps its stated confidence, short of sure (`catalogue.UNPROVEN`)."""
    from gpurig.diagnose import catalogue, explain

    dev = [c for c in cases if c.split == "dev"]
    index = ThreadIndex(dev)
    record: dict[str, list[int]] = {}
    catalogue.USE_ENTRY_CALIBRATION = False
    try:
        for case in dev:
            result = explain.explain_text(case.log, index=index, exclude=case.id)
            found = result.matches or result.benign
            # Every entry that matched, not only the first: which entry comes first depends on the
            # confidences this record sets, and an entry's record must not depend on itself.
            for m in found:
                # A thread the entry was written from (cited in its source) proves nothing about it.
                if m.kind == "catalogue" and case.url.rstrip("/").lower() not in source_urls(m.source):
                    row = record.setdefault(m.id, [0, 0])
                    row[0] += 1
                    row[1] += canonical(m.cls or m.id) == case.cls
    finally:
        catalogue.USE_ENTRY_CALIBRATION = True
    lines = ["# Written by `python -m gpurig.diagnose.threads calibrate`: how often each catalogue entry named",
             f"# the cause of the development threads it matched ({len(dev)} threads, each left out of the",
             "# index while answered). explain blends this with the entry's stated confidence.", ""]
    for entry_id, (answered, right) in sorted(record.items()):
        lines += ["[[entry]]", f'id = "{entry_id}"', f"answered = {answered}", f"right = {right}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return {k: (v[0], v[1]) for k, v in record.items()}


def calibrated(score: float, calibration: Calibration | None | tuple = None) -> float:
    """The share of answers with this score that were right (None: the shipped calibration; an
    empty value: none, the raw score up to 0.5)."""
    calibration = load_calibration() if calibration is None else calibration
    return calibration(score) if calibration else min(score, 0.5)


# --- the index ----------------------------------------------------------------------------------


@dataclass
class Hit:
    """The closest resolved case of the winning class, and how the answer was reached."""

    case: Case
    score: float  # 0..1 before calibration: the class's share of the votes times the case's overlap
    confidence: float
    share: float
    overlap: float
    evidence: str


class ThreadIndex:
    """BM25 over the cases' distinctive tokens: the threads given, and the catalogue's examples
    unless `examples` is False."""

    def __init__(self, cases: Sequence[Case], examples: bool = True) -> None:
        from rank_bm25 import BM25Okapi

        self.cases = [c for c in list(cases) + list(example_cases() if examples else ()) if c.tokens]
        self.bm25 = BM25Okapi([c.tokens for c in self.cases]) if self.cases else None

    def search(self, text: str, exclude: str | None = None, calibration: Calibration | None | tuple = None,
               classes: int = 3) -> list[Hit]:
        """The closest case of each of the `classes` classes with the most votes, best first."""
        lines = distinctive(text)
        query = list(dict.fromkeys(line_tokens(norm for norm, _ in lines)))  # each word once: a repeated line is one signal
        if not query or self.bm25 is None:
            return []
        scores = self.bm25.get_scores(query)
        order = sorted(range(len(self.cases)), key=lambda i: -scores[i])
        top = [i for i in order if scores[i] > 0 and self.cases[i].id != exclude][:VOTERS]
        if not top:
            return []
        votes: dict[str, float] = {}
        voters: dict[str, int] = {}
        for i in top:
            cls = self.cases[i].cls
            votes[cls] = votes.get(cls, 0.0) + float(scores[i]) * REPEAT_WEIGHT ** voters.get(cls, 0)
            voters[cls] = voters.get(cls, 0) + 1
        total = sum(votes.values())
        words = {t for t in query if "~" not in t}
        hits = []
        for cls in sorted(votes, key=lambda k: -votes[k])[:classes]:
            case = self.cases[next(i for i in top if self.cases[i].cls == cls)]
            case_words = {t for t in case.tokens if "~" not in t}
            share = votes[cls] / total
            overlap = len(words & case_words) / max(1, len(case_words))
            score = round(share * overlap, 4)
            hits.append(Hit(case=case, score=score, confidence=calibrated(score, calibration), share=share,
                            overlap=overlap, evidence=_evidence(lines, case_words)))
        return hits


def _evidence(lines: list[tuple[str, str]], case_words: set[str]) -> str:
    """The user's line that shares the most words with the case."""
    best, best_n = "", 0
    for norm, raw in lines:
        n = len(set(TOKEN.findall(norm)) & case_words)
        if n > best_n:
            best, best_n = raw, n
    return best if len(best) <= 400 else best[:400] + " …"


@lru_cache(maxsize=1)
def default_index() -> ThreadIndex | None:
    """The index of every shipped thread, or None where rank_bm25 is not installed. Built from
    tokens.json alone while it fits the shipped files (no thread parsed, the catalogue not read)."""
    try:
        light = _light_cases(_shipped(_shipped_key()))
        return ThreadIndex(load_cases()) if light is None else ThreadIndex(light, examples=False)
    except ImportError:
        return None


# --- calibration and measurement ------------------------------------------------------------------


def leave_one_out(cases: Sequence[Case]) -> list[tuple[float, bool]]:
    """(score, right) for each case the index may answer first, answered by an index of all the others.

    A case the catalogue answers itself (an entry naming a cause, not only how a process ended) is
    left out: there a thread leads only when the catalogue is unsure, so those answers say nothing
    about how often a thread that leads is right. The logs left are the harder ones, and a thread's
    score means less on them than on a log the catalogue also knows."""
    from gpurig.diagnose.catalogue import match_catalogue
    from gpurig.diagnose.explain import GENERIC

    index = ThreadIndex(cases)
    out = []
    for case in cases:
        if any(m.role in ("primary", "timeout") and m.id not in GENERIC for m in match_catalogue(case.log)):
            continue
        hits = index.search(case.log, exclude=case.id, calibration=(), classes=1)
        if hits:
            out.append((hits[0].score, hits[0].case.cls == case.cls))
    return out


def fit_calibration(pairs: Sequence[tuple[float, bool]]) -> Calibration | None:
    """Platt scaling: the logistic curve p = 1 / (1 + exp(-(a * log(score + EPS) + b))) of the
    greatest likelihood for the (score, right) pairs, found by Newton's method (two parameters, no
    library needed). One smooth curve through every answer, where bins of answers moved their
    edges, and an answer's confidence with them, whenever a few answers changed. The curve is read
    only within the scores seen, and never above `cap`: the share right (add-one smoothed) of the
    highest-scoring sixth of the answers, so that a thread is presented as sure (SURE) only where
    the best-scored answers were right that often."""
    if not pairs:
        return None
    xs = [math.log(score + EPS) for score, _ in pairs]
    ys = [1.0 if ok else 0.0 for _, ok in pairs]
    share = (sum(ys) + 1) / (len(ys) + 2)
    a, b = 0.0, math.log(share / (1 - share))
    for _ in range(100):
        ga = gb = haa = hab = hbb = 0.0
        for x, y in zip(xs, ys, strict=True):
            p = _sigmoid(a * x + b)
            w = p * (1 - p)
            ga, gb = ga + (y - p) * x, gb + (y - p)
            haa, hab, hbb = haa + w * x * x, hab + w * x, hbb + w
        det = haa * hbb - hab * hab
        if det <= 1e-12:
            break
        da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        a, b = a + da, b + db
        if abs(da) + abs(db) < 1e-10:
            break
    if not a > 0:  # a higher score not more often right: the share right, whatever the score
        a, b = 0.0, math.log(share / (1 - share))
    scores = sorted(pairs)
    top = scores[-max(1, len(scores) // TOP_PART):]
    cap = (sum(1 for _, ok in top if ok) + 1) / (len(top) + 2)
    return Calibration(a=round(a, 6), b=round(b, 6), low=scores[0][0], high=scores[-1][0], cap=round(cap, 4))


def write_calibration(path, cases: Sequence[Case]) -> Calibration | None:
    dev = [c for c in cases if c.split == "dev"]
    pairs = leave_one_out(dev)
    fit = fit_calibration(pairs)
    lines = ["# Written by `python -m gpurig.diagnose.threads calibrate`: Platt scaling of the leave-one-out",
             f"# answers of the development threads ({len(dev)} threads, {len(pairs)} answers on logs the catalogue",
             "# leaves to the threads): confidence = min(cap, 1 / (1 + exp(-(a * log(score + 0.01) + b)))),",
             "# the score clipped to low..high.", ""]
    if fit is not None:
        lines += ["[logistic]"] + [f"{k} = {getattr(fit, k)}" for k in Calibration._fields] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return fit


def score_for(confidence: float, calibration: Calibration) -> float | None:
    """The least score calibrated to at least `confidence` (None: no score reaches it)."""
    if calibration(calibration.high) < confidence:
        return None
    if calibration.a <= 0:
        return calibration.low
    x = (math.log(confidence / (1 - confidence)) - calibration.b) / calibration.a
    return min(max(math.exp(x) - EPS, calibration.low), calibration.high)


ENTRY_RECORD_FILE = "catalogue.toml"
SURE = 0.85  # an answer at least this confident is presented as the cause ("sure"), not as a lead


@dataclass
class Rates:
    cases: int = 0
    first_right: int = 0
    top3_right: int = 0
    confidently_wrong: int = 0
    nothing: int = 0
    wrong: list[dict] = field(default_factory=list)

    def rate(self, n: int) -> float:
        return n / self.cases if self.cases else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "first_right": round(self.rate(self.first_right), 3),
                "top3_right": round(self.rate(self.top3_right), 3),
                "confidently_wrong": round(self.rate(self.confidently_wrong), 3),
                "nothing": round(self.rate(self.nothing), 3)}


def measure(cases: Sequence[Case], index: ThreadIndex | None, leave_out_self: bool = False) -> Rates:
    """How often `explain` names each case's cause class: first, within three, and confidently wrong."""
    from gpurig.diagnose.explain import explain_text

    rates = Rates()
    for case in cases:
        result = explain_text(case.log, index=index, exclude=case.id if leave_out_self else None)
        found = result.matches or result.benign  # a harmless notice is the answer when it is all the log says
        classes = [canonical(m.cls or m.id) for m in found]
        rates.cases += 1
        if not found:
            rates.nothing += 1
        if classes[:1] == [case.cls]:
            rates.first_right += 1
        else:
            rates.wrong.append({"id": case.id, "class": case.cls, "got": classes[:3],
                                "confidence": found[0].confidence if found else None})
            if found and found[0].confidence >= SURE:
                rates.confidently_wrong += 1
        if case.cls in classes[:3]:
            rates.top3_right += 1
    return rates


def measure_splits(cases: Sequence[Case] | None = None, test: bool = True) -> dict[str, Rates]:
    """The development part answered leave-one-out, the test part by an index of the development part."""
    cases = list(load_cases() if cases is None else cases)
    dev = [c for c in cases if c.split == "dev"]
    index = ThreadIndex(dev)
    out = {"dev": measure(dev, index, leave_out_self=True)}
    if test:
        out["test"] = measure([c for c in cases if c.split == "test"], index)
    return out


if __name__ == "__main__":  # `python -m gpurig.diagnose.threads ...`: the maintainer's commands
    from gpurig.diagnose.threads_cli import main

    raise SystemExit(main())
