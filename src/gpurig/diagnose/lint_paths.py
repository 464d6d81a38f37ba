"""What a project function writes or fetches, read through its own variables: the path of an
`open(..., "w")` (`dump = os.path.join(folder, "params.yaml")`, or a parameter's default: `def
write_config(cfg, output_dir, name="config.yaml")`), and torchvision weights held in a name
(`weights = ResNet50_Weights.IMAGENET1K_V2`)."""

from __future__ import annotations

import ast
import copy
import re
from collections import Counter

from gpurig.diagnose.lint_guards import _mentions_rank
from gpurig.diagnose.lint_nodes import (
    GPU_NAMES,
    _constant_defaults,
    _dotted,
    _kw,
    _name_of,
    _names_weights,
)

# a file name of its own: a log, a config, a table (not a folder, not a checkpoint's parts)
_OWN_FILE = re.compile(r"\w\.(?:log|txt|json|ya?ml|csv|pkl)$")
_DEPTH = 3  # how many assignments a path is followed back through


# a name made unique for each process: `f"batch-{uuid4()}.pt"`, `f"tmp_{os.getpid()}"`, `mkstemp()`
_PER_PROCESS = {"uuid1", "uuid4", "getpid", "mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory"}


def _mentions_rank_value(node: ast.AST) -> bool:
    """A file name that contains the rank (`f"ckpt_{rank}.pt"`), or is unique to the process (a uuid,
    the process id, a temporary file): every rank writes its own file."""
    return _mentions_rank(node) or any(
        isinstance(n, ast.Name) and n.id.lower() in GPU_NAMES
        or isinstance(n, ast.Call) and _name_of(_dotted(n.func)) in _PER_PROCESS for n in ast.walk(node))


def _names_a_file_in(path: ast.AST, params: list[str]) -> bool:
    """A file name of its own joined to a folder the function is given: f"{save_path}/train.log",
    os.path.join(out_dir, "args.json"), out_dir + "/log.txt"."""
    if not isinstance(path, (ast.JoinedStr, ast.BinOp, ast.Call)) or isinstance(path, ast.Call) and _name_of(_dotted(path.func)) != "join":
        return False
    parts = list(ast.walk(path))
    return any(isinstance(n, ast.Name) and n.id in params for n in parts) and any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and _OWN_FILE.search(n.value) for n in parts)


def _assigned_once(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.AST]:
    """The function's local names bound exactly once, by a plain `name = value`: name -> value. A
    name bound again (or by a loop, a `with ... as`, an augmented assignment) may hold anything."""
    bound: Counter = Counter()
    values: dict[str, ast.AST] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                bound.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
            if len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                values[n.targets[0].id] = n.value
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr)):
            bound.update(x.id for x in ast.walk(n.target) if isinstance(x, ast.Name))
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            bound.update(x.id for x in ast.walk(n.optional_vars) if isinstance(x, ast.Name))
    return {name: value for name, value in values.items() if bound[name] == 1}


def objects_built(fn: ast.FunctionDef | ast.AsyncFunctionDef, classes: set[str]) -> dict[str, str]:
    """The function's local names that only ever hold an object of one of `classes` (every plain
    assignment of the name builds one: `trainer = DDPTrainer(...)` in each branch): name -> class. A
    method of that class called on one (`trainer.train()`) is a call of it."""
    built: dict[str, bool] = {}
    for n in ast.walk(fn):
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)) else []):
            for x in ast.walk(t):
                if isinstance(x, ast.Name):
                    built[x.id] = built.get(x.id, True) and t is x and isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) \
                        and isinstance(n.value.func, ast.Name) and n.value.func.id in classes
    kinds = {t.id: n.value.func.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) for t in n.targets if isinstance(t, ast.Name)}
    return {name: kinds[name] for name, ok in built.items() if ok}  # name -> the class (the last assignment's)


