"""What `gpurig lint` decides once the whole script is scanned: tests that became rank checks further
down the file, writes a function of the script makes to the path it is given (judged at its calls),
and set_epoch given a value its epoch loop never changes."""

from __future__ import annotations

import ast
import re

from gpurig.diagnose.lint_growth import _module_name, _worker_starters
from gpurig.diagnose.lint_guards import _all_but_one, _is_main_test, _mentions_rank
from gpurig.diagnose.lint_modules import _at
from gpurig.diagnose.lint_nodes import (
    _ENDLESS,
    _EVAL_DATA,
    _calls_function,
    _dotted,
    _name_of,
    _worker_started,
)
from gpurig.diagnose.lint_project import (
    _group_joiners,
    _is_download_call,
    _mentions_rank_value,
    _reachable_call,
)


def _late_test(test: ast.AST, function: str | None = None, params: list[str] = ()) -> tuple | None:
    """What of an `if` test may make it a rank check once the file is read: (the attributes it tests,
    one may be a flag set further down; in `not X or <rank check>`, the X, the flag the process group
    may start under; a parameter of the enclosing `function` tested as it is, `(function, name)`, which
    every call may hand a rank flag)."""
    attrs = frozenset(_dotted(n) for n in ast.walk(test) if isinstance(n, ast.Attribute))
    handed = (function, test.id) if function and isinstance(test, ast.Name) and test.id in params else None
    gate = None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        nots = [v for v in test.values if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not)
                and isinstance(v.operand, (ast.Name, ast.Attribute))]
        if len(nots) == 1 and all(_mentions_rank(v) for v in test.values if v is not nots[0]):
            gate = _dotted(nots[0].operand)
    return (attrs, gate, handed) if attrs or gate or handed else None


def resolve_late(scan) -> None:
    """Once the whole file is scanned: a call under a test that became a rank check further down
    is guarded. An attribute flag set later from a rank check (`args.save_logs = args.logs and
    is_master(args)` in main(), tested in save_checkpoint() above it), `not X or rank == 0`
    where X is the flag the process group starts under (`if distributed: init_process_group(...)`:
    without it there is one process), and a parameter every call hands a rank flag."""
    handed: dict[tuple[str, str], bool] = {}  # (function, parameter) -> every call hands it a rank flag

    def hands(key) -> bool:
        if key is not None and key not in handed:
            handed[key] = _hands_rank_flag(scan, *key)
        return key is not None and handed[key]

    for i, tests in scan.late_calls:
        if any(attrs & scan.flags or (gate is not None and gate in scan.group_gates) or hands(key) for attrs, gate, key in tests):
            scan.calls[i] = (scan.calls[i][0], True)
    scan.late_calls = []


def _hands_rank_flag(scan, function: str, param: str) -> bool:
    """Whether every call of the file's `function()` gives `param` a rank flag: a name set from a rank
    check (`verbose = dist.get_rank() == 0`) or such a check itself, by position or by keyword."""
    index = scan.params.get(function, []).index(param) if param in scan.params.get(function, []) else -1
    values = []
    for call, _ in scan.calls:
        if isinstance(call.func, ast.Name) and call.func.id == function:
            given = [k.value for k in call.keywords if k.arg == param]
            if not given and 0 <= index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
                given = [call.args[index]]
            values.append(given[0] if given else None)
    return bool(values) and all(
        v is not None and (_dotted(v) in scan.flags if isinstance(v, (ast.Name, ast.Attribute))
                           else isinstance(v, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and _mentions_rank(v) and not _all_but_one(v))
        for v in values)


def _loop_names(loop: ast.For) -> set[str]:
    """The names (and attributes) a `for` loop changes: its target, and what its body assigns."""
    names = {_dotted(n) for n in ast.walk(loop.target) if isinstance(n, (ast.Name, ast.Attribute))}
    for n in ast.walk(loop):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
        names |= {_dotted(t) for t in targets if isinstance(t, (ast.Name, ast.Attribute))}
    return names


def fixed_epoch(call: ast.Call, loops: list) -> bool:
    """`for epoch in range(n): sampler.set_epoch(args.epoch)` (or `set_epoch(0)`): a set_epoch inside
    `for` loops given a value none of them changes, a number or a setting (`args.epoch`,
    `cfg.start_epoch`; never `self.epoch`, which a method may advance): the same shuffle every epoch."""
    if not loops or not (isinstance(call.func, ast.Attribute) and call.func.attr == "set_epoch" and len(call.args) == 1):
        return False
    if _EVAL_DATA.search(_dotted(call.func.value) or ""):
        return False  # `valid_queue.sampler.set_epoch(0)`: an evaluation order kept fixed on purpose
    arg = call.args[0]
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, int) and not isinstance(arg.value, bool)
    root = arg
    while isinstance(root, ast.Attribute):
        root = root.value
    if not (isinstance(arg, ast.Attribute) and isinstance(root, ast.Name) and root.id not in ("self", "cls")):
        return False
    names = set().union(*(_loop_names(loop) for loop in loops))
    return _dotted(arg) not in names and root.id not in names


