"""What `gpurig lint` reads in a script: one pass of Python's `ast` over it (`_Scanner`) that keeps
the calls and assignments the rules judge, with the rank checks around them; and, for a big
script, the same pass one top-level statement at a time (`_stream_scan`), so its whole tree is
never held.
"""

from __future__ import annotations

import ast
import re
from typing import Any

RANK_WORDS = ("rank", "is_main", "main_process", "master", "is_master", "is_primary", "primary", "local_zero", "global_zero")
RANK_NAMES = {"main", "leader", "is_leader", "zero"}  # whole names that only make sense as "the rank that speaks"
# Names of the process's GPU index: `if gpu == 0` / `if self.gpu_id == 0` picks one process as well.
GPU_NAMES = {"gpu", "gpu_id", "gpu_idx", "device_id", "local_gpu", "cuda_id", "gpu_index", "device_index"}
# Calls that fetch from the network into a shared cache (the Hub, torch.hub, dataset hubs).
_DOWNLOADERS = {"from_pretrained", "load_dataset", "load_state_dict_from_url", "hf_hub_download", "snapshot_download",
                "download_url", "download_and_extract_archive"}
OUTPUT_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


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


def _bypassed(test: ast.AST, word: str = "distributed") -> bool:
    """`not args.multiprocessing_distributed or rank % ngpus == 0`: an `or` that every rank passes
    when the run was started without that flag (torchrun, one process per node). `word`: what the
    negated flag must be named after."""
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        _not_distributed(v) and word in _dotted(v.operand).lower() for v in test.values)


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
    if _bypassed(test):
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
        """A rank check, or a test of a flag computed from one (`args.save_logs = ... and is_master(args)`);
        never `not distributed or ...`, which every rank passes when started without that flag."""
        if _bypassed(test, "multiprocessing"):
            return False
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
