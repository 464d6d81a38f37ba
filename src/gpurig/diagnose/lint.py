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

RANK_WORDS = ("rank", "is_main", "main_process", "master", "is_master", "is_primary", "primary", "local_zero", "global_zero")
RANK_NAMES = {"main", "leader", "is_leader", "zero"}  # whole names that only make sense as "the rank that speaks"
# Names of the process's GPU index: `if gpu == 0` / `if self.gpu_id == 0` picks one process as well.
GPU_NAMES = {"gpu", "gpu_id", "gpu_idx", "device_id", "local_gpu", "cuda_id", "gpu_index", "device_index"}
# Calls that fetch from the network into a shared cache (the Hub, torch.hub, dataset hubs).
_DOWNLOADERS = {"from_pretrained", "load_dataset", "load_state_dict_from_url", "hf_hub_download", "snapshot_download",
                "download_url", "download_and_extract_archive"}
OUTPUT_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


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


def _dotted(node: ast.AST) -> str:
    """`torch.nn.parallel.DistributedDataParallel` for an attribute chain; '' when not a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):  # logging.getLogger(__name__).info -> "getLogger().info"
        inner = _dotted(node.func)
        return ".".join([inner + "()"] + list(reversed(parts))) if inner else ""
    return ""


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _is_const(node: ast.AST | None, value: Any) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _leaf_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _not_distributed(node: ast.AST) -> bool:
    """`not args.distributed`, `not args.multiprocessing_distributed`: true on every rank of a run
    started another way (torchrun without the flag), so it does not pick one rank."""
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and "distributed" in _dotted(node.operand).lower()


_RANK_CACHE: dict[int, tuple[ast.AST, bool]] = {}


def _mentions_rank(test: ast.AST) -> bool:
    """`_rank_check(test)`, remembered per node for the current lint (the same tests are asked about
    several times: by the scanner, by each rule)."""
    hit = _RANK_CACHE.get(id(test))
    if hit is not None and hit[0] is test:
        return hit[1]
    answer = _rank_check(test)
    _RANK_CACHE[id(test)] = (test, answer)
    return answer


def _rank_check(test: ast.AST) -> bool:
    """Whether a condition picks ranks: it names a rank (`rank == 0`, `dist.get_rank() != 0`,
    `args.rank % ngpus_per_node == 0`, `accelerator.is_main_process`, `trainer.is_global_zero`),
    or compares the process's GPU index with 0 (`if self.gpu_id == 0`). `not distributed or rank == 0`
    does not: launched without that flag, every rank passes it."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(_not_distributed(v) for v in test.values):
        return False
    for node in ast.walk(test):
        name = _leaf_name(node)
        if name is None and isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value if node.value in ("RANK", "LOCAL_RANK") else None
        if name and (any(w in name.lower() for w in RANK_WORDS) or name.lower() in RANK_NAMES):
            return True
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            zero = any(isinstance(x, ast.Constant) and x.value in (0, -1) for x in sides) or any(
                isinstance(x, (ast.List, ast.Tuple, ast.Set)) and any(isinstance(e, ast.Constant) and e.value in (0, -1) for e in x.elts)
                for x in sides)
            if zero and any((_leaf_name(x) or "").lower() in GPU_NAMES for x in sides):
                return True
    return False


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue, ast.Raise))


