"""A log reduced to what tells one failure from another: the lines that say something went wrong,
normalised (numbers, paths, addresses and ranks masked), and their words, for the index of
resolved threads (`threads.py`) and for `explain` (does a log report a failure at all?).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

# Lines that say something went wrong (the rest of a log is start-up chatter, progress, frames).
_DISTINCTIVE = re.compile(  # applied to the lowercased text: a case-insensitive alternation is ten times slower
    r"error|exception|fail|fatal|abort|\bkill|timeout|timed out|cannot|can't|can not|could not|couldn't|unable|"
    r"not found|no such|invalid|mismatch|denied|refused|reset by peer|signal|assert|\bwarn|out of memory|oom\b|"
    r"exceed|unsupported|not supported|undefined symbol|segmentation|core dumped|illegal|unknown|exit code|exitcode|"
    r"return code|unhandled|terminate|\bhang|stuck|deadlock|incompatible|too old|expected|unexpected|missing|nan\b|"
    r"no module|not available|not compiled|no cuda|no gpu|insufficient|xid|bus\b|busy|already|not initiali|"
    r"does not|doesn't|is not|are not|not enough|only one|stopped|closed|broken pipe|errno|status_|nvml|"
    r"dlerror|dlopen|not load|cuda_error|nccl|net/"
)
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+|^\s*\^+\s*$|^\s*~+\^*~*\s*$|^\s*at [\w.$]+\(')
# A launcher's report that a worker ended (torchrun's ChildFailedError table, DeepSpeed's "exits
# with return code", mpirun's and Horovod's notices that a rank died, torch.multiprocessing.spawn's
# ProcessExitedException): the same in every failed run, whatever the cause. Only its exit code or
# signal says something (-9: killed, -11: segfault, ...), so that alone is kept, as one token.
_LAUNCHER = re.compile(
    r"ChildFailedError|elastic/multiprocessing/api\.py|Sending process \d+ closing signal|"
    r"^\s*(?:\[\d+\]:?\s*)?(?:error_file|traceback|time|host|rank|exitcode|local_rank)\s*:|Root Cause \(first observed failure\)|"
    r"^\s*Failures:|To enable traceback see|torch\.distributed\.elastic|returned non-zero exit status|"
    r"Killing subprocess|exits? with return code|sigkill_handler|failed \(exitcode|No error file defined for parent|"
    r"^\s*\S+\.py FAILED\s*$|mpirun noticed that process|Primary job\s+terminated normally|"
    r"mpirun detected that one or more processes exited|Horovod has been shut down|ProcessExitedException|"
    r"process \d+ terminated with (?:exit code|signal)",
    re.I | re.M,
)
# Lines torch and the launchers print around any failure: they say nothing about which one.
_BOILERPLATE = re.compile(
    r"kernel errors might be asynchronously reported|for debugging consider passing cuda_launch_blocking|"
    r"compile with `?torch_use_cuda_dsa|device-side assertions|setting omp_num_threads environment variable|"
    r"^\s*warnings\.warn\(|^\s*\*{5,}\s*$",
    re.M,
)
_EXIT_CODE = re.compile(r"(?:exit ?code|return code|exit status)\s*[:=]?\s*(-?\d+)|(?:exited on|with) signal (\d+|SIG[A-Z]+)", re.I)
_SIGNALS = {"SIGHUP": "1", "SIGINT": "2", "SIGABRT": "6", "SIGBUS": "7", "SIGKILL": "9", "SIGSEGV": "11", "SIGTERM": "15"}
_INFO = re.compile(r"\bNCCL INFO\b|\bI\d{4} \d\d:\d\d|^\s*\d+%\|")
_MASKS = [
    (re.compile(r"https?://\S+"), " url "),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+~-]+){2,}[\\/]?"), lambda m: " " + m.group(0).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] + " "),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), " hex "),
    (re.compile(r"\b[0-9a-f]{12,}\b"), " hex "),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), " ip "),
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?\S*"), " "),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), " "),
    (re.compile(r"\d+(?:\.\d+)?"), " 0 "),
]
TOKEN = re.compile(r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*|0")

# What a paste or a terminal adds to a log that no message contains: colour codes (a terminal's log
# captured with `tee`, rich and loguru output), the typographic quotes and non-breaking spaces of text
# copied from a web page, a chat or a document, zero-width characters, and Windows line ends.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_PLAIN = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u00a0": " ", "\u2007": " ", "\u2009": " ", "\u200a": " ", "\u202f": " ", "\u3000": " ",
    "\u200b": "", "\u200c": "", "\u200d": "", "\u2060": "", "\ufeff": "",
}
_NOT_PLAIN = re.compile("[" + "".join(_PLAIN) + "]")  # one pass finds them (str.translate is 20x slower)


# What a launcher, a logger or a quoted reply puts before every line, repeated and in any order:
# "> " (a reply quoting the log), "[rank3]: " / "[default0]:" (torchrun), "[1,3]<stderr>:" (mpirun),
# "3: " (srun -l), "rank3: ", NCCL's "host:pid:tid ", a logger's date, time and level, glog's
# "E0101 12:00:00.123 77 file.cc:12] ". Never across a line end: it serves whole texts and single lines.
_LINE_PREFIX = re.compile(
    r"^(?:[ \t]*(?:>[ \t]?|\[(?:rank|default|stderr|stdout)?[ \t]*\d+\]:?[ \t]*|\d+:[ \t]+|rank\d+:[ \t]*|"
    r"\[\d+,[ \t]*\d+\]<\w+>:[ \t]*|\[?[\w.-]+:\d+:\d+\]?[ \t]+|[EWIF]\d{4} [\d:.]+ +\d+ \S+\][ \t]*|"
    r"\d{4}-\d\d-\d\d[T ][\d:.,]+(?:[ \t]+-[ \t]+[\w.]+)?[ \t]+-?[ \t]*"
    r"(?:\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?[ \t]+-?[ \t]*)?))+",
    re.M,
)


def bare(text: str) -> str | None:
    """`text` without the prefixes a launcher, a logger or a quoted reply put before its lines (None
    when no line has one). Line for line: the numbers stay the same."""
    out, n = _LINE_PREFIX.subn("", text)
    return out if n else None


# A line a JSON logger or Docker's json-file driver wrote: the program's line is the "log", "msg" or
# "message" string, with its quotes, newlines and colour codes escaped.
_JSON_LINE = re.compile(r'^[ \t]*\{[^\n]*"(?:log|msg|message)"[ \t]*:[ \t]*"[^\n]*\}[ \t]*$', re.M)


def _json_message(m: re.Match) -> str:
    """The message of one JSON log line, on one line (its own newlines as spaces: the lines of the
    log stay where they were), or the line unchanged when it is not such a record."""
    try:
        record = json.loads(m.group(0))
    except ValueError:
        return m.group(0)
    if isinstance(record, dict):
        for key in ("log", "msg", "message"):
            if isinstance(value := record.get(key), str):
                return " ".join(value.splitlines())
    return m.group(0)


def clean(text: str) -> str:
    """`text` as the program printed it: without colour codes, with plain quotes and spaces, with
    "\\n" line ends, and a JSON log line's message in place of the record. The lines stay where
    they were (a line's number is the same in both)."""
    if text.isascii() and "\x1b" not in text and "\r" not in text and '{"' not in text:
        return text
    if '{"' in text and _JSON_LINE.search(text):
        text = _JSON_LINE.sub(_json_message, text)
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if not text.isascii() and _NOT_PLAIN.search(text):
        text = _NOT_PLAIN.sub(lambda m: _PLAIN[m.group(0)], text)
    return text


_STOP = frozenset(
    "the a an of to in on at is was be for and or it this that with as by from are not but if you your please "
    "consider using use see more set line file most recent call last 0 i we my me have has had can will would should "
    "when while then than which there their they them its into also any all some other been do does did so such".split()
)


# A line that reports a failure, not a warning or a notice: an exception, an error, a crash.
_ERROR_LINE = re.compile(
    r"Error\b|Exception\b|ERROR|\berror\b|\bfatal\b|FATAL|\bfailed\b|FAILED|Traceback|"
    r"\b[Kk]illed\b|Aborted|Segmentation fault|core dumped|exit ?code|return code|\bassert|"
    r"\bcannot\b|\bcan't\b|\bunable to\b|[Cc]ould not|undefined symbol|not found|No such file|"
    r"\bhang|\bhung\b|\bstuck\b|timed out|^E\d{4} |^\s*(?:\[\w+\]:\s*)?\[E ",
    re.M,
)


def has_failure(text: str) -> bool:
    """Whether the log reports a failure at all (not only warnings, notices and progress)."""
    return _ERROR_LINE.search(text) is not None


def normalise_line(line: str) -> str:
    line = _LINE_PREFIX.sub("", line)
    for pattern, repl in _MASKS:
        line = pattern.sub(repl, line)
    return " ".join(line.lower().split())


FALLBACK_LINES = 20  # a failed run's log with no line read as an error: its last lines stand for it


def distinctive(text: str, limit: int = 80, fallback: bool | None = None) -> list[tuple[str, str]]:
    """(normalised, as written) for the lines that say something went wrong, each once; the first
    and the last kept when there are more than `limit` (the first error and the final one both matter).

    A log none of whose lines says so in words this module knows ("No kernel image is available
    for execution on the device", a bare "CUDA_ERROR_NO_BINARY_FOR_GPU", a traceback cut before its
    exception) is read by its last FALLBACK_LINES lines that are neither frames nor progress, when
    it is known to be a failure: `fallback` True (a resolved thread's log), or None and the log
    reports a failure (`has_failure`). A log of progress alone stays without lines."""
    lines = _distinctive(text, limit)
    if lines or fallback is False or (fallback is None and not has_failure(text)):
        return lines
    return _last_lines(text)


def _last_lines(text: str) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for raw in text[-200_000:].splitlines()[-10 * FALLBACK_LINES:]:
        if not raw.strip() or len(raw) > 2000 or _FRAME.search(raw) or _INFO.search(raw):
            continue
        norm = normalise_line(raw)
        if TOKEN.search(norm):
            seen.setdefault(norm, raw.strip())
    return list(seen.items())[-FALLBACK_LINES:]


def _distinctive(text: str, limit: int) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    low = text.lower()
    if len(low) != len(text):  # a rare character whose lowercase is longer: read positions off the lowercase
        text = low
    pos = 0
    for m in _DISTINCTIVE.finditer(low):
        if m.start() < pos:
            continue
        start = low.rfind("\n", 0, m.start()) + 1
        end = low.find("\n", m.end())
        end = len(low) if end < 0 else end
        pos = end
        raw = text[start:end]
        if len(raw) > 2000 or _FRAME.search(raw) or _INFO.search(raw) or _BOILERPLATE.search(low, start, end):
            continue
        if _LAUNCHER.search(raw):
            code = _EXIT_CODE.search(raw)
            if code:
                # a signal N is what torchrun reports as exit code -N
                value = code.group(1) or "-" + _SIGNALS.get(code.group(2).upper(), code.group(2))
                seen.setdefault(f"launcher exitcode_{value.replace('-', 'm')}", raw.strip())
            continue
        norm = normalise_line(raw)
        if len(TOKEN.findall(norm)) >= 2:
            seen.setdefault(norm, raw.strip())
    lines = list(seen.items())
    if len(lines) > limit:
        lines = lines[: limit // 4] + lines[-(limit - limit // 4):]
    return lines


def distinctive_lines(text: str, limit: int = 80, fallback: bool | None = None) -> list[str]:
    return [norm for norm, _ in distinctive(text, limit, fallback)]


def line_tokens(lines: Iterable[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        words = [w for w in TOKEN.findall(line) if w not in _STOP and len(w) > 1]
        out.extend(words)
        out.extend(f"{a}~{b}" for a, b in zip(words, words[1:], strict=False))  # word pairs: phrases count
        # a dotted name also by its last part: "torch.distributed.elastic.multiprocessing.api.SignalException"
        # is "raise SignalException(...)" of another log, "hydra.errors.InstantiationException" an InstantiationException
        out.extend(last for w in words if "." in w and len(last := w.rsplit(".", 1)[1]) > 1 and last not in _STOP)
    return out


def tokens_of(text: str, fallback: bool | None = None) -> list[str]:
    return line_tokens(distinctive_lines(text, fallback=fallback))


def tokens_of_title(title: str) -> list[str]:
    return line_tokens([normalise_line(title)])


# Where a Python traceback ends: its last frame, when that frame is in an installed package's own
# code, and the exception it raised there. An error that no entry and no thread names, raised inside
# a library, is most often a bug of one release of that library or a release that does not match
# the framework under it: the package and the message are what to look for in its issues. Not the
# frameworks themselves (an error inside torch is mostly the arguments the caller gave it), nor a
# launcher reporting that its child failed.
_TRACE_FRAME = re.compile(r'^[ \t]*File "([^"\n]+)", line (\d+), in ([^\s\n]+)', re.M)
_STDLIB = re.compile(r"[/\\]lib(?:64)?[/\\]python\d(?:\.\d+)?[/\\](?!site-packages|dist-packages)|[/\\]Lib[/\\](?!site-packages)|^<frozen ")
_PACKAGE_DIR = re.compile(r"[/\\](?:site|dist)-packages[/\\]([A-Za-z_]\w*)")
_RAISED = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b(?::.*)?")
_PIP_NAMES = {"sklearn": "scikit-learn", "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml",
              "skimage": "scikit-image", "attr": "attrs", "google": "", "_pytest": "pytest"}
_FRAMEWORKS = frozenset({"torch", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "paddle", "mxnet", "numpy", "multiprocess",
                         "fire", "hydra", "click", "typer"})  # (and the command-line dispatchers that call the script)


def installed_frame(path: str) -> bool:
    """Whether a traceback frame's file is the standard library's or an installed package's (site- or
    dist-packages: Debian's and NGC containers' Pythons put packages in dist-packages), not the user's."""
    return bool(_STDLIB.search(path) or _PACKAGE_DIR.search(path))


_LAUNCHER_FAILED = re.compile(r"(?:\w+\.)*(?:CalledProcessError|ChildFailedError|ProcessRaisedException|ProcessExitedException|SystemExit)\b")


def raised_in(text: str) -> dict | None:
    """The installed package whose own code raised the log's last traceback: {"package", "pip",
    "file", "line", "function", "message"}; None when the last frame is the user's code, the
    standard library, or there is no traceback."""
    plain = bare(text) or text
    frames = list(_TRACE_FRAME.finditer(plain))
    if not frames:
        return None
    # The innermost frame outside the standard library (enum's __getitem__ raising for torchvision)
    last = next((f for f in reversed(frames) if not _STDLIB.search(f.group(1))), frames[-1])
    end = frames[-1].end()
    package = _PACKAGE_DIR.search(last.group(1))
    if package is None or package.group(1) in _FRAMEWORKS or "/launcher/" in last.group(1).replace("\\", "/"):
        return None
    message = ""
    for line in plain[end:].split("\n")[1:12]:  # the source line and carets, then the exception
        if _TRACE_FRAME.match(line):
            break
        if _RAISED.fullmatch(line.strip()):
            message = line.strip()
            break
    if _LAUNCHER_FAILED.match(message):
        return None
    name = package.group(1)
    return {"package": name, "pip": _PIP_NAMES.get(name, name), "file": last.group(1)[package.start(1):].replace("\\", "/"),
            "line": int(last.group(2)), "function": last.group(3), "message": message[:200]}
