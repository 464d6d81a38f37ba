"""Read a training script without running it (Python's `ast`) and report the classic multi-GPU
mistakes, each with its line and its fix.

    for finding in lint_source(open("train.py").read(), "train.py"):
        print(finding.line, finding.id, finding.fix)

Rules are deliberately conservative: a rule fires only on code it can see, and stays quiet when the
script shows it does the right thing somewhere (a rank check, a `set_epoch` call).
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from gpurig.diagnose.lint_project import (
    _downloading_functions,
    _is_download_call,
    _local_modules,
    _mentions_rank_value,
    _reachable_call,
    _silences_output,
)
from gpurig.diagnose.lint_scan import (
    _DOWNLOADERS,
    _RANK_CACHE,
    _SAVE_HELPER,
    OUTPUT_LOG_METHODS,
    _calls_function,
    _deep,
    _dotted,
    _is_const,
    _kw,
    _mentions_rank,
    _name_of,
    _no_gc,
    _Scanner,
    _stream_scan,
)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# A tcp:// address the script puts together itself: 'tcp://' + ip + ':' + port, f"tcp://{ip}:{port}".
_BUILDS_TCP = re.compile(r"""['"]tcp://(?:['"{]|$)""", re.M)


def lint_source(source: str, filename: str = "<script>", path=None, select=None, ignore=None,
                tree: ast.AST | None = None) -> list[LintFinding]:
    """The findings for one script, in line order. A syntax error is reported as bad input.

    `path` (the script's file) lets the linter read the project's own modules the script imports;
    `select` / `ignore` choose rules by id (default: every rule that is not cosmetic). A line ending
    in `# gpurig: ignore[rule-id]` (or a bare `# gpurig: ignore`) keeps its findings quiet; a
    `# gpurig: ignore-file[rule-id]` comment anywhere does so for the whole file.
    """
    tree = ast.parse(source, filename=filename) if tree is None else tree
    try:
        findings = _lint_tree(tree, source, path)
    finally:
        _RANK_CACHE.clear()  # it holds the tree's nodes
    return _chosen(findings, source, select, ignore)


def _chosen(findings: list[LintFinding], source: str, select, ignore) -> list[LintFinding]:
    chosen = set(select) if select else set(DEFAULT_RULES)
    chosen -= set(ignore or ())
    return _suppressed([f for f in findings if f.id in chosen], source)


def _lint_streamed(source: str, script: str, select, ignore) -> list[LintFinding]:
    """`lint_source` for a big script: scanned one group of top-level statements at a time."""
    _RANK_CACHE.clear()
    try:
        scan = _stream_scan(source, script, script)
        _RANK_CACHE.clear()  # the nodes it holds belong to groups already walked
        findings = _lint_scanned(scan, source, script)
    finally:
        _RANK_CACHE.clear()
    return _chosen(findings, source, select, ignore)


_IGNORE = re.compile(r"#\s*gpurig:\s*ignore(-file)?(?:\[([\w\-, ]+)\])?")


def _suppressed(findings: list[LintFinding], source: str) -> list[LintFinding]:
    if "gpurig:" not in source:
        return findings
    lines = source.splitlines()
    whole_file: set[str] = set()
    for m in _IGNORE.finditer(source):
        if m.group(1):
            whole_file |= {r.strip() for r in (m.group(2) or "*").split(",")}
    kept = []
    for f in findings:
        if "*" in whole_file or f.id in whole_file:
            continue
        m = _IGNORE.search(lines[f.line - 1]) if 0 < f.line <= len(lines) else None
        if m and not m.group(1) and (m.group(2) is None or f.id in {r.strip() for r in m.group(2).split(",")}):
            continue
        kept.append(f)
    return kept


def _lint_tree(tree: ast.AST, source: str, path) -> list[LintFinding]:
    _RANK_CACHE.clear()
    scan = _Scanner()
    scan.visit(tree)
    return _lint_scanned(scan, source, path)