def own_file_written(path: ast.AST, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST | None:
    """The path of `open(path, "w")` in `fn` read through its local names and parameter defaults,
    where that names a file of its own (config.json, args.yaml, train.log) in a folder, the same on
    every rank: the expression it comes to, else None. A name bound more than once, a parameter with
    no default or a rank anywhere in it leaves the file unknown or per rank."""
    if isinstance(path, ast.Attribute) and _dotted(path):
        # (`args.deepspeed_config = os.path.join(args.output_dir, "deepspeed_config.json")`, then
        # `open(args.deepspeed_config, "w")`: an attribute the function sets once, to the file it writes)
        sets = [n.value for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if _dotted(t) == _dotted(path)]
        start = sets[0] if len(sets) == 1 and isinstance(sets[0], ast.Call) else None
    else:
        start = path if isinstance(path, ast.Name) else None
    if start is None:
        return None  # (a literal or an expression in place is judged where the open is)
    local = _assigned_once(fn)
    defaults = {k: v for k, v in _constant_defaults(fn).items() if isinstance(v, str)}
    seen: set[str] = set()

    def expand(node: ast.AST, depth: int) -> ast.AST:
        if isinstance(node, ast.Name) and node.id not in seen:
            if node.id in local and depth < _DEPTH:
                seen.add(node.id)
                return expand(local[node.id], depth + 1)
            if node.id in defaults:
                return ast.Constant(defaults[node.id])
            return node
        if isinstance(node, (ast.Call, ast.JoinedStr, ast.BinOp, ast.FormattedValue)):
            node = copy.copy(node)  # (the expansion never changes the script's own tree)
            for field, value in ast.iter_fields(node):
                if isinstance(value, list):
                    setattr(node, field, [expand(v, depth) if isinstance(v, ast.expr) else v for v in value])
                elif isinstance(value, ast.expr):
                    setattr(node, field, expand(value, depth))
        return node

    resolved = expand(start, 0)
    if resolved is path or _mentions_rank_value(resolved):
        return None
    if isinstance(resolved, ast.Constant):
        own = isinstance(resolved.value, str) and _OWN_FILE.search(resolved.value)
    else:
        joins = isinstance(resolved, (ast.JoinedStr, ast.BinOp)) or (
            isinstance(resolved, ast.Call) and _name_of(_dotted(resolved.func)) == "join")
        own = joins and any(isinstance(n, ast.Constant) and isinstance(n.value, str) and _OWN_FILE.search(n.value)
                            for n in ast.walk(resolved))
    return resolved if own else None


def weights_held_in(call: ast.Call, local: dict[str, ast.AST]) -> bool:
    """torchvision's `weights=` given through a local name: `weights = ResNet50_Weights.IMAGENET1K_V2`
    then `resnet50(weights=weights)` (`local`: the function's names bound once, `_assigned_once`)."""
    kw = _kw(call, "weights")
    return kw is not None and isinstance(kw.value, ast.Name) and kw.value.id in local and _names_weights(local[kw.value.id])


def path_given(call: ast.Call, helper: str) -> list[ast.AST]:
    """The arguments of a call of a file-writing helper that can be the path it opens: the one its
    description names ("on the path it is given (filename, argument 3)"), else all of them."""
    m = re.search(r"\((\w+)(?:, argument (\d+))?\)$", helper.split("; ")[0])  # (its first write: what the finding is about)
    by_name = [k.value for k in call.keywords if m and k.arg == m.group(1)]
    if by_name:
        return by_name
    if m and m.group(2) and len(call.args) >= int(m.group(2)):
        return [call.args[int(m.group(2)) - 1]]
    return [*call.args, *(k.value for k in call.keywords)]


def named_path(scan, call: ast.Call, node: ast.AST) -> ast.AST:
    """The path a name stands for in the call's function, when it is given exactly one there; or an
    attribute given one path once in the file (`args.log_file = os.path.join(out, "log.txt")`,
    or a name holding one where it is set)."""
    if isinstance(node, ast.Name):
        inside = scan.enclosing.get(id(call), ())
        return scan.path_vars.get((inside[-1] if inside else "", node.id)) or node
    held = scan.path_attrs.get(_dotted(node)) if isinstance(node, ast.Attribute) else None
    if held is not None:
        value, where = held
        value = scan.path_vars.get((where, value.id)) if isinstance(value, ast.Name) else value
        return value or node
    return node


# Files no other process writes: in memory (io.BytesIO()), or a temporary file or folder of this
# process's own (tempfile.NamedTemporaryFile(), mkstemp(), mkdtemp(), TemporaryDirectory()).
PRIVATE_FILES = frozenset({"BytesIO", "StringIO", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile",
                           "mkstemp", "mkdtemp", "TemporaryDirectory"})


def private_names(target: ast.AST | None, value: ast.AST | None) -> list[str]:
    """The names `target = value` (or `with value as target`) binds to a private file:
    `buf = io.BytesIO()`, `fd, path = tempfile.mkstemp()`, `with tempfile.TemporaryDirectory() as d`."""
    if not (isinstance(value, ast.Call) and _name_of(_dotted(value.func)) in PRIVATE_FILES):
        return []
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)] if isinstance(target, (ast.Name, ast.Tuple)) else []


def in_private_file(target: ast.AST | None, private: set[str]) -> bool:
    """A write to a private file: the name of one, its `.name`, or a path joined under a private
    folder (`os.path.join(tmp_dir, "model.pt")`), or a temporary file made in place."""
    return target is not None and any(isinstance(n, ast.Name) and n.id in private or isinstance(n, ast.Call)
                                      and _name_of(_dotted(n.func)) in PRIVATE_FILES for n in ast.walk(target))


def buffer_names(fn: ast.AST) -> set[str]:
    """Names a function binds to a private file (`buf = io.BytesIO()`, `with io.BytesIO() as f`,
    `tmp = tempfile.NamedTemporaryFile()`)."""
    names: set[str] = set()
    for node in ast.walk(fn):
        pairs = [(t, node.value) for t in node.targets] if isinstance(node, ast.Assign) else (
            [(node.optional_vars, node.context_expr)] if isinstance(node, ast.withitem) else [])
        for target, value in pairs:
            names.update(private_names(target, value))
    return names


def gives_own_file(scan, site: ast.Call, helper: str, call: ast.Call, target: ast.AST | None) -> bool:
    """The call `site` of a save helper gives it a file name of its rank for the parameter the save's
    path is made of: `self.save_model(f'bestmodel_{self.args.rank}.pth')`, where save_model writes
    `self.expPath / filename`. Each rank then writes its own file."""
    params = scan.params.get(helper, [])
    path = named_path(scan, call, target) if target is not None else None
    used = [n.id for n in ast.walk(path) if isinstance(n, ast.Name) and n.id in params] if path is not None else []
    offset = 1 if params[:1] == ["self"] and isinstance(site.func, ast.Attribute) else 0
    for name in used:
        given = next((k.value for k in site.keywords if k.arg == name), None)
        index = params.index(name) - offset
        given = given if given is not None else site.args[index] if 0 <= index < len(site.args) else None
        if given is not None and _mentions_rank_value(given):
            return True
    return False