def _fixed_set_epochs(module: ast.AST) -> dict[str, str]:
    """Functions of the project's modules with such a set_epoch: name -> "file:line, file:line" (each)."""
    lines: dict[str, list[int]] = {}
    stack: list[tuple[ast.AST, list, str]] = [(module, [], "")]  # (no recursive closure: nothing is left in a cycle)
    while stack:
        node, loops, fn = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stack.append((child, [], child.name))
            elif isinstance(child, (ast.For, ast.AsyncFor)):
                stack.append((child, [*loops, child], fn))
            else:
                if fn and isinstance(child, ast.Call) and fixed_epoch(child, loops):
                    lines.setdefault(fn, []).append(child.lineno)
                stack.append((child, loops, fn))
    return {fn: ", ".join(_at(module, n) for n in sorted(found)) for fn, found in lines.items()}


def report_param_writes(param_writes, scan, calls, add, named_path, never_run, here) -> None:
    """A function of this file that writes the file it is given (`def plot_metrics(..., save_path):
    plt.savefig(save_path)`), called on every rank with one fixed path: every rank writes that file."""
    for fn, param, write in param_writes:
        params = scan.params.get(fn, [])
        for site, f2, g2 in calls:
            if g2 or not _calls_function(f2, fn) or never_run(site):
                continue
            at = params.index(param) - (1 if params[:1] in (["self"], ["cls"]) and "." in f2 else 0)
            given = next((k.value for k in site.keywords if k.arg == param), site.args[at] if 0 <= at < len(site.args) else None)
            written = None if given is None else named_path(site, given)
            if written is not None and not _mentions_rank_value(written) \
                    and any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(written)):
                add("save-on-every-rank", site, f"{fn}() writes the file it is given ({ast.unparse(written)[:60]}) on every rank "
                    f"at once (line {write.lineno}): the file is cut", f"Call it from one rank: `if rank == 0: {fn}(...)`.",
                    f"{here}:{write.lineno}")


def report_fixed_epochs(scan, calls, modules, add, reported_helpers) -> None:
    """set_epoch given a value the epoch loop never changes (`set_epoch(args.epoch)`, `set_epoch(0)`),
    in the script or in a function of its project the script calls (wherever it is: set_epoch is only
    ever called for a DistributedSampler)."""
    for call in scan.fixed_epochs:
        add("sampler-without-set-epoch", call, f"set_epoch({ast.unparse(call.args[0])[:40]}) is given the same value every epoch: "
            "every epoch sees the same order", "Pass the loop's epoch: sampler.set_epoch(epoch).")
    fixed_in = {name: where for m in modules for name, where in _fixed_set_epochs(m).items()}
    for call, func, _ in calls:
        short = _name_of(func)
        if short in fixed_in and short not in scan.defined and ("fixed-epoch", short) not in reported_helpers:
            reported_helpers.add(("fixed-epoch", short))
            add("sampler-without-set-epoch", call, f"{short}() calls set_epoch with a value its epoch loop never changes "
                f"({fixed_in[short]}): every epoch sees the same order", "Pass the loop's epoch: sampler.set_epoch(epoch).",
                fixed_in[short])