def _lint_scanned(scan: _Scanner, source: str, path) -> list[LintFinding]:
    """The rules, over what one scan of the whole script collected (never the tree itself: a big
    script is scanned one top-level statement at a time and its tree never held whole)."""
    findings: list[LintFinding] = []
    modules = _local_modules(None, path, scan.imports)
    starts: list = []  # where each line begins, made at the first finding (a big file's lines are not split)

    def line_text(n: int) -> str:
        if not starts:
            from array import array

            starts.append(array("q", [0]))
            starts[0].extend(m.end() for m in re.finditer("\n", source))
        offsets = starts[0]
        if not 0 < n <= len(offsets):
            return ""
        end = source.find("\n", offsets[n - 1])
        return source[offsets[n - 1]:end if end >= 0 else len(source)].rstrip("\r")

    def add(rule: str, node: ast.AST, title: str, fix: str) -> None:
        line = getattr(node, "lineno", 1)
        code = line_text(line).strip()
        findings.append(LintFinding(id=rule, severity=RULES[rule].severity, line=line, title=title, fix=fix, code=code,
                                    why=RULES[rule].why))

    one_rank = scan.one_rank_functions()
    calls = [
        (c, _dotted(c.func), g or any(f in one_rank for f in scan.enclosing.get(id(c), ())))
        for c, g in scan.calls
    ]
    names = set(scan.short_names)
    module_calls = {_name_of(_dotted(n.func)) for m in modules for n in ast.walk(m) if isinstance(n, ast.Call)}
    downloading_helpers = _downloading_functions(modules)
    reported_helpers: set[str] = set()
    text = source
    uses_cuda = scan.cuda_call or "'nccl'" in text or '"nccl"' in text or "device_ids" in text
    distributed = bool(
        names & {"init_process_group", "DistributedDataParallel", "DDP", "DistributedSampler", "spawn", "get_rank",
                 "get_world_size", "Accelerator", "init_distributed_mode", "init_distributed", "setup_distributed",
                 "init_distributed_device"}
    ) or "LOCAL_RANK" in text or bool(re.search(r"^\s*(?:from|import)\s+(?:accelerate|lightning|pytorch_lightning|deepspeed)\b", text, re.M)) \
        or bool(scan.aliases & names)
    silenced = scan.silenced or any(_silences_output(m) for m in modules)
    set_epoch_anywhere = scan.set_epoch_call or "set_epoch" in module_calls
    destroys_in_modules = _reachable_call(modules, "destroy_process_group", names)
    any_set_device = scan.set_device_call or "set_device" in module_calls  # a setup helper of the project may set it

    def set_device_before(call: ast.Call) -> bool:
        """Whether torch.cuda.set_device ran on every path that reaches `call`: in a statement
        before it in its own block or an enclosing one, not in a sibling branch. Inside a function
        the callers' path is unknown: a set_device anywhere in the file counts."""
        if scan.device_before.get(id(call), False):
            return True
        inside = scan.enclosing.get(id(call))
        if not inside:
            return False
        # In a function that sets the device itself on some path, only its own paths count (the
        # `args.gpu is None` branch of ImageNet-style scripts); otherwise the callers may have.
        return any_set_device and inside[-1] not in scan.sets_device_in

    rank_names = set(scan.rank_names)
    # Under torchrun the name `rank` is the global rank (the script reads RANK/LOCAL_RANK from the
    # environment); under mp.spawn it is the process index on this node, a fine GPU index.
    torchrun_style = ("LOCAL_RANK" in text or "'RANK'" in text or '"RANK"' in text) and "spawn" not in names
    if torchrun_style:
        rank_names |= {"rank", "global_rank"}

    def is_global_rank(node: ast.AST) -> bool:
        return any(_dotted(n) in rank_names for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute)))

    for call, func, guarded in calls:
        short = _name_of(func)
        if short == "DataParallel" or func.endswith("parallel.data_parallel"):
            add(
                "data-parallel", call,
                "nn.DataParallel: one process drives every GPU, and the GIL and GPU 0 hold it back",
                "Use DistributedDataParallel with one process per GPU: wrap with DDP(model, device_ids=[local_rank]) "
                "and start with `gpurig launch script.py` (torchrun).",
            )
        if short in ("DistributedDataParallel", "DDP"):
            fup = _kw(call, "find_unused_parameters")
            if fup is not None and _is_const(fup.value, True):
                add(
                    "find-unused-parameters", call,
                    "find_unused_parameters=True walks the autograd graph every step (slower)",
                    "Leave it off unless DDP raises 'Expected to have finished reduction'; if some parameters really are "
                    "unused, freeze them or make every output feed the loss (static_graph=True helps when the unused set is fixed).",
                )
            if uses_cuda and _kw(call, "device_ids") is None and not set_device_before(call):
                add(
                    "ddp-without-device", call,
                    "DDP built with no device_ids and no torch.cuda.set_device(local_rank) before it on this path: every rank may use GPU 0",
                    "Call torch.cuda.set_device(local_rank) first thing (local_rank = int(os.environ['LOCAL_RANK'])) and build "
                    "DDP(model, device_ids=[local_rank]).",
                )
            ids = _kw(call, "device_ids")
            if ids is not None and is_global_rank(ids.value):
                add("global-rank-as-device", call, "device_ids uses the global rank: on a second node there is no such GPU",
                    "Use the local rank: local_rank = int(os.environ['LOCAL_RANK']); DDP(model, device_ids=[local_rank]).")
        if short in ("set_device", "set_device_index") and call.args and _dotted(call.args[0]) in rank_names:
            add("global-rank-as-device", call, "torch.cuda.set_device(global rank): on a second node there is no such GPU",
                "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (the rank within this node).")
        elif short in ("to", "cuda") and isinstance(call.func, ast.Attribute) and len(call.args) == 1 \
                and isinstance(call.args[0], (ast.Name, ast.Attribute)) and _dotted(call.args[0]) in rank_names:
            add("global-rank-as-device", call, f".{short}({_dotted(call.args[0])}): the global rank used as the GPU index",
                "Move to the local GPU: device = torch.device('cuda', int(os.environ['LOCAL_RANK'])); x.to(device).")
        if func == "torch.load":
            own_file = bool(call.args) and _mentions_rank_value(call.args[0])  # each rank reads what it saved
            if _kw(call, "map_location") is None and len(call.args) < 2 and distributed and not guarded and not own_file:
                add(
                    "torch-load-without-map-location", call,
                    "torch.load without map_location: tensors saved on cuda:0 load onto GPU 0 in every rank",
                    "torch.load(path, map_location='cpu') (then .to(device)), or map_location=f'cuda:{local_rank}'.",
                )
        if short == "init_process_group":
            init = _kw(call, "init_method")
            if init is not None and isinstance(init.value, ast.Constant) and isinstance(init.value.value, str) \
                    and init.value.value.startswith("tcp://"):
                add(
                    "hard-coded-rendezvous", call,
                    f"init_method={init.value.value!r} is hard-coded: a second job on this machine fails with 'Address already in use'",
                    "Drop init_method (the default env:// reads MASTER_ADDR/MASTER_PORT set by torchrun) and start with "
                    "`gpurig launch`, which picks a free port.",
                )
            if "destroy_process_group" not in names and not destroys_in_modules:
                add("no-destroy-process-group", call, "init_process_group with no destroy_process_group: the group is torn down at interpreter exit",
                    "End the script (every rank) with dist.barrier() then dist.destroy_process_group(), e.g. in a `finally:`.")
        # A rendezvous option with a fixed default: --dist-url/--master-port/--init-method, or a plain
        # --port in a script that builds its own tcp:// address from it.
        if short == "add_argument" and any(isinstance(a, ast.Constant) and isinstance(a.value, str) and (
                re.search(r"dist[-_]url|master[-_]port|init[-_]method", a.value)
                or (re.fullmatch(r"--?(?:\w+[-_])?port", a.value) and _BUILDS_TCP.search(text))) for a in call.args):
            default = _kw(call, "default")
            if default is not None and isinstance(default.value, ast.Constant) and isinstance(default.value.value, str) \
                    and re.match(r"tcp://[^:]+:\d+$|\d{4,5}$", default.value.value):
                add("hard-coded-rendezvous", default.value,
                    f"the rendezvous default {default.value.value!r} is fixed: two jobs on one machine collide ('Address already in use')",
                    "Default to env:// and let the launcher choose the port (`gpurig launch` / torchrun --master-port 0).")
        if distributed and not guarded and id(call) not in scan.first:
            download = _kw(call, "download")
            pretrained = _kw(call, "pretrained")
            fetches = short in _DOWNLOADERS or func in ("evaluate.load", "torch.hub.load", "torch.hub.list")
            on = lambda kw: kw is not None and not _is_const(kw.value, False) and not _is_const(kw.value, None)  # noqa: E731
            if on(download) or on(pretrained) or fetches:
                what = ("download=True" if on(download) else "pretrained weights" if on(pretrained) else f"{short}()")
                add(
                    "download-on-every-rank", call,
                    f"{what} runs in every rank at once: they race to write the same files",
                    "Download once before training: `if local_rank == 0: <download>` then dist.barrier(), and construct "
                    "with download=False in every rank (or download ahead of the run).",
                )
            is_log = (
                short in OUTPUT_LOG_METHODS
                and "." in func
                and any(w in func.split(".")[0].lower() for w in ("log", "logger", "logging"))
            )
            # A message that names its rank, or goes to stderr, is meant to come from every rank.
            per_rank_message = (short == "print" or is_log) and (
                any(_mentions_rank(a) for a in call.args)
                or (_kw(call, "file") is not None and _dotted(_kw(call, "file").value) == "sys.stderr")
            )
            if (short == "print" and func == "print" or is_log) and not per_rank_message and not silenced:
                add(
                    "print-on-every-rank", call,
                    f"{'print' if short == 'print' else 'logging'} runs on every rank: duplicated output",
                    "Guard it with `if rank == 0:` (rank = dist.get_rank()), or use one helper that decides which rank speaks.",
                )
            if func == "torch.save" or short == "SummaryWriter":
                target = call.args[1] if func == "torch.save" and len(call.args) > 1 else (
                    _kw(call, "f").value if func == "torch.save" and _kw(call, "f") else (call.args[0] if call.args else None))
                if target is None or not _mentions_rank_value(target):
                    kind = "torch.save" if func == "torch.save" else "SummaryWriter"
                    fix = ("Save from one rank: `if rank == 0: torch.save(...)` then dist.barrier() before anyone reads it "
                           "(or put the rank in the file name when each rank saves its own shard).")
                    # In a save helper of this file (save_checkpoint), the mistake is where it is
                    # called on every rank: say so there. In any other function (a whole train()),
                    # the save itself is what to guard: say so at the save.
                    inside = scan.enclosing.get(id(call), ())
                    helper = inside[-1] if inside and _SAVE_HELPER.search(inside[-1]) else None
                    sites = [c for c, f2, g2 in calls if helper and _calls_function(f2, helper) and not g2]
                    for site in sites or [call]:
                        where = f"{_name_of(_dotted(site.func))}() saves with {kind} (line {call.lineno})" if site is not call else kind
                        add("save-on-every-rank", site, f"{where} runs on every rank: they write the same file at once", fix)
            if short in downloading_helpers and short not in scan.defined and short not in reported_helpers \
                    and not _is_download_call(call):
                reported_helpers.add(short)  # once per helper, at its first call
                add("download-on-every-rank", call,
                    f"{short}() downloads ({downloading_helpers[short]}) in every rank at once: they race to write the same files",
                    "Let one rank download first: `if rank == 0: <download>` then dist.barrier() (or accelerator.main_process_first()), "
                    "or download ahead of the run.")
            # A file named in the script (a literal name, alone or joined to a directory) and not per
            # rank; a path held in a variable or a parameter is not judged (its rank may be in it).
            if func == "open" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) \
                    and str(call.args[1].value)[:1] in ("a", "w") and not _mentions_rank_value(call.args[0]) \
                    and any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(call.args[0])):
                what = repr(call.args[0].value) if isinstance(call.args[0], ast.Constant) else ast.unparse(call.args[0])[:60]
                add("save-on-every-rank", call, f"every rank writes {what} at once: lines interleave or the file is cut",
                    "Write from one rank (`if rank == 0:`), or put the rank in the file name.")
            if short == "tqdm" and _kw(call, "disable") is None:
                add("tqdm-on-every-rank", call, "a tqdm bar on every rank: N bars in one terminal",
                    "tqdm(..., disable=rank != 0)")
        if short == "DataLoader" and uses_cuda and not any(k.arg is None for k in call.keywords):
            workers = _kw(call, "num_workers")
            pin = _kw(call, "pin_memory")
            missing = []
            if workers is None or _is_const(workers.value, 0) or (isinstance(workers.value, ast.Constant) and workers.value.value == 0):
                missing.append("num_workers")
            if pin is None or _is_const(pin.value, False):
                missing.append("pin_memory=True")
            if missing:
                add(
                    "dataloader-starves-gpu", call,
                    f"DataLoader feeding a GPU without {' and '.join(missing)}: the GPU waits for data",
                    "DataLoader(..., num_workers=4 or more, pin_memory=True, persistent_workers=True) and "
                    ".to(device, non_blocking=True) on the batch.",
                )

    constants = scan.constants
    for assign, _guarded in scan.assigns:
        for target in assign.targets:
            name = _dotted(target).lower()
            if re.search(r"dist_url|init_method|master_port", name):
                literal = assign.value.value if isinstance(assign.value, ast.Constant) else (
                    "".join(v.value for v in assign.value.values if isinstance(v, ast.Constant))
                    if isinstance(assign.value, ast.JoinedStr) else None)
                if isinstance(literal, str) and re.search(r"tcp://[^\s]*:\d{3,5}$", literal):
                    add("hard-coded-rendezvous", assign,
                        f"{_dotted(target)} gets a fixed port ({literal.rsplit(':', 1)[-1]}): two jobs on one machine collide",
                        "Take the port from the environment (MASTER_PORT set by the launcher) or pick a free one.")
            if isinstance(target, ast.Subscript) and _dotted(target.value) == "os.environ":
                key = target.slice
                value = assign.value.value if isinstance(assign.value, ast.Constant) else (
                    constants.get(assign.value.id) if isinstance(assign.value, ast.Name) else None)
                # The port is what collides; a fixed address comes with it and is one mistake, not two.
                if isinstance(key, ast.Constant) and key.value == "MASTER_PORT" and value is not None:
                    add(
                        "hard-coded-rendezvous", assign,
                        f"{key.value} is hard-coded to {value!r}: a second job fails with 'Address already in use'",
                        "Let the launcher set MASTER_ADDR/MASTER_PORT (`gpurig launch` picks a free port); remove the assignment.",
                    )

    # DistributedSampler whose epoch is never set: the same shuffle every epoch. A sampler that
    # does not shuffle needs none; a set_epoch under any name (loader.sampler.set_epoch, a helper
    # that receives the sampler) counts.
    # A script that iterates its loader once (no epoch loop: no loop in a loop, no 'epoch' anywhere)
    # has no next epoch to reshuffle for.
    epochs = scan.nested_loop or "epoch" in text.lower()
    if not set_epoch_anywhere and epochs:
        for call, func, _ in calls:
            if _name_of(func) == "DistributedSampler":
                shuffle = _kw(call, "shuffle")
                if shuffle is not None and not _is_const(shuffle.value, True):
                    continue
                add(
                    "sampler-without-set-epoch", call,
                    "DistributedSampler without set_epoch(epoch) in the loop: every epoch sees the same order",
                    "Call sampler.set_epoch(epoch) at the start of each epoch, before iterating the DataLoader.",
                )

    # The process group started in the project's own module (utils.init_distributed_mode): the
    # script still has to end it.
    if "init_process_group" not in names and "init_process_group" in module_calls and \
            "destroy_process_group" not in names and not destroys_in_modules:
        add("no-destroy-process-group", scan.first_stmt if scan.first_stmt is not None else ast.Pass(),
            "the process group starts in this project's own module and nothing ever calls destroy_process_group",
            "End the script (every rank) with dist.barrier() then dist.destroy_process_group(), e.g. in a `finally:`.")

    findings.sort(key=lambda f: (f.line, f.id))
    unique: dict[tuple[str, int], LintFinding] = {}
    for f in findings:  # one finding per rule and line, however many ways it was reached
        unique.setdefault((f.id, f.line), f)
    return list(unique.values())