class _Scanner(ast.NodeVisitor):
    """Walks the tree remembering whether the current statement only runs on one rank."""

    def __init__(self) -> None:
        self.calls: list[tuple[ast.Call, bool]] = []  # (call, guarded by a rank check)
        self.assigns: list[tuple[ast.Assign | ast.AnnAssign, bool]] = []
        self.enclosing: dict[int, tuple[str, ...]] = {}  # id(call) -> names of the functions around it
        self._guard = 0
        self._functions: list[str] = []
        self.defined: set[str] = set()
        # One pass collects what the rules need about the whole file (a walk per question is
        # what makes a linter slow on a big file):
        self.silenced = False  # print replaced, or a logging level that depends on the rank
        self.rank_names: set[str] = set()  # names holding the global rank
        self.constants: dict[str, Any] = {}  # NAME = constant
        self.device_before: dict[int, bool] = {}  # id(DDP call) -> set_device ran before it on its path
        self._path: list[bool] = []  # per open block: set_device already ran in it
        self._set_devices = 0
        self._methods: dict[type, Any] = {}
        self.sets_device_in: set[str] = set()  # functions that call set_device themselves
        self._device_conditions: set[str] = set()  # if-tests under which set_device ran
        self.first: set[int] = set()  # ids of calls made by rank 0 first while the others wait
        self.aliases: set[str] = set()  # other names of DistributedDataParallel & co. (`as NativeDDP`)
        self.flags: set[str] = set()  # names holding a rank check's result
        self._first = 0
        self.imports: list[ast.Import | ast.ImportFrom] = []  # every import statement, at any depth
        self.first_stmt: ast.stmt | None = None
        # Facts about every call, kept even where the call itself is not (see `compact`):
        self.short_names: set[str] = set()  # the last name of every function called
        self.cuda_call = False  # some call names cuda (x.cuda(), torch.cuda.*)
        self.set_epoch_call = False
        self._loops = 0  # loops around the statement being visited
        self.nested_loop = False  # a loop inside a loop somewhere (an epoch loop around a batch loop)
        self.set_device_call = False
        # compact: keep only the calls and assignments some rule judges (a big script read in
        # groups of statements: what is not kept is freed with its group). `keep_names` holds the
        # functions the file defines (read from its text first: a call may come before its def).
        self.compact = False
        self.keep_names: set[str] = set()
        self.local_names: set[str] = set()  # names imported from the project's own modules
        self.local_roots: set[str] = set()  # the project's own modules, as imported
        self.keep_plain = False
        self.script_dir = None

    def visit(self, node: ast.AST) -> Any:
        # NodeVisitor's own dispatch builds a method name for every node; a table per class is
        # what keeps a 14 MB file in seconds.
        method = self._methods.get(node.__class__)
        if method is None:
            method = getattr(self, "visit_" + node.__class__.__name__, None) or self.generic_visit
            self._methods[node.__class__] = method
        return method(node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def _block(self, stmts: list[ast.stmt]) -> None:
        state = self.block_start()
        for stmt in stmts:
            self.block_step(state, stmt)
        self.block_end(state)

    # A block is walked as start / one step per statement / end, so that a module read one
    # top-level statement at a time (a big file, see `_stream_scan`) is walked as one block.
    def block_start(self) -> list[int]:
        self._path.append(False)
        return [0, 0]  # (guards raised, rank-0-first sections raised) in this block

    def block_step(self, state: list[int], stmt: ast.stmt) -> None:
        if self.first_stmt is None:
            self.first_stmt = stmt  # the script's first statement (its first line, for file-wide findings)
        before = self._set_devices
        self.visit(stmt)
        # `if rank != 0: barrier()` ... work ... `if rank == 0: barrier()`: rank 0 goes first.
        if isinstance(stmt, ast.If) and _mentions_rank(stmt.test) and not stmt.orelse and any(
                isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == "barrier" for b in stmt.body for n in ast.walk(b)):
            self._first += 1
            state[1] += 1
        if self._set_devices > before and (
                not isinstance(stmt, _BRANCHING) or getattr(stmt, "_both_set_device", False)):
            self._path[-1] = True  # set_device ran on the path of everything after this statement
        # `if rank != 0: return` guards everything after it in the same block.
        if isinstance(stmt, ast.If) and self._rank_test(stmt.test) and _exits(stmt.body) and not stmt.orelse:
            self._guard += 1
            state[0] += 1

    def block_end(self, state: list[int]) -> None:
        self._path.pop()
        self._guard -= state[0]
        self._first -= state[1]

    def visit_Module(self, node: ast.Module) -> None:
        self._block(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        # A function body starts unguarded: whether it runs on one rank depends on its callers.
        outer, self._guard = self._guard, 0
        outer_path, self._path = self._path, []
        self._functions.append(node.name)
        self.defined.add(node.name)
        if node.name == "prepare_data":  # Lightning calls it on one process per node (or globally) only
            self._guard += 1
        if node.name in _SILENCERS:
            self.silenced = True
        self._block(node.body)
        self._functions.pop()
        self._guard = outer
        self._path = outer_path

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        guarded = self._rank_test(node.test)
        self._guard += guarded
        start = self._set_devices
        # The test's text only matters once some `if` set the device (a dump per `if` is what a big file pays for).
        test = ast.dump(node.test) if self._device_conditions else None
        again = test in self._device_conditions  # `if args.distributed:` again, after one that set the device
        if again:
            self._path.append(True)
        self._block(node.body)
        if again:
            self._path.pop()
        in_body = self._set_devices > start
        if in_body:
            self._device_conditions.add(test if test is not None else ast.dump(node.test))
        middle = self._set_devices
        self._block(node.orelse)  # `else` of a rank check is also one-rank code
        node._both_set_device = in_body and self._set_devices > middle  # type: ignore[attr-defined]
        self._guard -= guarded

    def _loop_body(self, node: ast.For | ast.While | ast.AsyncFor) -> None:
        self.nested_loop = self.nested_loop or self._loops > 0
        self._loops += 1
        self._block(node.body)
        self._loops -= 1
        self._block(node.orelse)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._loop_body(node)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_While(self, node: ast.While) -> None:
        self.visit(node.test)
        self._loop_body(node)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item)
        # `with accelerator.main_process_first():` / `training_args.main_process_first()`: the
        # main process runs the body first, the others after it (from its cache).
        first = any("main_process_first" in _dotted(getattr(i.context_expr, "func", i.context_expr)) for i in node.items)
        self._first += first
        self._block(node.body)
        self._first -= first

    def visit_Try(self, node: ast.Try) -> None:
        self._block(node.body)
        for h in node.handlers:
            self._block(h.body)
        self._block(node.orelse)
        self._block(node.finalbody)

    def visit_Call(self, node: ast.Call) -> None:
        func = _dotted(node.func)
        short = _name_of(func)
        self.short_names.add(short)
        if "cuda" in func.split(".") or func.endswith(".cuda"):
            self.cuda_call = True
        if func.endswith("set_epoch"):
            self.set_epoch_call = True
        if func.endswith(("set_device", "set_device_index")):
            self.set_device_call = True
        if not self.compact or self._judged(node, func, short):
            self.calls.append((node, self._guard > 0))
            if self._first:
                self.first.add(id(node))
            self.enclosing[id(node)] = tuple(self._functions)
        if short in ("set_device", "set_device_index"):
            self._set_devices += 1
            if self._functions:
                self.sets_device_in.add(self._functions[-1])
        elif short in ("DistributedDataParallel", "DDP"):
            self.device_before[id(node)] = any(self._path)
        elif short in ("setLevel", "basicConfig") and _mentions_rank(node):
            self.silenced = True
        elif short in _SILENCERS:
            self.silenced = True
        self.generic_visit(node)

    def _judged(self, node: ast.Call, func: str, short: str) -> bool:
        """Whether some rule looks at this call (compact mode keeps only those)."""
        return (short in _JUDGED_CALLS or short in self.keep_names or short in self.aliases
                or (self.keep_plain and isinstance(node.func, ast.Name))
                or short in self.local_names or func.split(".")[0] in self.local_roots
                or any(k.arg in ("download", "pretrained") for k in node.keywords))

    def _note_local(self, node: ast.Import | ast.ImportFrom) -> None:
        """Compact mode: remember the names the script takes from its own project's modules (their
        calls are judged against what those modules do)."""
        if self.script_dir is None:
            return
        from pathlib import Path

        def local(name: str | None) -> bool:
            if not name:
                return False
            rel = Path(*name.split("."))
            return any((root / rel.with_suffix(".py")).is_file() or (root / rel / "__init__.py").is_file()
                       for root in (self.script_dir, self.script_dir.parent))

        if isinstance(node, ast.ImportFrom):
            if node.level or local(node.module) or any(local(f"{node.module}.{a.name}") for a in node.names):
                if any(a.name == "*" for a in node.names):
                    self.keep_plain = True  # `from utils import *`: any plain call may be one of its functions
                self.local_names |= {a.asname or a.name for a in node.names}
                self.local_roots |= {a.asname or a.name for a in node.names}
        else:
            for a in node.names:
                if local(a.name):
                    self.local_roots.add(a.asname or a.name.split(".")[0])

    def one_rank_functions(self) -> set[str]:
        """Functions of this file that are only ever called under a rank check."""
        only: set[str] = set()
        while True:
            sites: dict[str, list[bool]] = {}
            for call, guarded in self.calls:
                # f(...) and self.f(...) both count as calls of a function f defined in this file.
                name = call.func.id if isinstance(call.func, ast.Name) else (
                    call.func.attr if isinstance(call.func, ast.Attribute) else None)
                if name in self.defined:
                    inside = any(f in only for f in self.enclosing.get(id(call), ()))
                    sites.setdefault(name, []).append(guarded or inside)
            grown = {name for name, flags in sites.items() if flags and all(flags)}
            if grown <= only:
                return only
            only |= grown

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.imports.append(node)
        if self.compact:
            self._note_local(node)
        for a in node.names:
            if a.asname and a.name in ("DistributedDataParallel", "DistributedSampler", "init_process_group"):
                self.aliases.add(a.asname)

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.append(node)
        if self.compact:
            self._note_local(node)

    def _rank_test(self, test: ast.AST) -> bool:
        """A rank check, or a test of a flag computed from one (`args.save_logs = ... and is_master(args)`)."""
        return _mentions_rank(test) or any(_dotted(n) in self.flags for n in ast.walk(test)
                                           if isinstance(n, (ast.Name, ast.Attribute)))

    def visit_Assign(self, node: ast.Assign) -> None:
        if not self.compact or any(_RENDEZVOUS_TARGET.search(_dotted(t).lower()) or (
                isinstance(t, ast.Subscript) and _dotted(t.value) == "os.environ") for t in node.targets):
            self.assigns.append((node, self._guard > 0))
        if len(node.targets) == 1 and not isinstance(node.value, (ast.Call, ast.Subscript, ast.Constant)) \
                and _dotted(node.targets[0]) and _mentions_rank(node.value):
            self.flags.add(_dotted(node.targets[0]))
        for t in node.targets:
            if _dotted(t) in ("builtins.print", "__builtin__.print", "__builtins__.print"):
                self.silenced = True
        if len(node.targets) == 1:
            name = _dotted(node.targets[0])
            if isinstance(node.value, ast.Constant) and isinstance(node.targets[0], ast.Name):
                self.constants[name] = node.value.value
            elif name and _holds_global_rank(node.value):
                self.rank_names.add(name)
        self.generic_visit(node)


_BRANCHING = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _holds_global_rank(value: ast.AST) -> bool:
    """`int(os.environ["RANK"])`, `os.environ.get("RANK")`, `os.getenv("RANK")`, `dist.get_rank()`
    (not LOCAL_RANK). Looked at shallowly: it runs on every assignment of the file."""
    if isinstance(value, ast.Call):
        func = _dotted(value.func)
        if _name_of(func) == "get_rank":
            return True
        if func == "int" and value.args:
            return _holds_global_rank(value.args[0])
        if _name_of(func) in ("get", "getenv") and value.args:
            return isinstance(value.args[0], ast.Constant) and value.args[0].value == "RANK"
    if isinstance(value, ast.Subscript) and _dotted(value.value).endswith("environ"):
        return isinstance(value.slice, ast.Constant) and value.slice.value == "RANK"
    return False


def _name_of(func: str) -> str:
    return func.rsplit(".", 1)[-1]


# A function whose name says it saves: the fix for it is at its call (`if rank == 0: save_checkpoint()`).
_SAVE_HELPER = re.compile(r"save|checkpoint|ckpt|dump|export|write|snapshot", re.IGNORECASE)


def _calls_function(func: str, name: str) -> bool:
    """`func` (a call's dotted name) calls this file's function or method `name`: `name(...)`,
    `self.name(...)`, `cls.name(...)`; never `model.name(...)` on some object."""
    if func == name:
        return True
    head, _, last = func.rpartition(".")
    return last == name and head in ("self", "cls")


# --- what the script's own project does elsewhere -------------------------------------------

# A helper that silences every rank but one (DETR/MoCo's setup_for_distributed, YOLOv5's logging).
_SILENCERS = {"setup_for_distributed", "setup_print", "suppress_print", "silence_print", "disable_print",
              "is_master_print", "set_logging", "setup_logger", "init_distributed_mode", "init_distributed"}
# Every call some rule judges, by its last name (`_lint_scanned`); a call named otherwise matters
# only as a fact (`short_names`, `cuda_call`, ...) or as a call of the file's own functions.
_JUDGED_CALLS = frozenset({
    "DataParallel", "data_parallel", "DistributedDataParallel", "DDP", "set_device", "set_device_index", "to", "cuda",
    "load", "list", "init_process_group", "destroy_process_group", "add_argument", "print", "save", "SummaryWriter",
    "open", "tqdm", "DataLoader", "DistributedSampler", "barrier", "spawn", "setLevel", "basicConfig", "disable",
}) | _DOWNLOADERS | OUTPUT_LOG_METHODS | _SILENCERS
_RENDEZVOUS_TARGET = re.compile(r"dist_url|init_method|master_port")


def _silences_output(tree: ast.AST) -> bool:
    """Whether code replaces print on other ranks (`builtins.print = ...`), defines or calls a
    known silencing helper, or sets a logging level that depends on the rank."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if _dotted(t) in ("builtins.print", "__builtin__.print", "__builtins__.print"):
                    return True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _SILENCERS:
            if any(isinstance(n, ast.Assign) and any(_dotted(t).endswith(".print") for t in n.targets) for n in ast.walk(node)) \
                    or any(isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in ("setLevel", "basicConfig", "disable")
                           and _mentions_rank(n) for n in ast.walk(node)):
                return True
        elif isinstance(node, ast.Call) and _name_of(_dotted(node.func)) in ("setLevel", "basicConfig") and _mentions_rank(node):
            return True
    return False


def _local_modules(tree: ast.AST, path, imports: list | None = None) -> list:
    """The project's own modules the script imports (files beside it or in its folders), read
    and parsed; what cannot be found or parsed is left out. `imports`: the script's import
    statements when already collected (the scanner does), else they are looked for in `tree`."""
    from pathlib import Path

    if path is None:
        return []
    base = Path(path).resolve().parent
    names: list[str] = []
    for node in (ast.walk(tree) if imports is None else imports):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            names.extend([node.module] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    found, seen = [], set()

    def add(cand: Path) -> ast.AST | None:
        if cand in seen or not cand.is_file() or cand.stat().st_size > 2_000_000 or len(seen) > 50:
            return None
        seen.add(cand)
        try:
            module = ast.parse(cand.read_bytes())
        except (SyntaxError, ValueError, RecursionError, OSError):
            return None
        found.append(module)
        return module

    for name in names:
        rel = Path(*name.split("."))
        for root in (base, base.parent):
            for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                module = add(cand)
                if module is not None and cand.name == "__init__.py":
                    # A package re-exports its modules (`from .train_utils import *`): read those too.
                    for node in ast.walk(module):
                        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                            add(cand.parent / Path(*node.module.split(".")).with_suffix(".py"))
    return found


def _is_download_call(call: ast.Call) -> bool:
    func = _dotted(call.func)
    short = _name_of(func)
    on = [k for k in call.keywords if k.arg in ("download", "pretrained")
          and not _is_const(k.value, False) and not _is_const(k.value, None)]
    return bool(on) or short in _DOWNLOADERS or func in ("evaluate.load", "torch.hub.load", "torch.hub.list")


def _downloading_functions(modules: list) -> dict[str, str]:
    """Functions of the project's own modules that download without a rank check: name -> what."""
    out: dict[str, str] = {}
    for module in modules:
        for fn in ast.walk(module):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            guarded_lines = {n.lineno for stmt in ast.walk(fn) if isinstance(stmt, ast.If) and _mentions_rank(stmt.test)
                             for b in stmt.body for n in ast.walk(b) if hasattr(n, "lineno")}
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _is_download_call(n) and n.lineno not in guarded_lines:
                    out[fn.name] = f"{_name_of(_dotted(n.func))} at line {n.lineno} of its module"
                    break
    return out


def _reachable_call(modules: list, name: str, script_calls: set[str]) -> bool:
    """Whether the project's own modules call `name` where the script gets to it: at a module's
    top level, or in a function the script calls (one level). A wrapper nobody calls does not count."""
    for module in modules:
        for fn in ast.walk(module):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in script_calls and any(
                    isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == name for n in ast.walk(fn)):
                return True
        for stmt in getattr(module, "body", []):
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                    isinstance(n, ast.Call) and _name_of(_dotted(n.func)) == name for n in ast.walk(stmt)):
                return True
    return False