def endless_samplers(modules: list) -> set[str]:
    """Functions of the project's own modules that build a DistributedSampler and hand what reads it to an
    endless iterator (`self.loader = cycle(DataLoader(data, sampler=sampler))`, lightweight-gan's trainer):
    a run that steps through it goes over the data epoch after epoch, though the script has no epoch loop."""
    out = set()
    for module in modules:
        for fn in ast.walk(module):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                called = {_name_of(_dotted(n.func)) for n in ast.walk(fn) if isinstance(n, ast.Call)}
                if "DistributedSampler" in called and any(_ENDLESS.fullmatch(name) for name in called):
                    out.add(fn.name)
    return out


def ends_group(modules: list, script_calls: set[str]) -> bool:
    """Whether the project's own modules end the process group where the script gets to it: a
    destroy_process_group the script's calls reach, or, where the script's calls do not reach the
    group's start either (a click or fire command the script hands over to, `cli()` -> `train()`),
    one reached from a function that starts the group (`train()`: setup() ... cleanup())."""
    if _reachable_call(modules, "destroy_process_group", script_calls):
        return True
    return "init_process_group" not in script_calls and not _reachable_call(modules, "init_process_group", script_calls) \
        and _reachable_call(modules, "destroy_process_group", _group_joiners(modules))


# A place in the project a finding names: "utils/dataset.py:22", "config/train.yaml:4" (never part of a longer name or number).
PLACE = re.compile(r"(?<![\w./-])([\w.-][\w./-]*\.(?:py|json|ya?ml):\d+)(?!\d)")

# Library functions that start the process group and never end it: OpenMMLab's `init_dist(launcher)`,
# timm's `utils.init_distributed_device(args)` (its train.py's).
_LIBRARY_STARTERS = {"init_dist": ("mmcv", "mmengine"), "init_distributed_device": ("timm",)}
# (called by their full dotted name: `mmcv.runner.init_dist(...)`, `timm.utils.init_distributed_device(...)`)
LIBRARY_INIT_DIST = re.compile("|".join(rf"(?:{'|'.join(libs)})(?:\.\w+)*\.{fn}" for fn, libs in _LIBRARY_STARTERS.items()))