# --- a script on disk, read as Python reads it -------------------------------------------------


def read_script(script: str) -> str:
    """The text of a script the user named, checked the way Python reads it: a missing, unreadable,
    undecodable or syntactically invalid file is bad input (exit 2), naming the file and the line."""
    return read_script_tree(script)[0]


def read_script_tree(script: str):
    """(text, syntax tree) of a script, read as `read_script` does."""
    import io
    import tokenize

    from gpurig.errors import BadInput

    label, data = _script_bytes(script)
    try:
        # From bytes, as the interpreter does: the encoding is UTF-8 unless the file declares another.
        tree = _deep(lambda: compile(data, script, "exec", flags=0x400, dont_inherit=True))  # 0x400: ast.PyCF_ONLY_AST
    except RecursionError:
        raise BadInput(f"{label}: nested too deeply for Python to compile (an expression or an elif chain thousands deep)") from None
    except SyntaxError as exc:
        raise BadInput(f"{label}: {_syntax_error_text(exc)}") from None
    except ValueError as exc:  # null bytes, on some Python versions
        raise BadInput(f"{label}: not valid Python ({exc})") from None
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), tree


def _script_bytes(script: str) -> tuple[str, bytes]:
    """("SCRIPT <name>", the file's bytes); a missing or unreadable file is bad input (exit 2)."""
    from pathlib import Path

    from gpurig.errors import BadInput, check_user_file

    label = f"SCRIPT {script}"
    check_user_file(script, label, "script")
    try:
        return label, Path(script).read_bytes()
    except OSError as exc:
        raise BadInput(f"{label}: cannot read it ({exc.strerror or exc})") from None