def _mentions_rank_value(node: ast.AST) -> bool:
    """A file name that contains the rank (`f"ckpt_{rank}.pt"`): every rank writes its own file."""
    return _mentions_rank(node) or any(
        isinstance(n, ast.Name) and n.id.lower() in GPU_NAMES for n in ast.walk(node))


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
        if short == "add_argument" and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                           and re.search(r"dist[-_]url|master[-_]port|init[-_]method", a.value) for a in call.args):
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
            if func == "open" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) \
                    and str(call.args[1].value)[:1] in ("a", "w") and isinstance(call.args[0], ast.Constant):
                add("save-on-every-rank", call, f"every rank writes {call.args[0].value!r} at once: lines interleave or the file is cut",
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
_CHUNK_BYTES = 256 * 1024
# A line that may start a top-level statement: not indented, not a comment or a closing bracket,
# not the continuation of a compound statement.
_MAY_START_LINE = re.compile(r"^(?!(?:else|elif|except|finally)\b)[^\s#)\]}]", re.M)


def _top_level_chunks(source: str, label: str):
    """The syntax trees of consecutive groups of top-level statements, about _CHUNK_BYTES each.

    A cut is tried only where a line could start a statement; a group that does not compile on
    its own (the cut fell inside a string, brackets, a decorator or a compound statement) grows to
    the next possible cut. Python's own SyntaxError (with its true line) is raised for a script
    that does not compile at all. Line numbers are the script's: each group is compiled after as
    many newlines as lines come before it."""
    cuts = [0] + [m.start() for m in _MAY_START_LINE.finditer(source) if m.start()] + [len(source)]
    k, line = 0, 0  # the group's first cut, and the number of lines before it
    while k < len(cuts) - 1:
        j = k + 1
        while j < len(cuts) - 1 and cuts[j] - cuts[k] < _CHUNK_BYTES:
            j += 1
        while True:
            text = source[cuts[k]:cuts[j]]
            try:
                tree = compile("\n" * line + text, label, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
                break
            except SyntaxError:
                if j >= len(cuts) - 1:
                    # Not a bad cut: the script itself does not compile. Python's own words and line.
                    compile(source, label, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
                    raise
                j += 1
        yield tree
        line += text.count("\n")
        k = j


_DEF_NAME = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


def _stream_scan(source: str, label: str, path=None) -> _Scanner:
    """One scan of a big script, top-level statement groups parsed and walked one after another,
    keeping only what the rules judge (the rest is freed with its group)."""
    from pathlib import Path

    scan = _Scanner()
    scan.compact = True
    scan.keep_names = set(_DEF_NAME.findall(source))
    scan.script_dir = Path(path).resolve().parent if path else None
    state = scan.block_start()
    for chunk in _top_level_chunks(source, label):
        for stmt in chunk.body:
            scan.block_step(state, stmt)
        chunk = stmt = None  # the group's tree goes now, but for what the scan keeps of it
        _RANK_CACHE.clear()  # it holds the group's nodes
    scan.block_end(state)
    return scan


class _no_gc:
    """Python's cycle collector off while a syntax tree is built and walked: a big file's tree is
    millions of objects without cycles, and each collection would scan them all again (a 1 MB
    script lints in 1.5 s instead of 2 s, a 14 MB one in a fraction of the time). Restored after."""

    def __enter__(self):
        import gc

        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc) -> None:
        import gc

        if self.was:
            gc.enable()


def _deep(work):
    """Run `work` in a thread with a large stack and recursion limit: valid Python with a
    500-term expression or a long elif chain is deeper than the default limit of the tree walk."""
    import sys
    import threading

    result: dict = {}

    def run() -> None:
        old = sys.getrecursionlimit()
        try:
            sys.setrecursionlimit(max(old, 50_000))
            result["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc
        finally:
            sys.setrecursionlimit(old)

    size = threading.stack_size()
    try:
        try:
            threading.stack_size(512 * 1024 * 1024)
        except (ValueError, RuntimeError):  # a platform that refuses the size: the default stack
            pass
        t = threading.Thread(target=run, name="gpurig-lint")
        t.start()
    finally:
        threading.stack_size(size)
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