def library_group_starters(imports) -> set[str]:
    """The names under which import statements bring in such a function: `from mmcv.runner import
    init_dist` (init_dist), `from timm import utils` or `import timm.utils as utils`
    (utils.init_distributed_device)."""
    out: set[str] = set()
    for node in imports:
        if isinstance(node, ast.Import):  # (`import timm.utils as utils`: utils.init_distributed_device)
            out.update(f"{a.asname}.{fn}" for a in node.names if a.asname for fn, libs in _LIBRARY_STARTERS.items()
                       if a.name.split(".")[0] in libs)
        top = (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else ""
        for fn, libs in _LIBRARY_STARTERS.items() if top else ():
            if top in libs:
                out.update(a.asname or a.name for a in node.names if a.name == fn)
                out.update(f"{a.asname or a.name}.{fn}" for a in node.names if a.name != fn and a.name.islower() and a.name != "*")
    return out


def report_group_left_open(scan, calls: list, names: set[str], modules: list, module_calls: set[str], text: str,
                           destroys_in_modules: bool, started: ast.Call | None, findings: list, add) -> None:
    """no-destroy-process-group where the group starts outside the script's own init_process_group:
    in the project's own module (utils.init_distributed_mode, or a library's init_dist called there),
    or in a library function the script calls (`started`); the script still has to end it. Not where
    the script hands its own main function to a launcher of its project (`launch(main, num_gpus, ...)`,
    as detectron2's and YOLOX's): the launcher owns the group."""
    fix = "End the script (every rank) with dist.barrier() then dist.destroy_process_group(), e.g. in a `finally:`."
    if "destroy_process_group" in names or destroys_in_modules:
        return
    launchers = _worker_starters(modules)
    launcher = any(isinstance(c.func, ast.Name) and c.func.id in launchers and c.func.id not in scan.defined
                   and c.args and isinstance(c.args[0], ast.Name) and c.args[0].id in scan.defined for c, _, _ in calls)
    starts_in_modules = "init_process_group" in module_calls or any(starts_library_group(m) for m in modules)
    if "init_process_group" not in names and starts_in_modules and not left_to_framework(modules, names | {f for _, f, _ in calls}, text) \
            and not launcher:
        add("no-destroy-process-group", scan.first_stmt if scan.first_stmt is not None else ast.Pass(),
            "the process group starts in this project's own module and nothing ever calls destroy_process_group", fix)
    if started is not None and not any(f.id == "no-destroy-process-group" for f in findings):
        add("no-destroy-process-group", started, f"{_dotted(started.func)}() starts the process group and nothing ever calls "
            "destroy_process_group", fix)


def library_group_start(imports, calls: list) -> ast.Call | None:
    """The script's first call of a library function that starts the process group, if any."""
    names = library_group_starters(imports)
    return next((c for c, f, _ in calls if f in names or LIBRARY_INIT_DIST.fullmatch(f)), None)


def helper_writes_said(short: str, writes: str) -> tuple[str, str]:
    """(title, fix) of a project function called on every rank that writes shared files: its first
    write, and how many more (each of them is among the finding's places)."""
    first, *more = writes.split("; ")
    shown = first + (f" and {len(more)} more write{'s' * (len(more) > 1)}" if more else "")
    places = PLACE.findall("; ".join(more))
    return (f"{short}() saves {'(' + shown + ')' if shown.startswith('through') else 'with ' + shown} on every rank: "
            "they write the same file at once",
            f"Call it from one rank: `if rank == 0: {short}(...)`, then dist.barrier() before anyone reads it"
            + (f"; where it does more than save (a training loop), put each write in it under a rank check "
               f"(also {', '.join(places[:5])}{' ...' if len(places) > 5 else ''})." if places else "."))


def starts_library_group(module: ast.AST) -> bool:
    """Whether a module of the project calls a library's init_dist it imports (or names in full)."""
    names = library_group_starters(n for n in ast.walk(module) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return any(isinstance(n, ast.Call) and (_dotted(n.func) in names or LIBRARY_INIT_DIST.fullmatch(_dotted(n.func)))
               for n in ast.walk(module))


def left_to_framework(modules: list, script_calls: set[str], text: str) -> bool:
    """Whether a Lightning or Accelerate script leaves its process group to the framework: the
    project's own init_process_group (a helper of another entry point) is not where it gets to."""
    return re.search(r"^\s*(?:from|import)\s+(?:lightning|pytorch_lightning|accelerate)\b", text, re.M) is not None \
        and not _reachable_call(modules, "init_process_group", script_calls)


def worker_calls(calls: list, defined: set[str]) -> list:
    """The project's function started as every rank's worker (`mp.spawn(train, ...)`,
    `Process(target=train)`), as a call of it at that line: it runs on every rank."""
    out = []
    for c, _, _ in calls:
        worker = _worker_started(c)
        if isinstance(worker, ast.Name) and worker.id not in defined:
            out.append((ast.Call(func=ast.Name(id=worker.id, ctx=ast.Load()), args=[], keywords=[], lineno=c.lineno,
                                 col_offset=c.col_offset, end_lineno=c.end_lineno, end_col_offset=c.end_col_offset),
                        worker.id, False))
    return out


def import_time_fetches(modules: list, imports: list) -> list[tuple[ast.AST, str]]:
    """(an import of the script, "MNIST() at utils.py:6; ...") for each project module it imports
    whose own top-level code fetches (`train_dataset = MNIST(root, download=True)` in utils.py): that
    code runs as the module is imported, in every rank at once. Code under `if __name__ ==
    "__main__":` or a rank check, and inside functions and classes, is not import-time code."""
    out, named = [], {id(m): _module_name(m) for m in modules}
    for node in imports:
        if isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module else [a.name for a in node.names]
        else:
            names = [a.name for a in node.names]
        for module in modules:
            dotted = named.get(id(module))
            if dotted is None or not any(dotted == n or dotted.endswith("." + n) for n in names if n):
                continue
            del named[id(module)]  # reported once, at the first import of it
            todo, sites = list(module.body), []
            while todo:
                stmt = todo.pop(0)
                if isinstance(stmt, ast.If):
                    if not _is_main_test(stmt.test) and not _mentions_rank(stmt.test):
                        todo[:0] = stmt.body + stmt.orelse
                elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    sites += [f"{_name_of(_dotted(n.func))}() at {_at(module, n.lineno)}" for n in ast.walk(stmt)
                              if isinstance(n, ast.Call) and _is_download_call(n)]
            if sites:
                out.append((node, "; ".join(sites)))
    return out