def _size(script: str) -> int:
    try:
        return os.path.getsize(script)
    except OSError:
        return 0  # read_script_tree names the problem


def _read_text(script: str) -> str:
    """The text of a (big) script, decoded as Python decodes it, without compiling it whole."""
    import io
    import tokenize

    from gpurig.errors import BadInput

    label, data = _script_bytes(script)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError) as exc:  # an unknown coding line
        raise BadInput(f"{label}: {_syntax_error_text(exc) if isinstance(exc, SyntaxError) else exc}") from None
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        name = "UTF-8" if encoding.replace("_", "-").lower() in ("utf-8", "utf8", "utf-8-sig") else encoding
        raise BadInput(f"{label}: not {name} text (line {line}: byte 0x{data[exc.start]:02x}); save it as UTF-8 "
                       "or declare its encoding in a coding line") from None
    return text[1:] if text.startswith("\ufeff") else text


def _syntax_error_text(exc: SyntaxError) -> str:
    """Python's own words for a script it cannot compile, with the line (and its code) they are about."""
    where = f"line {exc.lineno}: " if exc.lineno else ""
    msg = exc.msg or "invalid syntax"
    found = re.search(r"'([\w-]+)' codec can't decode byte (0x[0-9a-f]{2})", msg)
    if found:  # bytes the file's encoding (UTF-8 unless a coding line says otherwise) cannot decode
        codec, byte = found.groups()
        name = "UTF-8" if codec.replace("_", "-").lower() in ("utf-8", "utf8") else codec
        return f"not {name} text ({where}byte {byte}); save it as UTF-8 or declare its encoding in a coding line"
    text = (exc.text or "").strip()
    code = f": {text if len(text) <= 120 else text[:120] + ' …'}" if text else ""
    return f"not valid Python ({where}{msg}){code}"


def lint_file(script: str, select=None, ignore=None) -> list:
    """Findings for a script on disk; a missing, unreadable or invalid file is bad input (exit 2)."""
    from gpurig.errors import BadInput

    with _no_gc():
        if _size(script) > STREAM_BYTES:
            source = _read_text(script)
            try:
                return _deep(lambda: _lint_streamed(source, script, select, ignore))
            except SyntaxError as exc:
                raise BadInput(f"SCRIPT {script}: {_syntax_error_text(exc)}") from None
            except ValueError as exc:  # null bytes
                raise BadInput(f"SCRIPT {script}: not valid Python ({exc})") from None
            except RecursionError:
                raise BadInput(f"SCRIPT {script}: nested too deeply to analyse (an expression or an elif chain "
                               "thousands deep)") from None
        source, tree = read_script_tree(script)
        try:
            return _deep(lambda: lint_source(source, script, path=script, select=select, ignore=ignore, tree=tree))
        except SyntaxError as exc:
            raise BadInput(f"SCRIPT {script}: {_syntax_error_text(exc)}") from None
        except RecursionError:
            raise BadInput(f"SCRIPT {script}: nested too deeply to analyse (an expression or an elif chain thousands deep)") from None


# A script bigger than this is read one group of top-level statements at a time: its whole syntax
# tree (about 170 bytes of memory per byte of source) is never held at once.
STREAM_BYTES = 512 * 1024
